"""Every encoder family beyond BERT (issue 31): RoBERTa, XLM-RoBERTa, DistilBERT, MPNet, ELECTRA and ModernBERT.

Each class of each family is built tiny and seeded with a tokenizer of the family's kind trained here
(:mod:`tests.families`), exported without flags and checked: the gate passed on every variant built, the graph
takes the family's inputs, the manifest's token limit is the usable positions, and the runtime's tokens and
answers equal transformers' on the same checkpoint over unicode, pairs and inputs longer than the limit.

Exports are session-scoped (``family_export``, in conftest.py, shared with tests/test_family_surfaces.py) and
built on first use; every class exports fp32, and one class per family also the optimized and int8 variants (the
whole file stays within a few minutes on 2 cores).
"""

from __future__ import annotations

import random
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx, HeadMissingError, VariantMissingError
from bertonnx.info import describe
from bertonnx.manifest import read_manifest
from bertonnx.table import FAMILIES
from bertonnx.tokenizer import TextTokenizer

from .conftest import FAMILY_FULL_VARIANTS, WHEEL_CACHE
from .families import (
    CLASSES,
    FAMILY_PREFIXES,
    TOKENIZER_KINDS,
    build_family_checkpoint,
    build_tokenizer,
    real_mpnet_checkpoint,
    slow_tokenizer,
)

pytest.importorskip("torch")
pytest.importorskip("transformers")

ALL_CLASSES = [name for names in CLASSES.values() for name in names]
FULL_VARIANTS = FAMILY_FULL_VARIANTS
EXACT_ATOL = 1e-4
_LONG = (
    "The history of natural language processing generally started in the 1950s, although work can be found "
    "from earlier periods. Café déjà vu, 北京 and 😀 appear too. "
)
#: Unicode singles, an over-long text (more than 512 tokens with every tokenizer here).
TEXTS = [
    "the weather is nice",
    "Café déjà vu: naïve façade, résumé.",
    "北京是中国的首都。東京は日本の首都です。",
    "Emoji 😀 🎉 👍🏽 and   whitespace\truns",
    "",
    _LONG * 20,
]
#: Pairs, one of them longer than the limit on both sides.
PAIRS = [
    ("he went to the store.", "he bought a gallon of milk."),
    ("What is the capital of France?", "Paris is the capital and largest city of France."),
    ("Zürich und Kraków", "São Paulo, 서울"),
    (_LONG * 12, _LONG * 9),
]
QUESTION = "Where does John Smith live?"
CONTEXT = "John Smith lives in New York and works for the United Nations in Geneva. " * 3
#: Runtime tasks whose code (model.py, tasks/, outside this branch) still says BERT's ``[MASK]``: fill-mask of a
#: family whose mask token is another string fails there until the task layer reads ``TextTokenizer.mask_token``.
MASK_IS_BERTS = {"distilbert", "electra"}


def _family_of(architecture: str) -> str:
    return next(family for family, names in CLASSES.items() if architecture in names)


def _load(export: Path, variant: str = "fp32") -> BertOnnx:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a saved seeded checkpoint is "pretrained": no RandomWeightsWarning
        return BertOnnx(export, variant)


def _pipeline(task: str, checkpoint: Path, **kwargs: Any) -> Any:
    from transformers import pipeline

    return pipeline(task, model=str(checkpoint), device="cpu", **kwargs)


