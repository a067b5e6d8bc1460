"""Differential fuzz: every head on hostile inputs (``tests/fuzz.py``) against transformers' pipelines.

Each task's inputs and options are drawn from one seed; bertonnx (``fp32``) and the pipeline (or the torch
cross-encoder for ``rerank``) answer each, and an answer is exact when its labels, tokens, words, offsets and
shape agree and every score is within ``ATOL``. Both refusing an input counts as agreeing; inputs bertonnx
refuses by design (docs/tasks.md, "Where bertonnx deliberately differs") are not drawn. The share of exact
answers per task is printed; the default run takes ``FAST`` inputs per task, ``-m slow`` ``SLOW``.

Two answers that differ only where the model's own scores tie (fill-mask candidates within ``TIE_RTOL`` of each
other may swap places) are exact.
"""

from __future__ import annotations

import itertools
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx

from .fuzz import LONG_WORDS, Fuzz

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ATOL = 1e-4
TIE_RTOL = 1e-4
SEED = 34
FAST = 24
SLOW = 200
POSITIONS = 512
STRATEGIES = ("none", "simple", "first", "average", "max")
VOCAB_TARGETS = ["paris", "london", "the", "city", "a", "##s", "[MASK]"]
FOREIGN_TARGETS = ["zzqxv", "Zürich", "🙂🙂"]


