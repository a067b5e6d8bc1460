"""Token classification (``tag``) and question answering (``answer``) equal transformers' pipelines.

The post-processing (:mod:`bertonnx.tasks.tag`, :mod:`bertonnx.tasks.answer`) and the windowing
(:mod:`bertonnx.windows`) are checked here on their own: the tiny seeded checkpoints run in torch, the pipeline
answers, and our code answers from the same model's logits for our own windows. Words, labels, offsets and
answers must be identical and scores within 1e-4.

The checkpoints are ``tests/heads.py``'s with unit LayerNorms and a unit-scale head (see
:func:`sharpen`): with the seeded 0.05-scale weights every token gets the same label at ~0.2 probability, which
would test nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx.tasks.answer import answers
from bertonnx.tasks.tag import AGGREGATION_STRATEGIES, TokenStrings, check_aggregation_strategy, entities
from bertonnx.windows import Windowing

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from .heads import build_tiny_checkpoint  # noqa: E402

#: The model's positions (tests/conftest.py's TINY_CONFIG).
POSITIONS = 512
#: The QA pipeline's window: min(model_max_length, 384).
QA_WINDOW = 384
SCORE_TOLERANCE = 1e-4
SHARPEN_SEED = 7
#: Span scores are products of two probabilities (~1e-3 here), so they are also held to a relative tolerance.
RELATIVE_SCORE_TOLERANCE = 1e-3

#: Accents (composed and decomposed), CJK, emoji, repeated spaces, tabs, control characters, an unknown
#: word, a ligature the normalizer rewrites, punctuation inside words.
UNICODE_TEXTS = [
    "Angela Merkel met Emmanuel Macron in Paris and Berlin.",
    "Jürgen from Zürich visited Sa\u0303o Paulo and São Paulo in 2019.",
    "東京 and 大阪 are big 🙂🙂  cities,   with   spaces\tand\ttabs\x01\x02 and control chars.",
    "ﬁne café crème brûlée at McDonald's, x-ray co-operate e.g. U.S.A. unbelievably",
    "   leading and trailing   ",
    "",
    "🙂",
]
LONG_TEXT = " ".join(
    f"Sentence {i}: Angela Merkel met Emmanuel Macron in Paris, Zürich and 東京 unbelievably early." for i in range(60)
)
QUESTIONS = ["Who met Macron?", "Where is the café?", "What happened in 2019, année?"]
CONTEXTS = [
    "Angela Merkel met Emmanuel Macron in Paris and Berlin. The café is in Zürich next to 東京 Tower 🙂.",
    "In 2019 the  café   crème moved from São Paulo to Zürich;\tnobody knew why\x01. McDonald's stayed.",
]
LONG_CONTEXT = " ".join(
    f"Paragraph {i}: the café in Zürich opened in {1900 + i}, and Angela Merkel visited it with Macron."
    for i in range(50)
)


def sharpen(model: Any, seed: int = SHARPEN_SEED) -> None:
    """Unit LayerNorms and a N(0, 1) head with zero bias, so labels and spans differ from token to token."""
    generator = torch.Generator().manual_seed(seed)
    head = model.classifier if hasattr(model, "classifier") else model.qa_outputs
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("LayerNorm.weight"):
                param.fill_(1.0)
            elif name.endswith("LayerNorm.bias"):
                param.zero_()
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator))
        head.bias.zero_()


def sharp_checkpoint(architecture: str, directory: Path) -> Path:
    build_tiny_checkpoint(architecture, directory)
    model = getattr(transformers, architecture).from_pretrained(directory)
    sharpen(model)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def ner_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sharp_checkpoint("BertForTokenClassification", tmp_path_factory.mktemp("ner") / "checkpoint")


@pytest.fixture(scope="module")
def qa_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sharp_checkpoint("BertForQuestionAnswering", tmp_path_factory.mktemp("qa") / "checkpoint")


def load(directory: Path, architecture: str) -> tuple[Any, Any, Any]:
    """``(model, pipeline tokenizer, tokenizers.Tokenizer)``; the tokenizer knows the model's 512 positions."""
    from tokenizers import Tokenizer

    model = getattr(transformers, architecture).from_pretrained(directory).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory, model_max_length=POSITIONS)
    base = Tokenizer.from_file(str(directory / "tokenizer.json"))
    base.no_padding()
    base.no_truncation()
    return model, tokenizer, base


