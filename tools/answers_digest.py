"""A before/after digest of every answer of every task on every surface (issue 29).

A refactor of the task layer, the server or the corpus job must leave every answer bit-identical. This
script computes, for each tiny export (every architecture of ``tests.heads``, a reranker, a multi-label and
a regression classifier) and each variant, the answers of every task the export offers on a fixed seeded
set of inputs from Python, the command (``--json``), the server (TestClient) and the corpus job, and records
a sha256 of each answer's canonical serialisation (arrays as raw bytes with dtype and shape, floats via
``float.hex``, dicts with sorted keys; errors as their type and message). Volatile fields (timestamps,
durations, versions, paths) are dropped first. Compare two digests with ``--compare OLD NEW``.

Usage::

    python tools/answers_digest.py --out before.json --work /work/team/digest-exports
    python tools/answers_digest.py --out before-base.json --bert-base /work/team/bert-base --work DIR
    python tools/answers_digest.py --compare before.json after.json

torch and transformers are needed only to build the tiny exports the first time; ``--work`` reuses the
exports already there (an AFTER run must use the very exports the BEFORE run used).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import io
import json
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("fp32", "optimized", "int8")
#: name -> (architecture, build options, sharpened as tests/conftest.sharp_checkpoint does)
EXPORTS: dict[str, tuple[str, dict[str, Any], bool]] = {
    "encoder": ("BertModel", {}, False),
    "pretraining": ("BertForPreTraining", {}, False),
    "mlm": ("BertForMaskedLM", {}, False),
    "nsp": ("BertForNextSentencePrediction", {}, False),
    "single": ("BertForSequenceClassification", {}, False),
    "multi": ("BertForSequenceClassification", {"problem_type": "multi_label_classification"}, False),
    "regression": ("BertForSequenceClassification", {"num_labels": 2, "problem_type": "regression"}, False),
    "rerank": ("BertForSequenceClassification", {"num_labels": 1}, False),
    "ner": ("BertForTokenClassification", {}, True),
    "qa": ("BertForQuestionAnswering", {}, True),
}
#: Keys dropped from every answer before hashing: they change from run to run or machine to machine.
VOLATILE_KEYS = frozenset(
    {
        "model_dir",
        "version",
        "versions",
        "bertonnx_version",
        "created",
        "created_at",
        "timestamp",
        "time",
        "elapsed",
        "elapsed_seconds",
        "seconds",
        "duration",
        "duration_seconds",
        "started",
        "finished",
        "threads",
        "directory",
        "input_path",
        "output_path",
    }
)

# -- the inputs ---------------------------------------------------------------------------------------------

_RNG = random.Random(29)
_WORDS = str.split(
    "the weather is nice today and i agree with you about the film which was long but wonderful "
    "angela merkel met emmanuel macron in paris on monday while the city of berlin slept quietly "
    "résumé café naïve über straße 汉字 東京 🌞 🎉 numbers 12345 and 3.14 were written down"
)
ASCII = "the weather is nice today"
ACCENTS = "Ünïcödé café naïve résumé über straße"
CJK = "汉字 and 日本語のテキスト, 東京 is in 日本"
EMOJI = "good morning 🌞🎉 see you soon 👋🏽"
EMPTY = ""
TEXTS = [ASCII, ACCENTS, CJK, EMOJI, EMPTY, "a", "Angela Merkel met Emmanuel Macron in Paris."]
PAIRS = ["i agree with you", "tell me more", "汉字 ok", "👍", "b", EMPTY, "they talked about Berlin."]
LONG = " ".join(_RNG.choice(_WORDS) for _ in range(700))  # > 512 tokens: needs truncation
LONG_TAG = " ".join(
    _RNG.choice(["Angela Merkel", "Paris", "Emmanuel Macron", "Berlin", "visited", "the", "and", "met", "in"])
    for _ in range(900)
)
MASKED = [
    "the capital of france is [MASK].",
    "[MASK] went to the [MASK] with [MASK] friends 🎉.",
    "汉字 [MASK] café",
]
QUESTIONS = ["where did they meet?", "who met macron?", "what is the weather like?"]
CONTEXT = "Angela Merkel met Emmanuel Macron in Paris on Monday. The weather was nice and sunny."
LONG_CONTEXT = " ".join(_RNG.choice(_WORDS) for _ in range(1100)) + " " + CONTEXT


# -- canonical hashing --------------------------------------------------------------------------------------


def _truncation() -> dict[str, bool]:
    """The corpus job's truncation option, by the name this bertonnx gives it (``truncate`` before issue 29)."""
    from bertonnx.corpus import TaskOptions

    names = {field.name for field in dataclasses.fields(TaskOptions)}
    return {"truncation" if "truncation" in names else "truncate": True}


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, list | tuple):
        return [_strip(v) for v in value]
    return value


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, np.generic):
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        h.update(f"A{array.dtype.str}{array.shape}".encode())
        h.update(array.tobytes())
    elif value is None:
        h.update(b"N")
    elif isinstance(value, bool):
        h.update(b"T" if value else b"F")
    elif isinstance(value, int):
        h.update(f"I{value};".encode())
    elif isinstance(value, float):
        h.update(f"R{value.hex()};".encode())
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        h.update(f"S{len(data)}:".encode() + data)
    elif isinstance(value, bytes):
        h.update(f"Y{len(value)}:".encode() + value)
    elif isinstance(value, dict):
        h.update(f"D{len(value)}:".encode())
        for key in sorted(value, key=str):
            _feed(h, str(key))
            _feed(h, value[key])
    elif isinstance(value, list | tuple):
        h.update(f"L{len(value)}:".encode())
        for item in value:
            _feed(h, item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        h.update(f"C{type(value).__name__}:".encode())
        _feed(h, fields)
    else:
        raise TypeError(f"cannot digest a {type(value).__name__}: add it to _feed")


def digest(value: Any) -> str:
    """sha256 of ``value``'s canonical serialisation (volatile dict keys dropped)."""
    h = hashlib.sha256()
    _feed(h, _strip(value))
    return h.hexdigest()


class Recorder:
    """Collects ``key -> sha256`` and ``key -> description``; an exception is an answer too."""

    def __init__(self) -> None:
        self.calls: dict[str, str] = {}
        self.descriptions: dict[str, str] = {}

    def __call__(self, key: str, description: str, compute: Callable[[], Any]) -> None:
        if key in self.calls:
            raise ValueError(f"duplicate key {key!r}")
        try:
            value = compute()
        except Exception as error:  # noqa: BLE001 - the error is the answer
            value = {"error": type(error).__name__, "message": str(error)}
        self.calls[key] = digest(value)
        self.descriptions[key] = description


# -- the exports --------------------------------------------------------------------------------------------


def build_exports(work: Path, names: list[str]) -> dict[str, Path]:
    """Every tiny export under ``work/NAME/model``, built (with torch) only when missing."""
    sys.path.insert(0, str(ROOT))
    exports = {}
    for name in names:
        outdir = work / name / "model"
        exports[name] = outdir
        if (outdir / "bertonnx.json").exists():
            continue
        from bertonnx_export.pipeline import ExportOptions, run_export
        from tests.conftest import sharp_checkpoint
        from tests.heads import build_tiny_checkpoint

        architecture, options, sharp = EXPORTS[name]
        checkpoint = work / name / "checkpoint"
        if sharp:
            sharp_checkpoint(architecture, checkpoint)
        else:
            build_tiny_checkpoint(architecture, checkpoint, **options)
        print(f"exporting {name} ({architecture}) ...", file=sys.stderr)
        run_export(ExportOptions(outdir=outdir, model=str(checkpoint), variants=VARIANTS), log=lambda m: None)
    return exports


# -- Python -------------------------------------------------------------------------------------------------


def python_calls(record: Recorder, prefix: str, model: Any) -> None:
    """Every method of ``model`` (a BertOnnx) the export offers, on the fixed inputs."""
    tasks = set(model.tasks)
    p = prefix + "/python/"
    record(p + "call/texts", "model(TEXTS)", lambda: model(TEXTS))
    record(p + "call/pairs", "model(TEXTS, PAIRS)", lambda: model(TEXTS, PAIRS))
    record(p + "call/one", "model(ASCII)", lambda: model(ASCII))
    record(
        p + "call/long-trunc", "model([LONG, ASCII], truncation=True)", lambda: model([LONG, ASCII], truncation=True)
    )
    record(p + "call/long-refused", "model([LONG]) (an error)", lambda: model([LONG]))
    record(p + "call/no-hidden", "model(TEXTS, hidden_states=False)", lambda: model(TEXTS, hidden_states=False))
    record(
        p + "call/small-batches",
        "model(TEXTS, PAIRS, batch_size=2, max_batch_tokens=16)",
        lambda: model(TEXTS, PAIRS, batch_size=2, max_batch_tokens=16),
    )
    record(
        p + "call/max-length",
        "model(TEXTS, truncation=True, max_length=8)",
        lambda: model(TEXTS, truncation=True, max_length=8),
    )
    for i, text in enumerate([*TEXTS, LONG]):
        record(p + f"tokenize/{i}", f"tokenize(TEXTS+[LONG][{i}])", lambda text=text: model.tokenize(text))
    record(p + "tokenize/pair", "tokenize(ASCII, PAIRS[0])", lambda: model.tokenize(ASCII, PAIRS[0]))
    record(
        p + "tokenize/trunc",
        "tokenize(LONG, ACCENTS, truncation=True, max_length=16)",
        lambda: model.tokenize(LONG, ACCENTS, truncation=True, max_length=16),
    )
    for pooling in ("pooler", "cls", "mean"):
        for normalize in (False, True):
            record(
                p + f"embed/{pooling}/normalize={normalize}",
                f"embed(TEXTS, pooling={pooling!r}, normalize={normalize})",
                lambda pooling=pooling, normalize=normalize: model.embed(TEXTS, pooling=pooling, normalize=normalize),
            )
        record(
            p + f"embed/{pooling}/long-trunc",
            f"embed([LONG, *TEXTS], pooling={pooling!r}, truncation=True)",
            lambda pooling=pooling: model.embed([LONG, *TEXTS], pooling=pooling, truncation=True),
        )
    record(p + "embed/one", "embed(ASCII)", lambda: model.embed(ASCII))
    if "nsp" in tasks:
        record(p + "nsp/one", "nsp(ASCII, PAIRS[0])", lambda: model.nsp(ASCII, PAIRS[0]))
        record(p + "nsp/lists", "nsp(TEXTS, PAIRS)", lambda: model.nsp(TEXTS, PAIRS))
        record(
            p + "nsp/long-trunc",
            "nsp([LONG], [LONG], truncation=True)",
            lambda: model.nsp([LONG], [LONG], truncation=True),
        )
    if "classify" in tasks:
        for top_k in (1, 2, None):
            record(
                p + f"classify/top_k={top_k}",
                f"classify(TEXTS, top_k={top_k})",
                lambda top_k=top_k: model.classify(TEXTS, top_k=top_k),
            )
            record(
                p + f"classify/pairs/top_k={top_k}",
                f"classify(TEXTS, PAIRS, top_k={top_k})",
                lambda top_k=top_k: model.classify(TEXTS, PAIRS, top_k=top_k),
            )
        record(p + "classify/one", "classify(ASCII)", lambda: model.classify(ASCII))
        record(
            p + "classify/one-pair",
            "classify(ASCII, PAIRS[0], top_k=None)",
            lambda: model.classify(ASCII, PAIRS[0], top_k=None),
        )
        record(
            p + "classify/long-trunc",
            "classify([LONG, ASCII], top_k=None, truncation=True)",
            lambda: model.classify([LONG, ASCII], top_k=None, truncation=True),
        )
        for function in (None, "none", "softmax", "sigmoid"):
            record(
                p + f"classify_scores/{function}",
                f"classify_scores(TEXTS, PAIRS, function={function!r})",
                lambda function=function: model.classify_scores(TEXTS, PAIRS, function=function),
            )
        record(p + "labels", "model.labels", lambda: model.labels)
    if "rerank" in tasks:
        for raw in (False, True):
            record(
                p + f"rerank/raw={raw}",
                f"rerank(ASCII, TEXTS, raw_scores={raw})",
                lambda raw=raw: model.rerank(ASCII, TEXTS, raw_scores=raw),
            )
        record(
            p + "rerank/long-trunc",
            "rerank(LONG, [ASCII, LONG], truncation=True)",
            lambda: model.rerank(LONG, [ASCII, LONG], truncation=True),
        )
    if "fill_mask" in tasks:
        for top_k in (1, 5, 12):
            record(
                p + f"fill_mask/top_k={top_k}",
                f"fill_mask(MASKED, top_k={top_k})",
                lambda top_k=top_k: model.fill_mask(MASKED, top_k=top_k),
            )
        record(p + "fill_mask/one", "fill_mask(MASKED[1])", lambda: model.fill_mask(MASKED[1]))
        record(
            p + "fill_mask/no-mask",
            "fill_mask(['a [MASK]', 'none']) (an error)",
            lambda: model.fill_mask(["a [MASK]", "none"]),
        )
    if "tag" in tasks:
        for strategy in ("none", "simple", "first", "average", "max"):
            for ignore in (("O",), ()):
                record(
                    p + f"tag/{strategy}/ignore={','.join(ignore)}",
                    f"tag(TEXTS, {strategy!r}, ignore_labels={ignore})",
                    lambda s=strategy, i=ignore: model.tag(TEXTS, s, i),
                )
            if strategy != "none":
                for stride in (0, 64):
                    record(
                        p + f"tag/{strategy}/stride={stride}",
                        f"tag([LONG_TAG, CONTEXT], {strategy!r}, (), stride={stride})",
                        lambda s=strategy, st=stride: model.tag([LONG_TAG, CONTEXT], s, (), stride=st),
                    )
        record(p + "tag/one", "tag(CONTEXT)", lambda: model.tag(CONTEXT))
        record(p + "tag/long-refused", "tag(LONG_TAG) (an error)", lambda: model.tag(LONG_TAG))
    if "answer" in tasks:
        for top_k in (1, 3):
            record(
                p + f"answer/top_k={top_k}",
                f"answer(QUESTIONS, CONTEXT, top_k={top_k})",
                lambda top_k=top_k: model.answer(QUESTIONS, CONTEXT, top_k=top_k),
            )
            for doc_stride, max_seq_len in ((128, None), (64, 128), (32, 384)):
                record(
                    p + f"answer/long/top_k={top_k}/doc_stride={doc_stride}/max_seq_len={max_seq_len}",
                    f"answer(QUESTIONS, LONG_CONTEXT, top_k={top_k}, doc_stride={doc_stride}, "
                    f"max_seq_len={max_seq_len})",
                    lambda k=top_k, d=doc_stride, m=max_seq_len: model.answer(
                        QUESTIONS, LONG_CONTEXT, top_k=k, doc_stride=d, max_seq_len=m
                    ),
                )
        record(p + "answer/one", "answer(QUESTIONS[0], CONTEXT)", lambda: model.answer(QUESTIONS[0], CONTEXT))
        record(
            p + "answer/impossible",
            "answer(QUESTIONS, [CONTEXT, LONG_CONTEXT, EMOJI], top_k=3, handle_impossible_answer=True)",
            lambda: model.answer(QUESTIONS, [CONTEXT, LONG_CONTEXT, EMOJI], top_k=3, handle_impossible_answer=True),
        )
        record(
            p + "answer/max_answer_len",
            "answer(QUESTIONS, LONG_CONTEXT, max_answer_len=3)",
            lambda: model.answer(QUESTIONS, LONG_CONTEXT, max_answer_len=3),
        )


# -- the command --------------------------------------------------------------------------------------------


def _cli(argv: list[str]) -> Any:
    from bertonnx.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:
            code = exit_.code
    text = out.getvalue()
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = [json.loads(line) for line in text.splitlines() if line.strip()] if text.strip() else text
    return {"code": code, "stdout": body, "stderr": err.getvalue() if code else ""}


def cli_calls(record: Recorder, prefix: str, directory: Path, variant: str, tasks: set[str], work: Path) -> None:
    """Each task command with ``--json`` (and its options), in-process."""
    p = prefix + "/cli/"
    d = [str(directory), "--variant", variant, "--json"]
    long_file = work / "long_context.txt"
    if not long_file.exists():
        long_file.write_text(LONG_CONTEXT, encoding="utf-8")
    texts = [t for t in TEXTS if t]  # an argument cannot be empty on every shell; the empty text is via --input
    input_file = work / "texts.txt"
    if not input_file.exists():
        input_file.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    runs: list[tuple[str, list[str]]] = [
        ("tokenize/one", ["tokenize", *d, ASCII]),
        ("tokenize/pair", ["tokenize", *d, CJK, EMOJI]),
        ("tokenize/trunc", ["tokenize", *d, LONG, "--truncation", "--max-length", "16"]),
        ("embed/input-file", ["embed", *d, "--input", str(input_file)]),
        ("embed/long-trunc", ["embed", *d, LONG, ASCII, "--truncation"]),
    ]
    for pooling in ("pooler", "cls", "mean"):
        runs.append((f"embed/{pooling}", ["embed", *d, "--pooling", pooling, *texts]))
        runs.append((f"embed/{pooling}/normalize", ["embed", *d, "--pooling", pooling, "--normalize", *texts]))
    if "nsp" in tasks:
        runs.append(("nsp/one", ["nsp", *d, ASCII, PAIRS[0]]))
        runs.append(("nsp/long-trunc", ["nsp", *d, LONG, LONG, "--truncation"]))
    if "classify" in tasks:
        pairs = [arg for pair in PAIRS[:4] for arg in ("--pair", pair)]
        runs += [
            ("classify/top1", ["classify", *d, *texts]),
            ("classify/top2", ["classify", *d, "--top-k", "2", *texts]),
            ("classify/all", ["classify", *d, "--all-labels", *texts]),
            ("classify/pairs", ["classify", *d, "--all-labels", *TEXTS[:4], *pairs]),
            ("classify/input-file", ["classify", *d, "--input", str(input_file)]),
            ("classify/long-trunc", ["classify", *d, "--truncation", LONG]),
        ]
    if "rerank" in tasks:
        runs += [
            ("rerank/sigmoid", ["rerank", *d, ASCII, *texts]),
            ("rerank/raw", ["rerank", *d, "--raw-scores", ASCII, *texts]),
            ("rerank/long-trunc", ["rerank", *d, "--truncation", LONG, ASCII, LONG]),
        ]
    if "fill_mask" in tasks:
        runs += [
            ("fill_mask/default", ["fill-mask", *d, *MASKED]),
            ("fill_mask/top1", ["fill-mask", *d, "--top-k", "1", *MASKED]),
            ("fill_mask/top12", ["fill-mask", *d, "--top-k", "12", *MASKED]),
        ]
    if "tag" in tasks:
        for strategy in ("none", "simple", "first", "average", "max"):
            runs.append((f"tag/{strategy}", ["tag", *d, "--aggregation-strategy", strategy, *texts]))
            runs.append(
                (f"tag/{strategy}/keep-all", ["tag", *d, "--aggregation-strategy", strategy, "--keep-all", *texts])
            )
            if strategy != "none":
                runs.append(
                    (
                        f"tag/{strategy}/stride",
                        ["tag", *d, "--aggregation-strategy", strategy, "--keep-all", "--stride", "64", LONG_TAG],
                    )
                )
        runs.append(("tag/ignore-per", ["tag", *d, "--ignore-label", "B-PER", "--ignore-label", "O", CONTEXT]))
    if "answer" in tasks:
        questions = [arg for q in QUESTIONS for arg in ("--question", q)]
        runs += [
            ("answer/top1", ["answer", *d, *questions, "--context", CONTEXT]),
            ("answer/top3", ["answer", *d, *questions, "--context", CONTEXT, "--top-k", "3"]),
            ("answer/long", ["answer", *d, *questions, "--context-file", str(long_file), "--top-k", "3"]),
            (
                "answer/long-windows",
                [
                    "answer",
                    *d,
                    *questions,
                    "--context-file",
                    str(long_file),
                    "--doc-stride",
                    "64",
                    "--max-seq-len",
                    "128",
                ],
            ),
            (
                "answer/impossible",
                ["answer", *d, *questions, "--context", CONTEXT, "--handle-impossible-answer", "--top-k", "3"],
            ),
            (
                "answer/max-answer-len",
                ["answer", *d, "--question", QUESTIONS[0], "--context", CONTEXT, "--max-answer-len", "3"],
            ),
        ]
    for name, argv in runs:
        record(
            p + name, "bertonnx " + " ".join(a if len(a) < 60 else a[:40] + "…" for a in argv), lambda a=argv: _cli(a)
        )


# -- the server ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _served(directory: Path, variant: str) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    with TestClient(create_app(directory, variant=variant)) as client:
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{directory} ({variant}) did not load within 60 s")
            time.sleep(0.02)
        yield client


def _answer(response: Any) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = response.content
    return {"status": response.status_code, "body": body}


def server_calls(record: Recorder, prefix: str, directory: Path, variant: str, tasks: set[str]) -> None:
    """Every route of the export's tasks through a TestClient (the real app, lifespan run)."""
    p = prefix + "/server/"
    with _served(directory, variant) as client:

        def post(key: str, route: str, body: dict[str, Any]) -> None:
            shown = json.dumps(body, ensure_ascii=False)
            record(
                p + key,
                f"POST {route} {shown if len(shown) < 200 else shown[:200] + '…'}",
                lambda: _answer(client.post(route, json=body)),
            )

        info = client.get("/info").json()
        name = info["model_name"]
        record(p + "info", "GET /info minus model_dir, versions, threads", lambda: _answer(client.get("/info")))
        record(p + "kserve/metadata", f"GET /v2/models/{name}", lambda: _answer(client.get(f"/v2/models/{name}")))
        post("tokenize/texts", "/tokenize", {"inputs": [t for t in TEXTS if t]})
        post("tokenize/pair", "/tokenize", {"inputs": [[ASCII, PAIRS[0]]]})
        post("encode/texts", "/encode", {"inputs": TEXTS})
        post("encode/pairs", "/encode", {"inputs": [[a, b] for a, b in zip(TEXTS, PAIRS, strict=True)]})
        post("encode/long-trunc", "/encode", {"inputs": [LONG], "truncate": True})
        post("encode/long-refused", "/encode", {"inputs": [LONG]})
        for pooling in (None, "pooler", "cls", "mean"):
            for normalize in (True, False):
                body: dict[str, Any] = {"inputs": TEXTS, "normalize": normalize}
                if pooling is not None:
                    body["pooling"] = pooling
                post(f"embed/{pooling}/normalize={normalize}", "/embed", body)
        post("embed/one", "/embed", {"inputs": ASCII})
        post("embed/long-trunc", "/embed", {"inputs": [LONG, ASCII], "truncate": True})
        post("v1/embeddings", "/v1/embeddings", {"input": TEXTS, "model": "x"})
        post("v1/embeddings/one", "/v1/embeddings", {"input": EMOJI})
        post("v1/embeddings/base64", "/v1/embeddings", {"input": TEXTS, "encoding_format": "base64"})
        ids = [[101, 7592, 1010, 2088, 102], [101, 1037, 102, 1038, 102]]
        for outputs in (None, ["last_hidden_state"], ["pooler_output"], ["nsp_logits"], ["logits"]):
            infer: dict[str, Any] = {
                "inputs": [
                    {"name": "input_ids", "shape": [2, 5], "datatype": "INT64", "data": ids},
                    {"name": "attention_mask", "shape": [2, 5], "datatype": "INT64", "data": [[1] * 5, [1] * 5]},
                    {
                        "name": "token_type_ids",
                        "shape": [2, 5],
                        "datatype": "INT64",
                        "data": [[0] * 5, [0, 0, 0, 1, 1]],
                    },
                ]
            }
            if outputs is not None:
                infer["outputs"] = [{"name": o} for o in outputs]
            post(f"kserve/infer/{outputs}", f"/v2/models/{name}/infer", infer)
        if "nsp" in tasks or "classify" in tasks:
            post("predict/one", "/predict", {"inputs": [ASCII, PAIRS[0]]})
            post("predict/list", "/predict", {"inputs": [[a, b] for a, b in zip(TEXTS, PAIRS, strict=True)]})
            post("predict/raw", "/predict", {"inputs": [ASCII, PAIRS[0]], "raw_scores": True})
            post("predict/long-trunc", "/predict", {"inputs": [LONG, LONG], "truncate": True})
        if "classify" in tasks:
            post("predict/text", "/predict", {"inputs": ASCII})
            post("predict/texts", "/predict", {"inputs": [*TEXTS, [ASCII, PAIRS[0]]]})
            post("predict/texts-raw", "/predict", {"inputs": TEXTS, "raw_scores": True})
        if "rerank" in tasks:
            for raw in (False, True):
                post(
                    f"rerank/raw={raw}",
                    "/rerank",
                    {"query": ASCII, "texts": TEXTS, "raw_scores": raw, "return_text": True},
                )
            post("rerank/long-trunc", "/rerank", {"query": LONG, "texts": [ASCII, LONG], "truncate": True})
        if "fill_mask" in tasks:
            for top_k in (1, 5, 12):
                post(f"fill_mask/top_k={top_k}", "/fill_mask", {"inputs": MASKED, "top_k": top_k})
            post("fill_mask/one", "/fill_mask", {"inputs": MASKED[0]})
        if "tag" in tasks:
            for strategy in ("none", "simple", "first", "average", "max"):
                post(f"tag/{strategy}", "/tag", {"inputs": TEXTS, "aggregation_strategy": strategy})
                post(
                    f"tag/{strategy}/keep-all",
                    "/tag",
                    {"inputs": TEXTS, "aggregation_strategy": strategy, "ignore_labels": []},
                )
                if strategy != "none":
                    body = {
                        "inputs": [LONG_TAG, CONTEXT],
                        "aggregation_strategy": strategy,
                        "ignore_labels": [],
                        "stride": 64,
                    }
                    post(f"tag/{strategy}/stride", "/tag", body)
            post("tag/one", "/tag", {"inputs": CONTEXT})
        if "answer" in tasks:
            for top_k in (1, 3):
                post(f"answer/top_k={top_k}", "/answer", {"question": QUESTIONS, "context": CONTEXT, "top_k": top_k})
                post(
                    f"answer/long/top_k={top_k}",
                    "/answer",
                    {
                        "question": QUESTIONS,
                        "context": LONG_CONTEXT,
                        "top_k": top_k,
                        "doc_stride": 64,
                        "max_seq_len": 128,
                    },
                )
            post("answer/one", "/answer", {"question": QUESTIONS[0], "context": CONTEXT})
            post(
                "answer/impossible",
                "/answer",
                {
                    "question": QUESTIONS,
                    "context": [CONTEXT, LONG_CONTEXT, EMOJI],
                    "top_k": 3,
                    "handle_impossible_answer": True,
                },
            )


# -- the corpus job -----------------------------------------------------------------------------------------


def corpus_calls(record: Recorder, prefix: str, directory: Path, variant: str, tasks: set[str], work: Path) -> None:
    """``run_local_job`` for each corpus task the export offers; the Parquet read back, timestamps dropped."""
    import pyarrow.parquet as pq

    from bertonnx.corpus import TaskOptions, read_metadata
    from bertonnx.corpus.job import run_local_job

    source = work / "corpus-in.jsonl"
    if not source.exists():
        rows = [{"text": t, "pair": p} for t, p in zip([*TEXTS, LONG, LONG_TAG], [*PAIRS, ASCII, CJK], strict=True)]
        source.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    jobs: list[tuple[str, TaskOptions, str | None]] = []
    for pooling in ("pooler", "cls", "mean"):
        jobs.append((f"embed/{pooling}", TaskOptions("embed", pooling=pooling, **_truncation()), None))
    jobs.append(("embed/mean/normalize", TaskOptions("embed", pooling="mean", normalize=True, **_truncation()), None))
    jobs.append(("embed/skip", TaskOptions("embed", on_error="skip"), None))
    jobs.append(("encode", TaskOptions("encode", batch_size=3, **_truncation()), "pair"))
    if "nsp" in tasks:
        jobs.append(("nsp", TaskOptions("nsp", **_truncation()), "pair"))
    if "classify" in tasks:
        jobs.append(("classify/texts", TaskOptions("classify", **_truncation()), None))
        jobs.append(("classify/pairs", TaskOptions("classify", **_truncation()), "pair"))
    if "tag" in tasks:
        for strategy in ("none", "simple", "first", "average", "max"):
            stride = None if strategy == "none" else 64
            options = TaskOptions(
                "tag", aggregation_strategy=strategy, stride=stride, ignore_labels=(), on_error="skip"
            )
            jobs.append((f"tag/{strategy}", options, None))
    for name, options, pair_column in jobs:
        output = work / "corpus-out" / prefix.replace("/", "-") / (name.replace("/", "-") + ".parquet")
        output.parent.mkdir(parents=True, exist_ok=True)

        def run(options: Any = options, pair_column: str | None = pair_column, output: Path = output) -> Any:
            run_local_job(directory, source, output, options, pair_column=pair_column, variant=variant, progress=False)
            rejects = output.with_name(output.name + ".rejects.jsonl")
            if not rejects.exists():
                rejects = output.parent / (output.stem + ".rejects.jsonl")
            return {
                "rows": pq.read_table(output).to_pydict(),
                "schema": str(pq.read_schema(output).remove_metadata()),
                "metadata": read_metadata(output),
                "rejects": rejects.read_text(encoding="utf-8") if rejects.exists() else None,
            }

        record(
            prefix + "/corpus/" + name,
            f"run_local_job(corpus-in.jsonl, {options}, pair_column={pair_column!r})",
            run,
        )


# -- the run ------------------------------------------------------------------------------------------------


def run_export_calls(
    record: Recorder, name: str, directory: Path, variants: tuple[str, ...], work: Path, surfaces: tuple[str, ...]
) -> None:
    from bertonnx import BertOnnx

    for variant in variants:
        prefix = f"{name}/{variant}"
        print(f"{prefix} ...", file=sys.stderr, flush=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = BertOnnx(directory, variant)
            tasks = set(model.tasks)
            record(prefix + "/python/tasks", "model.tasks", lambda model=model: list(model.tasks))
            if "python" in surfaces:
                python_calls(record, prefix, model)
            del model
            if "cli" in surfaces:
                cli_calls(record, prefix, directory, variant, tasks, work)
            if "server" in surfaces:
                server_calls(record, prefix, directory, variant, tasks)
            if "corpus" in surfaces:
                corpus_calls(record, prefix, directory, variant, tasks, work)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("bertonnx", "onnxruntime", "tokenizers", "numpy", "fastapi", "pyarrow")}


def make_digest(out: Path, work: Path, bert_base: Path | None) -> None:
    started = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    record = Recorder()
    if bert_base is not None:
        variants = tuple(v for v in VARIANTS if _has_variant(bert_base, v))
        run_export_calls(record, "bert-base", bert_base, variants, work, ("python", "server"))
        exports = {"bert-base": bert_base}
    else:
        exports = build_exports(work, list(EXPORTS))
        variants = VARIANTS
        for name, directory in exports.items():
            run_export_calls(record, name, directory, variants, work, ("python", "cli", "server", "corpus"))
    seconds = time.monotonic() - started
    document = {
        "calls": dict(sorted(record.calls.items())),
        "meta": {
            "exports": {name: str(path) for name, path in exports.items()},
            "variants": list(variants),
            "key_count": len(record.calls),
            "seconds": round(seconds, 1),
            "versions": _versions(),
            "descriptions": dict(sorted(record.descriptions.items())),
        },
    }
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"{len(record.calls)} answers digested in {seconds:.1f} s -> {out}", file=sys.stderr)