# -- export ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ALL_CLASSES)
def test_every_class_exports_through_the_gate(family_export: Any, architecture: str) -> None:
    import transformers

    _, export, log = family_export(architecture)
    manifest = read_manifest(export)
    family = FAMILIES[_family_of(architecture)]
    assert manifest.architecture == architecture
    assert manifest.model_type == family.model_type
    assert manifest.input_names == family.inputs
    assert ("token_type_ids" in manifest.input_names) == (family.model_type in ("bert", "electra"))
    usable = 8192 if family.model_type == "modernbert" else 512  # ModernBERT: rotary positions, 8,192 of them
    assert manifest.max_position_embeddings == usable  # usable tokens, also where 514 positions are embedded
    assert manifest.config.get("position_embeddings", usable) == usable + family.position_offset
    for variant, record in manifest.variants.items():
        assert record["parity"]["passed"], (variant, record["parity"])
        assert record["parity"]["last_hidden_state_max_abs"] <= (EXACT_ATOL if variant != "int8" else 0.05)
    expected = {"fp32", "optimized", "int8"} if architecture in FULL_VARIANTS else {"fp32"}
    if family.fusion is None and architecture in FULL_VARIANTS:
        expected.discard("optimized")
        assert manifest.data["unavailable_variants"] == {"optimized": family.no_fusion}
        assert any(f"the optimized variant cannot be built for {family.model_type}" in line for line in log)
        with pytest.raises(VariantMissingError, match=r"has no 'optimized' variant \(it cannot be built for this"):
            BertOnnx(export, "optimized")  # no advice to re-export: that cannot build it either
    assert set(manifest.variants) == expected
    counted = describe(manifest)["parameters"]  # bertonnx inspect: the graph's initializers, by head
    assert counted["matches_manifest"], (counted["counts"], manifest.data["parameters"])
    # the pooler is exported exactly where the class has one
    model_class = getattr(transformers, architecture)
    base = getattr(model_class.from_pretrained(family_export(architecture)[0]), family.base, None)
    has_pooler = (architecture.endswith("Model") and family.pooler) or getattr(base, "pooler", None) is not None
    assert ("pooler_output" in manifest.graph_outputs) == bool(has_pooler), manifest.graph_outputs


def test_the_discriminator_is_recorded_in_the_table(family_export: Any) -> None:
    _, export, _ = family_export("ElectraForPreTraining")
    manifest = read_manifest(export)
    assert manifest.graph_outputs == ("last_hidden_state", "rtd_logits")
    assert manifest.heads == {"discriminator": "trained"}
    assert any("P(replaced)" in measure for measure in manifest.data["parity_gate"]["measures"])
    assert manifest.variants["int8"]["parity"]["rtd_agreement"] >= 0.9


# -- runtime against torch ---------------------------------------------------------------------------------


def _torch_states(checkpoint: Path, encodings: list[Any], inputs: tuple[str, ...]) -> list[np.ndarray]:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(checkpoint)).eval()
    found = []
    with torch.inference_mode():
        for encoding in encodings:
            feeds = {
                "input_ids": torch.tensor([encoding.ids]),
                "attention_mask": torch.ones(1, len(encoding.ids), dtype=torch.long),
                "token_type_ids": torch.tensor([encoding.type_ids]),
            }
            out = model(**{k: v for k, v in feeds.items() if k in inputs})
            found.append(out.last_hidden_state[0].numpy())
    return found


@pytest.mark.parametrize("family", list(CLASSES))
def test_tokens_and_states_equal_transformers(family_export: Any, family: str) -> None:
    from transformers import AutoTokenizer

    architecture = CLASSES[family][0]  # <prefix>Model
    checkpoint, export, _ = family_export(architecture)
    reference = AutoTokenizer.from_pretrained(str(checkpoint))
    model = _load(export)
    firsts = TEXTS + [a for a, _ in PAIRS]
    seconds = [None] * len(TEXTS) + [b for _, b in PAIRS]
    for text, pair in zip(firsts, seconds, strict=True):
        expected = reference(text, pair, truncation="longest_first", max_length=512)["input_ids"]
        (encoding,) = model.encode([text], None if pair is None else [pair], truncation=True, max_length=512)
        assert encoding.ids == expected, (family, text[:40], pair and pair[:40])
    encodings = model.encode(TEXTS, truncation=True, max_length=512)
    out = model(TEXTS, truncation=True, max_length=512)
    for index, states in enumerate(_torch_states(checkpoint, encodings, FAMILIES[family].inputs)):
        np.testing.assert_allclose(out.token_states(index), states, atol=EXACT_ATOL, rtol=0)
    pair_out = model([a for a, _ in PAIRS], [b for _, b in PAIRS], truncation=True, max_length=512)
    pair_encodings = model.encode([a for a, _ in PAIRS], [b for _, b in PAIRS], truncation=True, max_length=512)
    for index, states in enumerate(_torch_states(checkpoint, pair_encodings, FAMILIES[family].inputs)):
        np.testing.assert_allclose(pair_out.token_states(index), states, atol=EXACT_ATOL, rtol=0)
    if FAMILIES[family].pooler:
        assert out.pooler_output.shape == (len(TEXTS), 32)