def run_windows(model: Any, windows: list[Any]) -> list[Any]:
    """The model's raw outputs for each window, one window per run (as the pipelines run them)."""
    outputs = []
    for window in windows:
        with torch.no_grad():
            outputs.append(
                model(
                    input_ids=torch.tensor([window.ids]),
                    attention_mask=torch.tensor([window.attention_mask]),
                    token_type_ids=torch.tensor([window.type_ids]),
                )
            )
    return outputs


def assert_same(theirs: list[dict[str, Any]], ours: list[dict[str, Any]]) -> None:
    assert len(ours) == len(theirs), (theirs, ours)
    for expected, got in zip(theirs, ours, strict=True):
        assert list(got) == list(expected)
        for key, value in expected.items():
            if key == "score":
                error = abs(got[key] - float(value))
                assert error <= SCORE_TOLERANCE, (expected, got)
                assert error <= RELATIVE_SCORE_TOLERANCE * float(value), (expected, got)
            else:
                assert got[key] == value, (key, expected, got)


@pytest.fixture(scope="module")
def ner(ner_checkpoint: Path) -> tuple[Any, Any, Windowing, TokenStrings, list[str]]:
    model, tokenizer, base = load(ner_checkpoint, "BertForTokenClassification")
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    return model, tokenizer, Windowing(base), TokenStrings(base), labels


def tag_with_torch(ner: Any, text: str, strategy: str, stride: int | None) -> list[dict[str, Any]]:
    model, _, windowing, strings, labels = ner
    windows = windowing.text_windows([text], max_length=POSITIONS, stride=stride)[0]
    logits = [output.logits[0].numpy() for output in run_windows(model, windows)]
    return entities(text, windows, logits, labels, strings, aggregation_strategy=strategy)


@pytest.mark.parametrize("strategy", AGGREGATION_STRATEGIES)
def test_tag_equals_pipeline_on_unicode(ner: Any, strategy: str) -> None:
    model, tokenizer, *_ = ner
    pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu")
    labels_seen: set[str] = set()
    for text in UNICODE_TEXTS:
        ours = tag_with_torch(ner, text, strategy, None)
        assert_same(pipe(text, aggregation_strategy=strategy), ours)
        for entity in ours:  # offsets index the caller's string, whatever it holds
            assert 0 <= entity["start"] <= entity["end"] <= len(text)
            labels_seen.add(entity.get("entity", entity.get("entity_group")))
    assert len(labels_seen) >= (3 if strategy == "none" else 2)  # the sharpened head tells tokens apart


@pytest.mark.parametrize("strategy", [s for s in AGGREGATION_STRATEGIES if s != "none"])
def test_tag_long_text_windows_merge_as_pipeline(ner: Any, strategy: str) -> None:
    model, tokenizer, windowing, *_ = ner
    windows = windowing.text_windows([LONG_TEXT], max_length=POSITIONS, stride=64)[0]
    assert len(windows) >= 3
    pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu")
    ours = tag_with_torch(ner, LONG_TEXT, strategy, 64)
    assert_same(pipe(LONG_TEXT, aggregation_strategy=strategy, stride=64), ours)
    assert ours[-1]["end"] > len(LONG_TEXT) - 40  # the last window was tagged too


def test_text_windows_equal_the_fast_tokenizer_overflow(ner: Any) -> None:
    _, tokenizer, windowing, *_ = ner
    for stride in (0, 1, 64, POSITIONS - 3):
        windows = windowing.text_windows([LONG_TEXT], max_length=POSITIONS, stride=stride)[0]
        theirs = tokenizer(
            LONG_TEXT, truncation=True, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True
        )
        assert [w.ids for w in windows] == theirs["input_ids"]
        assert [w.offsets for w in windows] == [[tuple(o) for o in offsets] for offsets in theirs["offset_mapping"]]