def _tokenizer(checkpoint: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(checkpoint, model_max_length=POSITIONS)


def _pipe(task: str, checkpoint: Path) -> Any:
    return transformers.pipeline(task, model=str(checkpoint), tokenizer=_tokenizer(checkpoint), device="cpu")


def _close(a: float, b: float) -> bool:
    return abs(float(a) - float(b)) <= ATOL


def _same_dicts(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    if len(ours) != len(theirs):
        return False
    for mine, ref in zip(ours, theirs, strict=True):
        if set(mine) != set(ref):
            return False
        for key, value in ref.items():
            if key == "score":
                if not _close(mine[key], value):
                    return False
            elif mine[key] != value:
                return False
    return True


def _same_labels(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    """Labels in the same order (where their scores are apart) and every score within ``ATOL``."""
    mine = {d["label"]: d["score"] for d in ours}
    ref = {d["label"]: d["score"] for d in theirs}
    if set(mine) != set(ref) or not all(_close(mine[k], ref[k]) for k in ref):
        return False
    scores = [ref[d["label"]] for d in ours]
    return all(a >= b - ATOL for a, b in itertools.pairwise(scores))


def _same_fills(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> bool:
    if len(ours) != len(theirs):
        return False
    for mine, ref in zip(ours, theirs, strict=True):
        if not _close(mine["score"], ref["score"]):
            return False
        if mine["token"] != ref["token"]:  # a tie: same probability, order undefined
            if abs(mine["score"] - ref["score"]) > TIE_RTOL * max(ref["score"], 1e-12):
                return False
            continue
        if (mine["token_str"], mine["sequence"]) != (ref["token_str"], ref["sequence"]):
            return False
    return True


class Tally:
    """Exact answers per task; the first few differences, for the failure message."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}
        self.differences: list[str] = []

    def check(self, task: str, inputs: object, ours: Callable[[], Any], theirs: Callable[[], Any], same: Any) -> None:
        got = want = None
        try:
            got = ours()
        except (ValueError, TypeError) as exc:
            got = exc
        try:
            want = theirs()
        except Exception as exc:  # noqa: BLE001 - the pipeline raises many kinds
            want = exc
        if isinstance(got, Exception) or isinstance(want, Exception):
            exact = isinstance(got, Exception) and isinstance(want, Exception)
        else:
            exact = bool(same(got, want))
        counts = self.counts.setdefault(task, [0, 0])
        counts[0] += exact
        counts[1] += 1
        if not exact and len(self.differences) < 8:
            self.differences.append(f"{task} {inputs!r:.300}:\n  ours   {got!r:.400}\n  theirs {want!r:.400}")

    def report(self) -> str:
        return ", ".join(
            f"{task} {exact}/{total} ({exact / total:.0%})" for task, (exact, total) in self.counts.items()
        )


@pytest.fixture(scope="module")
def models(
    pipeline_heads: dict[str, tuple[Path, Path]],
    tiny_ner_checkpoint: Path,
    tiny_ner_export: Path,
    tiny_qa_checkpoint: Path,
    tiny_qa_export: Path,
) -> dict[str, tuple[BertOnnx, Any]]:
    """``task -> (bertonnx model, reference)`` for every head."""
    built: dict[str, tuple[BertOnnx, Any]] = {}
    for name in ("single", "multi", "regression"):
        checkpoint, export = pipeline_heads[name]
        built[name] = (BertOnnx(export), _pipe("text-classification", checkpoint))
    checkpoint, export = pipeline_heads["rerank"]
    cross = transformers.AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
    built["rerank"] = (BertOnnx(export), (_tokenizer(checkpoint), cross))
    checkpoint, export = pipeline_heads["mlm"]
    built["fill_mask"] = (BertOnnx(export), _pipe("fill-mask", checkpoint))
    built["tag"] = (BertOnnx(tiny_ner_export), _pipe("token-classification", tiny_ner_checkpoint))
    built["answer"] = (BertOnnx(tiny_qa_export), _pipe("question-answering", tiny_qa_checkpoint))
    return built


def _ids(model: BertOnnx, text: str, pair: str | None) -> list[int]:
    """The ids bertonnx feeds the model for one input (the tiny heads' scores are too flat to show every
    difference of tokenization, so the ids are compared too)."""
    return model.tokenize(text, pair, truncation=True, max_length=POSITIONS).ids


def _classify(tally: Tally, models: dict[str, tuple[BertOnnx, Any]], fuzz: Fuzz, count: int) -> None:
    for name in ("single", "multi", "regression"):
        model, pipe = models[name]
        for _ in range(count):
            a, b = fuzz.pair() if fuzz.random.random() < 0.5 else (fuzz.text(), None)
            inputs = a if b is None else {"text": a, "text_pair": b}
            tally.check(
                f"classify-{name}",
                inputs,
                lambda a=a, b=b, model=model: (
                    _ids(model, a, b),
                    model.classify(a, b, top_k=None, truncation=True),
                ),
                lambda a=a, b=b, inputs=inputs, pipe=pipe: (
                    pipe.tokenizer(text=a, text_pair=b, truncation=True, max_length=POSITIONS)["input_ids"],
                    pipe(inputs, top_k=None, truncation=True, max_length=POSITIONS),
                ),
                lambda got, want: got[0] == want[0] and _same_labels(got[1], want[1]),
            )


def _rerank(tally: Tally, models: dict[str, tuple[BertOnnx, Any]], fuzz: Fuzz, count: int) -> None:
    model, (tokenizer, cross) = models["rerank"]

    def theirs(query: str, texts: list[str]) -> list[float]:
        with torch.no_grad():
            return [
                float(
                    cross(**tokenizer(query, t, truncation=True, max_length=POSITIONS, return_tensors="pt")).logits[
                        0, 0
                    ]
                )
                for t in texts
            ]

    for _ in range(count):
        query, texts = fuzz.text(), [fuzz.pair()[1] for _ in range(3)]
        tally.check(
            "rerank",
            (query, texts),
            lambda q=query, t=texts: (
                [_ids(model, q, text) for text in t],
                {r["index"]: r["score"] for r in model.rerank(q, t, raw_scores=True, truncation=True)},
            ),
            lambda q=query, t=texts: (
                [tokenizer(q, text, truncation=True, max_length=POSITIONS)["input_ids"] for text in t],
                dict(enumerate(theirs(q, t))),
            ),
            lambda got, want: got[0] == want[0] and all(_close(got[1][i], want[1][i]) for i in range(len(want[1]))),
        )


def _fill_mask(tally: Tally, models: dict[str, tuple[BertOnnx, Any]], fuzz: Fuzz, count: int) -> None:
    model, pipe = models["fill_mask"]
    for _ in range(count):
        text, top_k = fuzz.masked(), fuzz.choice([1, 3, 5])
        targets = None
        if fuzz.random.random() < 0.3:
            targets = fuzz.random.sample(VOCAB_TARGETS, 3) + (
                [fuzz.choice(FOREIGN_TARGETS)] if fuzz.random.random() < 0.5 else []
            )

        def theirs(text: str = text, top_k: int = top_k, targets: list[str] | None = targets) -> Any:
            found = pipe(text, top_k=top_k, targets=targets)
            return [found] if found and isinstance(found[0], dict) else found

        tally.check(
            "fill_mask",
            (text, top_k, targets),
            lambda text=text, top_k=top_k, targets=targets: model.fill_mask(text, top_k=top_k, targets=targets),
            theirs,
            lambda got, want: len(got) == len(want) and all(_same_fills(g, w) for g, w in zip(got, want, strict=True)),
        )


def _tag(tally: Tally, models: dict[str, tuple[BertOnnx, Any]], fuzz: Fuzz, count: int) -> None:
    model, pipe = models["tag"]
    for _ in range(count):
        strategy = fuzz.choice(list(STRATEGIES))
        stride = None if strategy == "none" else fuzz.choice([None, 16, 64, 128])
        text = fuzz.text()
        if stride is None and len(model.tokenize(text, truncation=True, max_length=POSITIONS).ids) >= POSITIONS:
            text = fuzz.text(30)  # over 512 tokens without stride: refused by design (docs/tasks.md)
        options = {"aggregation_strategy": strategy, "stride": stride}
        tally.check(
            f"tag-{'stride' if stride else 'whole'}",
            (text, options),
            lambda text=text, options=options: model.tag(text, **options),
            lambda text=text, options=options: pipe(text, **{k: v for k, v in options.items() if v is not None}),
            _same_dicts,
        )


def _answer(tally: Tally, models: dict[str, tuple[BertOnnx, Any]], fuzz: Fuzz, count: int) -> None:
    model, pipe = models["answer"]
    for _ in range(count):
        question, context = fuzz.text(fuzz.random.randint(1, 8)), fuzz.text()
        if len(model.tokenize(question).ids) <= 2 or len(model.tokenize(context, truncation=True).ids) <= 2:
            continue  # a blank question or context: refused by design (docs/tasks.md)
        options = {
            "top_k": fuzz.choice([1, 1, 3]),
            "max_answer_len": fuzz.choice([1, 15, 30]),
            "handle_impossible_answer": fuzz.choice([False, True]),
            "max_seq_len": fuzz.choice([None, 64, 128, 256]),
            "doc_stride": fuzz.choice([None, None, 16]),
        }
        tally.check(
            "answer",
            (question, context, options),
            lambda q=question, c=context, o=options: model.answer(q, c, **o),
            lambda q=question, c=context, o=options: pipe(
                question=q, context=c, **{k: v for k, v in o.items() if v is not None}
            ),
            lambda got, want: _same_dicts(
                got if isinstance(got, list) else [got], want if isinstance(want, list) else [want]
            ),
        )


def _fuzz(models: dict[str, tuple[BertOnnx, Any]], count: int, capsys: pytest.CaptureFixture[str]) -> None:
    tally, start = Tally(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # foreign targets warn on both sides
        transformers.logging.set_verbosity_error()
        for run in (_classify, _rerank, _fill_mask, _tag, _answer):
            run(tally, models, Fuzz(SEED + count), count)
    with capsys.disabled():
        seconds = time.perf_counter() - start
        print(f"\nfuzz, {count} inputs per task (seed {SEED + count}, {seconds:.0f} s): {tally.report()}")
    assert all(total >= count // 4 for _, total in tally.counts.values()), tally.report()
    assert not tally.differences, f"{tally.report()}\n" + "\n".join(tally.differences)


def test_fuzz_every_head_against_its_pipeline(
    models: dict[str, tuple[BertOnnx, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    _fuzz(models, FAST, capsys)


@pytest.mark.slow
def test_fuzz_every_head_against_its_pipeline_at_length(
    models: dict[str, tuple[BertOnnx, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    _fuzz(models, SLOW, capsys)


def test_fuzz_inputs_are_hostile_and_seeded() -> None:
    """The generator draws every kind it claims, and one seed gives the same inputs."""
    texts = [Fuzz(7).text() for _ in range(1)] + [text for text in (Fuzz(7).text() for _ in range(3))]
    fuzz = Fuzz(7)
    drawn = [fuzz.text() for _ in range(400)] + [fuzz.pair()[1] for _ in range(100)]
    assert texts[0] == texts[1]
    joined = "".join(drawn)
    for marker in ("[MASK]", "[PAD]", "[SEP]", "\u200d", "\x00", "東", "ש", "\u0301", "\u3000"):
        assert marker in joined, marker
    assert "" in drawn
    assert max(len(text) for text in drawn) >= 4 * LONG_WORDS
    assert np.mean([len(text) for text in drawn]) > 20