@pytest.mark.parametrize("family", list(CLASSES))
def test_classify_equals_the_pipeline(family_export: Any, family: str) -> None:
    architecture = next(a for a in CLASSES[family] if a.endswith("SequenceClassification"))
    checkpoint, export, _ = family_export(architecture)
    reference = _pipeline("text-classification", checkpoint, top_k=None)
    expected = reference(TEXTS, truncation=True, max_length=512)
    expected_pairs = reference([{"text": a, "text_pair": b} for a, b in PAIRS[:3]])
    for variant in ("fp32", "optimized"):
        if variant not in read_manifest(export).variants:
            continue
        model = _load(export, variant)
        for got, want in ((model.classify(TEXTS, top_k=None, truncation=True), expected),):
            _assert_ranked(got, want)
        _assert_ranked(model.classify([a for a, _ in PAIRS[:3]], [b for _, b in PAIRS[:3]], top_k=None), expected_pairs)


def _assert_ranked(got: Any, expected: Any) -> None:
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected, strict=True):
        assert [d["label"] for d in ours] == [d["label"] for d in theirs]
        np.testing.assert_allclose([d["score"] for d in ours], [d["score"] for d in theirs], atol=EXACT_ATOL, rtol=0)


def _xfail_unless(families: set[str], reason: str) -> list[Any]:
    return [
        pytest.param(family, marks=() if family in families else pytest.mark.xfail(reason=reason, strict=False))
        for family in CLASSES
    ]


@pytest.mark.parametrize("family", list(CLASSES))
def test_fill_mask_equals_the_pipeline(family_export: Any, family: str) -> None:
    checkpoint, export, _ = family_export(next(a for a in CLASSES[family] if a.endswith("ForMaskedLM")))
    model = _load(export)
    mask = model.tokenizer.mask_token
    assert mask is not None
    texts = [f"the capital of france is {mask}.", f"{mask} went to the {mask} to buy milk."]
    reference = _pipeline("fill-mask", checkpoint, top_k=5)
    for text, ours in zip(texts, model.fill_mask(texts), strict=True):
        theirs = reference(text)
        theirs = [theirs] if isinstance(theirs[0], dict) else theirs
        assert len(ours) == len(theirs)
        for our_mask, their_mask in zip(ours, theirs, strict=True):
            np.testing.assert_allclose(
                [d["score"] for d in our_mask], [d["score"] for d in their_mask], rtol=1e-3, atol=1e-7
            )
    with pytest.raises(ValueError, match=f"input 0 has no {re.escape(mask)} token .*; write {re.escape(mask)} where"):
        model.fill_mask("no mask here")


@pytest.mark.parametrize("family", list(CLASSES))
def test_tag_equals_the_pipeline(family_export: Any, family: str) -> None:
    """Entities with character offsets into the caller's string, for every tokenizer kind, and a text longer
    than the limit in windows (``stride``)."""
    checkpoint, export, _ = family_export(next(a for a in CLASSES[family] if a.endswith("TokenClassification")))
    model = _load(export)
    reference = _pipeline("token-classification", checkpoint, aggregation_strategy="simple", ignore_labels=[])
    texts = [*TEXTS[:4], TEXTS[5]]
    got = model.tag(texts, ignore_labels=(), stride=32)
    for text, ours in zip(texts, got, strict=True):
        theirs = reference(text, stride=32) if len(text) > 1000 else reference(text)
        assert [(e["entity_group"], e["start"], e["end"], e["word"]) for e in ours] == [
            (e["entity_group"], e["start"], e["end"], e["word"]) for e in theirs
        ]
        np.testing.assert_allclose([e["score"] for e in ours], [e["score"] for e in theirs], atol=EXACT_ATOL)


