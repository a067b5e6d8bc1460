"""The offline baselines, in a fresh process with no server running: what ``BertOnnx`` does on the same requests.

``python -m benchmarks.serve.offline SPEC.json OUT.json``:

- **ceiling**: every input of the ``ceiling`` requests in one ``BertOnnx.embed`` call (texts, pooler,
  normalized, truncated, as ``/embed`` answers) and one ``BertOnnx.nsp`` call (pairs, as ``/predict``), timed
  over ``passes`` passes: the runtime sorts the whole set by length and cuts it by the token budget, which no
  server can beat (it sees only what is queued). Inputs/s of the mean pass is the ceiling of target 1.
- **single calls**: each of the ``single`` requests as one call, one after another (target 2 compares the
  server's concurrency-1 p50 with their p50).

- **single-text workload** (``single_workload``, issue 22): its texts in one ``BertOnnx.embed`` call (mean
  pooling, normalized, truncated, as the requests ask), timed over ``passes`` passes, and each text as one call
  (the concurrency-1 baseline); answers saved as ``s<index>``.

The answers of the ceiling requests are saved (``.npz``: ``e<index>`` vectors, ``p<index>`` is-next
probabilities) for the orchestrator to check the server's answers against.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..report import write_atomic

#: Untimed requests run first (sessions allocate and pick kernels on their first calls).
WARMUP_REQUESTS = 4


def _split(rows: list[dict[str, Any]]) -> tuple[list[str], list[str], list[str]]:
    texts, firsts, seconds = [], [], []
    for row in rows:
        inputs = row["body"]["inputs"]
        if row["route"] == "/predict":
            firsts += [pair[0] for pair in inputs]
            seconds += [pair[1] for pair in inputs]
        else:
            texts += inputs
    return texts, firsts, seconds


def _call(model: Any, texts: list[str], firsts: list[str], seconds: list[str]) -> tuple[np.ndarray, np.ndarray]:
    vectors = model.embed(texts, "pooler", normalize=True, truncation=True) if texts else np.zeros((0, 0))
    probabilities = model.nsp(firsts, seconds, truncation=True) if firsts else np.zeros((0,))
    return vectors, np.atleast_1d(probabilities)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from bertonnx import BertOnnx

    rows = [json.loads(line) for line in Path(spec["requests"]).read_text(encoding="utf-8").splitlines() if line]
    model = BertOnnx(spec["model_dir"], spec["variant"], threads=spec["threads"])
    for row in rows[-WARMUP_REQUESTS:]:
        _call(model, *_split([row]))

    ceiling = [rows[i] for i in spec["ceiling"]]
    texts, firsts, seconds = _split(ceiling)
    passes = []
    for _ in range(int(spec["passes"])):
        started = time.perf_counter()
        vectors, probabilities = _call(model, texts, firsts, seconds)
        passes.append(time.perf_counter() - started)
    answers: dict[str, np.ndarray] = {}
    e = p = 0
    for index, row in zip(spec["ceiling"], ceiling, strict=True):
        n = row["inputs"]
        if row["route"] == "/predict":
            answers[f"p{index}"], p = probabilities[p : p + n], p + n
        else:
            answers[f"e{index}"], e = vectors[e : e + n], e + n
    single_workload = None
    if spec.get("single_workload"):
        single_workload, single_answers = _single_workload(model, spec["single_workload"], int(spec["passes"]))
        answers.update(single_answers)
    np.savez(spec["answers"], **answers)

    single_ms = []
    for index in spec["single"]:
        request = _split([rows[index]])
        started = time.perf_counter()
        _call(model, *request)
        single_ms.append((time.perf_counter() - started) * 1000)

    inputs = sum(row["inputs"] for row in ceiling)
    tokens = sum(row["tokens"] for row in ceiling)
    seconds_mean = statistics.fmean(passes)
    return {
        "variant": model.variant,
        "engine": model.backend,
        "precision": model.precision,
        "threads": model.options.intra_op_threads,
        "ceiling": {
            "requests": len(ceiling),
            "inputs": inputs,
            "tokens": tokens,
            "pass_seconds": passes,
            "inputs_per_s": inputs / seconds_mean,
            "tokens_per_s": tokens / seconds_mean,
        },
        "single_workload": single_workload,
        "single": {
            "requests": len(single_ms),
            "ms": single_ms,
            "p50_ms": float(np.percentile(single_ms, 50)) if single_ms else None,
            "p90_ms": float(np.percentile(single_ms, 90)) if single_ms else None,
        },
    }


def _single_workload(model: Any, path: str, passes: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    texts = [row["body"]["inputs"][0] for row in rows]
    pooling = rows[0]["body"].get("pooling", "mean")
    seconds = []
    for _ in range(max(1, passes)):
        started = time.perf_counter()
        vectors = model.embed(texts, pooling, normalize=True, truncation=True)
        seconds.append(time.perf_counter() - started)
    single_ms = []
    for text in texts:
        started = time.perf_counter()
        model.embed([text], pooling, normalize=True, truncation=True)
        single_ms.append((time.perf_counter() - started) * 1000)
    result = {
        "texts": len(texts),
        "tokens": sum(row["tokens"] for row in rows),
        "pass_seconds": seconds,
        "inputs_per_s": len(texts) / statistics.fmean(seconds),
        "single_p50_ms": float(np.percentile(single_ms, 50)),
        "single_p90_ms": float(np.percentile(single_ms, 90)),
    }
    return result, {f"s{i}": vectors[i : i + 1] for i in range(len(texts))}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m benchmarks.serve.offline SPEC.json OUT.json", file=sys.stderr)
        return 2
    result = run(json.loads(Path(args[0]).read_text(encoding="utf-8")))
    write_atomic(Path(args[1]), json.dumps(result).encode("utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