def test_tag_errors_name_the_fix(ner: Any) -> None:
    _, _, windowing, strings, labels = ner
    with pytest.raises(ValueError, match=r"text 0 has \d+ tokens, more than the 512 .* pass stride"):
        windowing.text_windows([LONG_TEXT], max_length=POSITIONS, stride=None)
    with pytest.raises(ValueError, match=r"stride=510 must be >= 0 and smaller than max_length - 2 = 510"):
        windowing.text_windows(["short"], max_length=POSITIONS, stride=POSITIONS - 2)
    with pytest.raises(ValueError, match="stride=-1"):
        windowing.text_windows(["short"], max_length=POSITIONS, stride=-1)
    with pytest.raises(ValueError, match=r"unknown aggregation_strategy 'grouped'; expected one of none, simple"):
        check_aggregation_strategy("grouped")
    assert check_aggregation_strategy("MAX") == "max"
    windows = windowing.text_windows([LONG_TEXT], max_length=POSITIONS, stride=8)[0]
    logits = [np.zeros((len(w), len(labels)), dtype=np.float32) for w in windows]
    with pytest.raises(ValueError, match="windowed text needs an aggregation_strategy other than 'none'"):
        entities(LONG_TEXT, windows, logits, labels, strings, aggregation_strategy="none")


@pytest.fixture(scope="module")
def qa(qa_checkpoint: Path) -> tuple[Any, Any, Windowing, int]:
    model, tokenizer, base = load(qa_checkpoint, "BertForQuestionAnswering")
    return model, tokenizer, Windowing(base), base.token_to_id("[CLS]")


def answer_with_torch(qa: Any, question: str, context: str, **options: Any) -> list[dict[str, Any]]:
    model, _, windowing, cls_id = qa
    windows = windowing.question_windows([question], [context], max_length=QA_WINDOW, stride=128)[0]
    outputs = run_windows(model, windows)
    return answers(
        context,
        windows,
        [o.start_logits[0].numpy() for o in outputs],
        [o.end_logits[0].numpy() for o in outputs],
        cls_id=cls_id,
        **options,
    )


def pipeline_answers(qa: Any, question: str, context: str, **options: Any) -> list[dict[str, Any]]:
    model, tokenizer, *_ = qa
    pipe = transformers.pipeline("question-answering", model=model, tokenizer=tokenizer, device="cpu")
    found = pipe(question=question, context=context, **options)
    return found if isinstance(found, list) else [found]


@pytest.mark.parametrize(
    "options",
    [{}, {"top_k": 3}, {"top_k": 2, "max_answer_len": 1}, {"handle_impossible_answer": True, "top_k": 2}],
    ids=["default", "top3", "one-token", "impossible"],
)
def test_answer_equals_pipeline_on_unicode(qa: Any, options: dict[str, Any]) -> None:
    for question in QUESTIONS:
        for context in CONTEXTS:
            ours = answer_with_torch(qa, question, context, **options)
            assert_same(pipeline_answers(qa, question, context, **options), ours)
            for found in ours:
                assert found["answer"] == context[found["start"] : found["end"]]


def test_answer_over_long_context_equals_pipeline(qa: Any) -> None:
    _, tokenizer, windowing, _ = qa
    assert len(tokenizer(LONG_CONTEXT)["input_ids"]) > POSITIONS
    windows = windowing.question_windows([QUESTIONS[0]], [LONG_CONTEXT], max_length=QA_WINDOW, stride=128)[0]
    assert len(windows) >= 3
    for options in ({}, {"top_k": 4}, {"top_k": 2, "handle_impossible_answer": True}):
        ours = answer_with_torch(qa, QUESTIONS[0], LONG_CONTEXT, **options)
        assert_same(pipeline_answers(qa, QUESTIONS[0], LONG_CONTEXT, **options), ours)