@pytest.mark.parametrize("family", list(CLASSES))
def test_tag_by_words_equals_the_pipeline(family_export: Any, family: str) -> None:
    checkpoint, export, _ = family_export(next(a for a in CLASSES[family] if a.endswith("TokenClassification")))
    model = _load(export)
    reference = _pipeline("token-classification", checkpoint, aggregation_strategy="first", ignore_labels=[])
    texts = TEXTS[:4]
    for text, ours in zip(texts, model.tag(texts, "first", ignore_labels=()), strict=True):
        assert [(e["entity_group"], e["start"], e["end"]) for e in ours] == [
            (e["entity_group"], e["start"], e["end"]) for e in reference(text)
        ]


#: Scripts the tests' trained tokenizers never saw: unknown tokens for WordPiece and Unigram (byte-level BPE has none).
UNSEEN_SCRIPTS = ["Привет мир 👋", "Γειά σου κόσμε", "Žluťoučký kůň", "ok Привет"]


@pytest.mark.parametrize("family", list(CLASSES))
def test_tag_words_of_unknown_tokens_equal_the_pipeline(family_export: Any, family: str) -> None:
    """An unknown token's word is its text in the caller's string and never a subword, as the pipeline rules
    (Unigram models keep no ``unk_token`` of their own: the config's is read)."""
    checkpoint, export, _ = family_export(next(a for a in CLASSES[family] if a.endswith("TokenClassification")))
    model = _load(export)
    unk = model.tokenizer.unk_token_id
    encodings = model.tokenizer.encode(UNSEEN_SCRIPTS, None, truncation=False, max_length=None)
    if not TOKENIZER_KINDS[family].startswith("bpe"):
        assert unk is not None
        assert any(unk in e.ids for e in encodings), "the texts give no unknown token"
    for strategy in ("none", "simple", "first", "average", "max"):
        reference = _pipeline("token-classification", checkpoint, aggregation_strategy=strategy, ignore_labels=[])
        for text, ours in zip(UNSEEN_SCRIPTS, model.tag(UNSEEN_SCRIPTS, strategy, ignore_labels=()), strict=True):
            theirs = reference(text)
            key = "entity" if strategy == "none" else "entity_group"
            assert [(e[key], e["word"], e["start"], e["end"]) for e in ours] == [
                (e[key], e["word"], e["start"], e["end"]) for e in theirs
            ], (strategy, text)
            np.testing.assert_allclose([e["score"] for e in ours], [e["score"] for e in theirs], atol=EXACT_ATOL)


@pytest.mark.parametrize("family", list(CLASSES))
def test_answer_equals_the_pipeline(family_export: Any, family: str) -> None:
    """Answers over a context longer than the limit (windows of ``<s> q </s></s> c </s>`` for RoBERTa)."""
    checkpoint, export, _ = family_export(next(a for a in CLASSES[family] if a.endswith("QuestionAnswering")))
    model = _load(export)
    reference = _pipeline("question-answering", checkpoint)
    for context in (CONTEXT, CONTEXT * 12):
        theirs = reference(question=QUESTION, context=context, top_k=3)
        ours = model.answer(QUESTION, context, top_k=3)
        assert [a["answer"] for a in ours] == [a["answer"] for a in theirs]
        np.testing.assert_allclose([a["score"] for a in ours], [a["score"] for a in theirs], atol=EXACT_ATOL)
        for our, their in zip(ours, theirs, strict=True):
            assert context[our["start"] : our["end"]] == our["answer"]
            if (our["start"], our["end"]) != (their["start"], their["end"]):
                # DeBERTa has no absolute positions: the windows of this periodic context are the same tokens, so
                # each occurrence of a span scores the same, and which one is listed is a tie (equal to 1e-7)
                assert family == "deberta-v2", (our, their)
                assert context.count(our["answer"]) > 1, (our, their)


def test_nsp_of_a_roberta_export_names_what_it_has(family_export: Any) -> None:
    model = _load(family_export("RobertaModel")[1])
    assert "nsp" not in model.tasks
    with pytest.raises(HeadMissingError, match=r"no NSP head; it was exported from RobertaModel and offers embed"):
        model.nsp("a", "b")


# -- the tokenizer adapter ----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tokenizer_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("family-tokenizers")
    for family in CLASSES:
        build_tokenizer(family, root / family)
    return {family: root / family for family in CLASSES}