def _has_variant(directory: Path, variant: str) -> bool:
    manifest = json.loads((directory / "bertonnx.json").read_text(encoding="utf-8"))
    return variant in manifest.get("variants", {})


def compare(old_path: Path, new_path: Path) -> int:
    old = json.loads(old_path.read_text(encoding="utf-8"))["calls"]
    new = json.loads(new_path.read_text(encoding="utf-8"))["calls"]
    differ = sorted(k for k in old.keys() & new.keys() if old[k] != new[k])
    missing = sorted(old.keys() - new.keys())
    added = sorted(new.keys() - old.keys())
    for title, keys in (("differ", differ), ("missing from new", missing), ("only in new", added)):
        print(f"{title}: {len(keys)}")
        for key in keys:
            print(f"  {key}")
    same = len(old.keys() & new.keys()) - len(differ)
    print(f"identical: {same} of {len(old)} old keys")
    return 1 if differ or missing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="the digest JSON to write")
    parser.add_argument("--work", type=Path, help="where the tiny exports live (built when missing; reused)")
    parser.add_argument("--bert-base", type=Path, help="digest this bert-base export (Python and server) instead")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"), help="compare two digests")
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("--out FILE.json is required (or --compare OLD NEW)")
    work = args.work or Path(tempfile.mkdtemp(prefix="answers-digest-"))
    make_digest(args.out, work, args.bert_base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