def test_question_windows_equal_the_fast_tokenizer_overflow(qa: Any) -> None:
    _, tokenizer, windowing, _ = qa
    for stride in (0, 128, 300):
        windows = windowing.question_windows([QUESTIONS[2]], [LONG_CONTEXT], max_length=QA_WINDOW, stride=stride)[0]
        theirs = tokenizer(
            text=QUESTIONS[2],
            text_pair=LONG_CONTEXT,
            truncation="only_second",
            max_length=QA_WINDOW,
            stride=stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        assert [w.ids for w in windows] == theirs["input_ids"]
        assert [w.sequence_ids for w in windows] == [theirs.sequence_ids(i) for i in range(len(windows))]


def test_answer_errors_name_the_fix(qa: Any) -> None:
    _, _, windowing, cls_id = qa
    long_question = " ".join(["why"] * 400)
    with pytest.raises(ValueError, match=r"question 0 has 400 tokens, which leaves no room for its context"):
        windowing.question_windows([long_question], [LONG_CONTEXT], max_length=QA_WINDOW, stride=128)
    question = " ".join(["why"] * 300)  # 81 context tokens per window
    with pytest.raises(ValueError, match=r"doc_stride=128 must be >= 0 and smaller than the 81 context tokens"):
        windowing.question_windows([question], [LONG_CONTEXT], max_length=QA_WINDOW, stride=128)
    windows = windowing.question_windows([question], [LONG_CONTEXT], max_length=QA_WINDOW, stride=80)[0]
    assert len(windows) > 1
    with pytest.raises(ValueError, match="max_answer_len must be >= 1, got 0"):
        answers("c", [], [], [], cls_id=cls_id, max_answer_len=0)
    with pytest.raises(ValueError, match="top_k must be >= 1, got 0"):
        answers("c", [], [], [], cls_id=cls_id, top_k=0)
    with pytest.raises(ValueError, match="questions and contexts differ in length"):
        windowing.question_windows(["a", "b"], ["c"], max_length=QA_WINDOW, stride=128)


def torch_run_batch(model: Any) -> Any:
    """A ``run_batch`` backed by the torch model (padded batches, as the runtime feeds onnxruntime)."""

    def run_batch(batch: Any, names: Any) -> dict[str, np.ndarray]:
        with torch.no_grad():
            output = model(
                input_ids=torch.from_numpy(batch.input_ids),
                attention_mask=torch.from_numpy(batch.attention_mask),
                token_type_ids=torch.from_numpy(batch.token_type_ids),
            )
        graph = (
            {"token_logits": output.logits}
            if hasattr(output, "logits")
            else {"start_logits": output.start_logits, "end_logits": output.end_logits}
        )
        return {name: graph[name].numpy() for name in names}

    return run_batch


def test_tag_texts_batches_windows_of_many_texts(ner: Any) -> None:
    from bertonnx.batching import BatchLimits
    from bertonnx.tasks.tag import tag_texts

    model, tokenizer, windowing, strings, labels = ner
    pipe = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu")
    texts = [LONG_TEXT, *UNICODE_TEXTS, LONG_TEXT[:700]]
    ours = tag_texts(
        torch_run_batch(model),
        windowing,
        strings,
        labels,
        texts,
        max_length=POSITIONS,
        limits=BatchLimits(max_batch_tokens=1024),  # several batches, windows of one text in different ones
        aggregation_strategy="average",
        stride=32,
    )
    for text, found in zip(texts, ours, strict=True):
        assert_same(pipe(text, aggregation_strategy="average", stride=32), found)


def test_answer_questions_batches_windows_of_many_questions(qa: Any) -> None:
    from bertonnx.batching import BatchLimits
    from bertonnx.tasks.answer import answer_questions

    model, _, windowing, cls_id = qa
    questions = [*QUESTIONS, QUESTIONS[1]]
    contexts = [CONTEXTS[0], LONG_CONTEXT, CONTEXTS[1], LONG_CONTEXT]
    ours = answer_questions(
        torch_run_batch(model),
        windowing,
        cls_id,
        questions,
        contexts,
        max_length=QA_WINDOW,
        limits=BatchLimits(max_batch_tokens=800),
        top_k=2,
    )
    for question, context, found in zip(questions, contexts, ours, strict=True):
        assert_same(pipeline_answers(qa, question, context, top_k=2), found)


def test_answer_questions_refuses_empty_and_blank_inputs(qa: Any) -> None:
    from bertonnx.batching import BatchLimits
    from bertonnx.tasks.answer import answer_questions

    model, _, windowing, cls_id = qa

    def ask(question: str, context: str) -> Any:
        return answer_questions(
            torch_run_batch(model), windowing, cls_id, [question], [context], max_length=QA_WINDOW, limits=BatchLimits()
        )

    with pytest.raises(ValueError, match="question 0 is empty; pass a non-empty question"):
        ask("", "some context")
    with pytest.raises(ValueError, match="context 0 is empty"):
        ask("why?", "")
    with pytest.raises(ValueError, match=r"context 0 has no tokens \(it holds only whitespace or control"):
        ask("why?", " \t\n\x01\x02  ")
    with pytest.raises(ValueError, match="question 0 has no tokens"):
        ask("\x00 ", "a context")