@pytest.mark.parametrize("family", list(CLASSES))
def test_adapter_reads_the_specials_from_the_files(tokenizer_dirs: dict[str, Path], family: str) -> None:
    from transformers import AutoTokenizer

    directory = tokenizer_dirs[family]
    reference = AutoTokenizer.from_pretrained(str(directory))
    ours = TextTokenizer(directory / "tokenizer.json", 512)
    assert (ours.cls_token, ours.sep_token, ours.mask_token, ours.pad_token) == (
        reference.cls_token,
        reference.sep_token,
        reference.mask_token,
        reference.pad_token,
    )
    assert (ours.cls_token_id, ours.mask_token_id, ours.pad_token_id) == (
        reference.cls_token_id,
        reference.mask_token_id,
        reference.pad_token_id,
    )
    assert ours.special_tokens_single == reference.num_special_tokens_to_add(pair=False) == 2
    assert ours.special_tokens_pair == reference.num_special_tokens_to_add(pair=True)
    assert ours.special_tokens_pair == (3 if family in ("distilbert", "electra", "modernbert", "deberta-v2") else 4)


@pytest.mark.parametrize("family", list(CLASSES))
def test_pair_truncation_equals_the_fast_tokenizer(tokenizer_dirs: dict[str, Path], family: str) -> None:
    """Every cut of every pair length near the limit, against ``PreTrainedTokenizerFast``'s ``longest_first``
    (BERT's rule for the WordPiece families, whose slow tokenizers cut by it, is checked against those)."""
    from transformers import AutoTokenizer

    directory = tokenizer_dirs[family]
    ours = TextTokenizer(directory / "tokenizer.json", 512)
    fast = AutoTokenizer.from_pretrained(str(directory))
    reference = fast if ours.pair_rule == "longest_first" else slow_tokenizer(family, directory)
    words = ["the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog"] * 4
    for n1 in range(1, 16, 2):
        for n2 in range(1, 16, 3):
            for max_length in (9, 12, 15):
                a, b = " ".join(words[:n1]), " ".join(words[:n2])
                expected = reference(a, b, truncation="longest_first", max_length=max_length)["input_ids"]
                (got,) = ours.encode([a], [b], truncation=True, max_length=max_length)
                assert got.ids == expected, (n1, n2, max_length)


def _hard_strings(count: int) -> list[str]:
    pieces = [
        "café",
        "CAFÉ",
        "naïve",
        "e\u0301",
        "Ångström",
        "北京",
        "東京は",
        "서울",
        "😀",
        "👍🏽",
        "🇫🇷",
        "  ",
        "\t",
        "\n\n",
        "   \u3000",
        "don't",
        "U.S.A.",
        "$1,234.56",
        "2024-03-05",
        "hello",
        "World",
        "ﬁ",
        "Ⅻ",
        "x²",
        "İstanbul",
        "straße",
        "Ελληνικά",
        "עברית",
        "العربية",
        "हिन्दी",
        "<s>",
        "[CLS]",
        "#hash",
        "##",
        "@user",
        "a\u200bb",
        "–—",
        "…",
    ]
    rng = random.Random(31)
    joins = ["", " ", "  ", "\t", " \n "]
    return ["".join(rng.choice(pieces) + rng.choice(joins) for _ in range(rng.randint(1, 8))) for _ in range(count)]


@pytest.mark.parametrize("family", ["roberta", "distilbert", "mpnet", "electra"])
def test_fast_and_slow_tokenizers_agree_on_hard_strings(tokenizer_dirs: dict[str, Path], family: str) -> None:
    """The trained tokenizer.json (what the runtime runs) and transformers' Python tokenizer of the same
    vocabulary give the same ids. The Unigram families' Python tokenizers read a SentencePiece model file, which
    the ``tokenizers`` trainer does not write: the next test trains one."""
    from transformers import AutoTokenizer

    directory = tokenizer_dirs[family]
    fast = AutoTokenizer.from_pretrained(str(directory))
    slow = slow_tokenizer(family, directory)
    ours = TextTokenizer(directory / "tokenizer.json", 512)
    strings = _hard_strings(300)
    got = ours.encode(strings, None, truncation=False, max_length=None)
    mismatched = [s for s, encoding in zip(strings, got, strict=True) if encoding.ids != slow(s)["input_ids"]]
    assert not mismatched, mismatched[:5]
    assert [encoding.ids for encoding in got] == [fast(s)["input_ids"] for s in strings]


#: The specials of each Unigram family's SentencePiece model, as its published model files have them
#: (XLM-R's are SentencePiece's defaults; DeBERTa-v3's spm.model names its own).
UNIGRAM_SPECIALS: dict[str, dict[str, Any]] = {
    "xlm-roberta": {},
    "deberta-v2": {
        "pad_id": 0,
        "pad_piece": "[PAD]",
        "bos_id": 1,
        "bos_piece": "[CLS]",
        "eos_id": 2,
        "eos_piece": "[SEP]",
        "unk_id": 3,
        "unk_piece": "[UNK]",
    },
}


@pytest.mark.parametrize("family", list(UNIGRAM_SPECIALS))
def test_unigram_fast_and_slow_tokenizers_agree_on_hard_strings(tmp_path: Path, family: str) -> None:
    """A SentencePiece Unigram model trained here (the kind XLM-R and DeBERTa-v3 ship), read by transformers'
    Python (slow) tokenizer, converted to tokenizer.json as transformers converts it, and run by the runtime:
    the same ids on 300 hard strings the model was not trained on."""
    import sentencepiece  # the test extra's: transformers' Python tokenizer for Unigram reads its model file
    import transformers

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(_hard_strings(600)[300:]), encoding="utf-8")
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(tmp_path / "spm"),
        vocab_size=400,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
        **UNIGRAM_SPECIALS[family],
    )
    prefix = FAMILY_PREFIXES[family]
    slow = getattr(transformers, prefix + "Tokenizer")(vocab_file=str(tmp_path / "spm.model"))
    slow.save_pretrained(str(tmp_path / "tokenizer"))
    fast = getattr(transformers, prefix + "TokenizerFast").from_pretrained(str(tmp_path / "tokenizer"), from_slow=True)
    fast.save_pretrained(str(tmp_path / "tokenizer"))
    ours = TextTokenizer(tmp_path / "tokenizer" / "tokenizer.json", 512)
    strings = _hard_strings(300)
    got = ours.encode(strings, None, truncation=False, max_length=None)
    assert len(slow.get_vocab()) > 100
    mismatched = [s for s, encoding in zip(strings, got, strict=True) if encoding.ids != slow(s)["input_ids"]]
    assert not mismatched, mismatched[:5]
    assert [encoding.ids for encoding in got] == [fast(s)["input_ids"] for s in strings]


def test_a_lone_surrogate_becomes_the_replacement_character_outside_bert(tokenizer_dirs: dict[str, Path]) -> None:
    roberta = TextTokenizer(tokenizer_dirs["roberta"] / "tokenizer.json", 512)
    electra = TextTokenizer(tokenizer_dirs["electra"] / "tokenizer.json", 512)
    assert roberta.surrogate_stand_in == "\ufffd"
    assert electra.surrogate_stand_in == "\x00"
    (encoding,) = roberta.encode(["a\ud800b"], None, truncation=False, max_length=None)
    (expected,) = roberta.encode(["a\ufffdb"], None, truncation=False, max_length=None)
    assert encoding.ids == expected.ids


# -- real weights ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_mpnet_embeds_as_sentence_transformers(tmp_path_factory: pytest.TempPathFactory) -> None:
    """all-mpnet-base-v2 (the package lists' one real checkpoint of these families): exported as the encoder,
    its mean-pooled normalized vectors equal PyTorch's (what sentence-transformers computes for it)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from bertonnx_export.pipeline import ExportOptions, run_export

    root = tmp_path_factory.mktemp("real-mpnet")
    checkpoint = real_mpnet_checkpoint(WHEEL_CACHE, root / "checkpoint")
    log: list[str] = []
    options = ExportOptions(
        outdir=root / "model", model=str(checkpoint), task="feature-extraction", variants=("fp32", "optimized")
    )
    manifest = run_export(options, log=log.append)
    assert set(manifest["variants"]) == {"fp32"}  # optimized: said in one line, not built
    assert any("the optimized variant cannot be built for mpnet" in line for line in log)
    assert manifest["config"]["max_position_embeddings"] == 512
    assert manifest["config"]["position_embeddings"] == 514
    assert [i["name"] for i in manifest["graph"]["inputs"]] == ["input_ids", "attention_mask"]
    texts = ["the weather is nice", "Café déjà vu: naïve façade.", "How do I reset my password?", "北京是中国的首都。"]
    model = _load(root / "model")
    assert model.tokenizer.cls_token == "<s>"
    assert model.tokenizer.mask_token == "<mask>"
    assert model.tokenizer.special_tokens_pair == 4
    ours = model.embed(texts, pooling="mean", normalize=True)
    reference_tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    encoder = AutoModel.from_pretrained(str(checkpoint)).eval()
    with torch.inference_mode():
        batch = reference_tokenizer(texts, padding=True, return_tensors="pt")
        states = encoder(**batch).last_hidden_state
        mask = batch["attention_mask"][..., None].float()
        pooled = (states * mask).sum(1) / mask.sum(1)
        theirs = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
    similarity = ours @ ours.T
    assert similarity[0, 0] == pytest.approx(1.0, abs=1e-5)


# -- ModernBERT: 8,192 positions, banded local attention, mean pooling ----------------------------------------

#: Texts of 2,000 to 8,192 tokens with the tiny ModernBERT tokenizer (about 2 tokens per word here).
_WORDS = _LONG.split()


def _modernbert_text(tokens: int, model: BertOnnx, mask: str | None = None) -> str:
    """A text of at most ``tokens`` tokens (special tokens included, a few less: it ends at a word) for ``model``'s
    tokenizer, with ``mask`` in its middle when given."""
    (encoding,) = model.encode([_LONG * (tokens // 20)], truncation=True, max_length=tokens)
    text = (_LONG * (tokens // 20))[: encoding.offsets[-2][1]]
    text = text[: text.rfind(" ")]
    if mask is not None:
        middle = text.find(" ", len(text) // 2)
        text = text[:middle] + f" {mask}" + text[middle:]
    return text


def test_modernbert_attention_rewrite_equals_the_masked_attention() -> None:
    """The export's banded local and sliced global attention give what masking all ``t × t`` scores gives, at
    lengths off the block size, with padding."""
    import torch

    from bertonnx_export.modernbert import banded_local_attention, chunked_global_attention

    generator = torch.Generator().manual_seed(5)
    for length in (3, 64, 129, 300):
        q, k, v = (torch.randn(2, 3, length, 8, generator=generator) for _ in range(3))
        mask = torch.ones(2, length, dtype=torch.long)
        mask[1, length // 2 + 1 :] = 0
        positions = torch.arange(length)
        keys = mask[:, None, None, :] > 0
        for half, local in ((64, True), (length, False)):
            allowed = ((positions[:, None] - positions[None, :]).abs() <= half)[None, None] & keys
            scores = (q @ k.transpose(-1, -2)) * 8**-0.5
            expected = scores.masked_fill(~allowed, torch.finfo(torch.float32).min).softmax(-1) @ v
            if local:
                got = banded_local_attention(q, k, v, mask, half, 8**-0.5)
            else:
                bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
                got = chunked_global_attention(q, k, v, bias, 8**-0.5)
            valid = mask[:, None, :, None].bool().expand_as(expected)
            assert (got - expected).abs()[valid].max() <= 1e-6, (length, local)


def test_modernbert_mean_pooling_classifier_equals_the_pipeline(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``classifier_pooling="mean"`` (averaged over the tokens, padding left out) through the gate, and equal to
    the pipeline on texts of different lengths classified in one padded batch."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    root = tmp_path_factory.mktemp("modernbert-mean")
    checkpoint = build_family_checkpoint(
        "ModernBertForSequenceClassification", root / "checkpoint", config={"classifier_pooling": "mean"}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manifest = run_export(ExportOptions(outdir=root / "model", model=str(checkpoint)), log=lambda _: None)
    assert manifest["variants"]["fp32"]["parity"]["logits_max_abs"] <= EXACT_ATOL
    model = _load(root / "model")
    texts = [*TEXTS[:4], _LONG * 3]
    expected = _pipeline("text-classification", checkpoint, top_k=None)(texts)
    _assert_ranked(model.classify(texts, top_k=None), expected)


def _modernbert_embed_equals_torch(family_export: Any, tokens: int) -> None:
    """A text cut to ``tokens`` tokens, a short one and one of 2,000 embedded under a 1,024-token budget (the long
    ones run as batches of their own) equal PyTorch's mean-pooled states."""
    import torch
    from transformers import AutoModel

    checkpoint, export, _ = family_export("ModernBertModel")
    model = _load(export)
    assert model.max_length == 8192  # the config's positions, not BERT's 512
    longest = _LONG * 500
    with pytest.raises(ValueError, match="more than max_length=8192"):
        model.encode([longest])
    texts = [longest, "the weather is nice", _modernbert_text(2000, model)]
    encodings = model.encode(texts, truncation=True, max_length=tokens)
    assert len(encodings[0].ids) == tokens
    assert 1900 <= len(encodings[2].ids) <= 2000
    ours = model.embed(texts, pooling="mean", truncation=True, max_length=tokens, max_batch_tokens=1024)
    encoder = AutoModel.from_pretrained(str(checkpoint)).eval()
    for encoding, vector in zip(encodings, ours, strict=True):
        ids = torch.tensor([encoding.ids])
        with torch.inference_mode():
            states = encoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0]
        np.testing.assert_allclose(vector, states.mean(0).numpy(), atol=EXACT_ATOL, rtol=0)


@pytest.mark.slow
def test_modernbert_8192_tokens_equal_torch(family_export: Any) -> None:
    """The whole 8,192 positions (PyTorch's SDPA takes most of this test's time at that length)."""
    _modernbert_embed_equals_torch(family_export, 8192)


def test_modernbert_long_inputs_equal_torch_and_the_pipelines(family_export: Any) -> None:
    """2,000 to 4,096 tokens: embed equals PyTorch, classify, tag, fill-mask and answer the pipelines."""
    _modernbert_embed_equals_torch(family_export, 4096)

    checkpoint, export, _ = family_export("ModernBertForSequenceClassification")
    model = _load(export)
    texts = [_modernbert_text(2000, model)]
    _assert_ranked(model.classify(texts, top_k=None), _pipeline("text-classification", checkpoint, top_k=None)(texts))

    checkpoint, export, _ = family_export("ModernBertForTokenClassification")
    model = _load(export)
    text = _modernbert_text(2000, model)
    reference = _pipeline("token-classification", checkpoint, aggregation_strategy="simple", ignore_labels=[])
    (got,) = model.tag([text], ignore_labels=())
    theirs = reference(text)
    assert [(e["entity_group"], e["start"], e["end"]) for e in got] == [
        (e["entity_group"], e["start"], e["end"]) for e in theirs
    ]
    np.testing.assert_allclose([e["score"] for e in got], [e["score"] for e in theirs], atol=EXACT_ATOL)

    checkpoint, export, _ = family_export("ModernBertForMaskedLM")
    model = _load(export)
    text = _modernbert_text(2000, model, mask=model.tokenizer.mask_token)
    ((ours_masks,),) = model.fill_mask([text])  # one text, one mask
    theirs_masks = _pipeline("fill-mask", checkpoint, top_k=5)(text)
    assert [d["token"] for d in ours_masks] == [d["token"] for d in theirs_masks]
    np.testing.assert_allclose([d["score"] for d in ours_masks], [d["score"] for d in theirs_masks], rtol=1e-3)

    checkpoint, export, _ = family_export("ModernBertForQuestionAnswering")
    model = _load(export)
    context = CONTEXT * 21  # about 2,000 tokens with the question, answered in one window
    theirs_answers = _pipeline("question-answering", checkpoint)(
        question=QUESTION, context=context, top_k=3, max_seq_len=8192, doc_stride=128
    )
    theirs_answers = [theirs_answers] if isinstance(theirs_answers, dict) else theirs_answers  # one answer: a dict
    ours_answers = model.answer(QUESTION, context, top_k=3, max_seq_len=8192, doc_stride=128)
    assert [(a["start"], a["end"]) for a in ours_answers] == [(a["start"], a["end"]) for a in theirs_answers]
    np.testing.assert_allclose([a["score"] for a in ours_answers], [a["score"] for a in theirs_answers], atol=1e-4)
