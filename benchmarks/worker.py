"""One benchmark task in a fresh process: ``python -m benchmarks.worker TASK SPEC.json RESULT.json``.

Tasks:
    ``roofline``  GEMM peaks (onnxruntime, numpy) with the thread budget.
    ``check``     the PyTorch reference and every ONNX variant on the correctness cases (torch and
                  onnxruntime in one process, as the export gate does, with onnxruntime's spinning off);
                  saves the cases and everyone's outputs for the runners, and a checkpoint for the torch
                  cold-start probe.
    ``accuracy``  a real-weights export's variants against the PyTorch model of its manifest's source, on
                  all the export gate's cases (pooler, mean-pooled and NSP agreement figures for the targets).
    ``torch``     PyTorch eager fp32 runner: re-check, then the latency grid.
    ``onnx``      one bertonnx variant: re-check, then the latency grid, runtime overhead and the corpus
                  (``grid_only``: the grid alone, for the extra processes of ``--repeats``).
    ``peer``      sentence-transformers (torch) on the mixed corpus (:mod:`benchmarks.throughput`).
    ``throughput`` one bertonnx variant's ``embed`` on the mixed corpus (:mod:`benchmarks.throughput`).

Every variant is run through ``BertOnnx(...).session``, whatever engine runs it (onnxruntime, OpenVINO).

The thread budget is applied before the heavy imports. Progress goes to stderr; results to RESULT.json.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .grid import TimingPlan, measure, measure_paired, summarize, synthetic_feeds

OUTPUT_NAMES = ("last_hidden_state", "pooler_output", "nsp_logits")
#: Runtime overhead is measured on one single text of exactly this many tokens ([CLS] and [SEP] included).
OVERHEAD_TOKENS = 16
#: Paired rounds (one bare, one end-to-end call each) at least when timing the runtime overhead: the
#: overhead is a fraction of a millisecond inside calls that vary by milliseconds.
OVERHEAD_MIN_ROUNDS = 50
OVERHEAD_TEXT = (
    "the old man visited the house after the long winter and then the young doctor opened the garden "
    "before the meeting began in the morning"
)
#: Inputs of the corpus warmed up before its timed passes, in batches.
CORPUS_WARMUP_BATCHES = 2


def progress(message: str) -> None:
    """One progress line on stderr."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _plan(spec: dict[str, Any]) -> TimingPlan:
    return TimingPlan(**spec["plan"])


def _load_cases(path: str) -> tuple[int, Any]:
    data = np.load(path)
    count = 1 + max(int(key.split("/")[0][4:]) for key in data.files)
    return count, data


def _case_feeds(data: Any, i: int) -> dict[str, np.ndarray]:
    return {name: data[f"case{i}/{name}"] for name in ("input_ids", "attention_mask", "token_type_ids")}


# -- roofline ------------------------------------------------------------------------------------------


def task_roofline(spec: dict[str, Any]) -> dict[str, Any]:
    from .roofline import measure_peaks

    result = measure_peaks(spec["threads"], _plan(spec))
    progress(f"roofline fp32 {result['fp32_gflops']:.0f} GFLOP/s, int8 {result['int8_gops']:.0f} GOP/s")
    return result


# -- correctness check ---------------------------------------------------------------------------------


def _set_torch_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(1)


def _variant_outputs(directory: Path, variant: str, threads: int, cases: list[Any]) -> list[dict[str, np.ndarray]]:
    """``variant``'s outputs on ``cases``, with spinning off so it does not slow the PyTorch side."""
    from bertonnx import BertOnnx, RuntimeOptions

    model = BertOnnx(directory, variant, options=RuntimeOptions(threads=threads, allow_spinning=False))
    names = list(OUTPUT_NAMES)
    return [
        dict(zip(names, model.session.run(names, {n: case.feeds[n] for n in model._input_names}), strict=True))
        for case in cases
    ]


def task_check(spec: dict[str, Any]) -> dict[str, Any]:
    _set_torch_threads(spec["threads"])
    from bertonnx.manifest import read_manifest

    from .reference import check_cases, load_reference, save_cases, torch_outputs, verdict

    manifest = read_manifest(spec["dir"])
    model, source = load_reference(manifest, spec.get("reference"))
    cases = check_cases(manifest)
    reference = torch_outputs(model, cases)
    outputs = {"torch": reference}
    verdicts: dict[str, Any] = {}
    for variant in spec["variants"]:
        outputs[variant] = _variant_outputs(manifest.directory, variant, spec["threads"], cases)
        verdicts[variant] = verdict(variant, cases, reference, outputs[variant])
        state = "correct" if verdicts[variant]["correct"] else "WRONG: " + "; ".join(verdicts[variant]["breaches"])
        progress(f"check {variant}: {state}")
    save_cases(Path(spec["cases"]), cases, outputs)
    checkpoint = Path(spec["checkpoint"])
    source.model.save_pretrained(checkpoint)
    return {
        "verdicts": verdicts,
        "cases": [case.name for case in cases],
        "reference": {"model": source.model_id, "kind": source.kind, "weights": source.weights},
        "checkpoint": str(checkpoint),
    }


def task_accuracy(spec: dict[str, Any]) -> dict[str, Any]:
    """The real-weights figures of ``spec["variants"]`` of the export ``spec["dir"]``."""
    _set_torch_threads(spec["threads"])
    from bertonnx.manifest import read_manifest

    from .reference import accuracy_figures, gate_cases, load_reference, torch_outputs

    manifest = read_manifest(spec["dir"])
    model, source = load_reference(manifest, None)
    cases = gate_cases(manifest)
    reference = torch_outputs(model, cases)
    figures: dict[str, dict[str, float]] = {}
    for variant in spec["variants"]:
        outputs = _variant_outputs(manifest.directory, variant, spec["threads"], cases)
        figures[variant] = accuracy_figures(cases, reference, outputs)
        progress(
            f"real weights {variant}: pooler min cosine {figures[variant]['pooler_output_min_cosine']:.5f}, "
            f"mean-pooled {figures[variant]['mean_pooled_min_cosine']:.5f}, "
            f"NSP agreement {figures[variant]['nsp_argmax_agreement']:.3f}"
        )
    return {
        "figures": figures,
        "cases": [case.name for case in cases],
        "sequences": sum(len(case.lengths) for case in cases),
        "reference": {"model": source.model_id, "kind": source.kind, "weights": source.weights},
    }


# -- runners -------------------------------------------------------------------------------------------


def _grid(
    runner: str, spec: dict[str, Any], run: Callable[[dict[str, np.ndarray]], object], vocab_size: int
) -> list[dict[str, Any]]:
    rows = []
    for batch, seq in spec["shapes"]:
        feeds = synthetic_feeds(batch, seq, vocab_size)
        stats = summarize(measure(lambda f=feeds: run(f), _plan(spec)))
        p50_s = stats["p50_ms"] / 1e3
        row = {"runner": runner, "batch": batch, "seq": seq, **stats}
        row.update(sequences_per_s=batch / p50_s, tokens_per_s=batch * seq / p50_s)
        rows.append(row)
        progress(f"{runner} {batch}x{seq}: p50 {stats['p50_ms']:.2f} ms ({stats['runs']} runs)")
    return rows


def task_torch(spec: dict[str, Any]) -> dict[str, Any]:
    _set_torch_threads(spec["threads"])
    import torch

    from bertonnx.manifest import read_manifest

    from .reference import check_cases, load_reference, verdict

    manifest = read_manifest(spec["dir"])
    model, _ = load_reference(manifest, spec.get("reference"))
    cases = check_cases(manifest)
    _, data = _load_cases(spec["cases"])
    reference = [{name: data[f"case{i}/torch/{name}"] for name in OUTPUT_NAMES} for i in range(len(cases))]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        with torch.inference_mode():
            out: dict[str, Any] = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
            return out

    mine = [{k: v.numpy() for k, v in run(case.feeds).items()} for case in cases]
    check = verdict("torch", cases, reference, mine)
    progress(f"torch re-check: {'correct' if check['correct'] else 'WRONG'}")
    result: dict[str, Any] = {"check": check, "torch_threads": torch.get_num_threads()}
    result["grid"] = _grid("torch", spec, run, manifest.config["vocab_size"]) if check["correct"] else []
    return result


def _recheck(session: Any, spec: dict[str, Any], variant: str) -> dict[str, Any]:
    """This process's outputs on the cases against the outputs the check process judged (same file)."""
    count, data = _load_cases(spec["cases"])
    worst = 0.0
    for i in range(count):
        feeds = _case_feeds(data, i)
        got = session.run(list(OUTPUT_NAMES), {n: feeds[n] for n in spec["input_names"]})
        for name, value in zip(OUTPUT_NAMES, got, strict=True):
            diff = np.abs(value - data[f"case{i}/{variant}/{name}"])
            worst = max(worst, float(diff.max()) if np.isfinite(diff).all() else float("inf"))
    limit = float(spec["recheck_max_abs"])
    return {"max_abs_vs_checked": worst, "limit": limit, "correct": worst <= limit}


def _overhead(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    words = OVERHEAD_TEXT.split()
    text = ""
    for count in range(1, len(words) + 1):
        text = " ".join(words[:count])
        if len(model.tokenize(text).ids) >= OVERHEAD_TOKENS:
            break
    tokens = model.tokenize(text)
    feeds = {
        "input_ids": np.asarray([tokens.ids], dtype=np.int64),
        "attention_mask": np.asarray([tokens.attention_mask], dtype=np.int64),
        "token_type_ids": np.asarray([tokens.type_ids], dtype=np.int64),
    }
    feeds = {name: feeds[name] for name in spec["input_names"]}
    plan = _plan(spec)
    plan = replace(plan, min_runs=min(max(plan.min_runs, OVERHEAD_MIN_ROUNDS), plan.max_runs))
    bare_s, e2e_s = measure_paired(lambda: model.session.run(list(OUTPUT_NAMES), feeds), lambda: model([text]), plan)
    bare, e2e = summarize(bare_s), summarize(e2e_s)
    # the median of per-round differences: both calls of a round ran back to back on the same machine state
    overhead = float(np.median(np.subtract(e2e_s, bare_s))) * 1000.0
    progress(f"{model.variant} overhead at 1x{len(tokens.ids)}: {overhead:.3f} ms of {e2e['p50_ms']:.3f} ms")
    return {
        "tokens": len(tokens.ids),
        "text": text,
        "end_to_end": e2e,
        "session_run": bare,
        "overhead_ms": overhead,
        "overhead_pct": 100.0 * overhead / e2e["p50_ms"],
    }


def _naive(model: Any, texts: list[str], pairs: list[str] | None, batch_size: int) -> dict[str, np.ndarray]:
    """Input-order batching: consecutive chunks, each padded to its own longest input."""
    from bertonnx.batching import pad

    pooled: list[np.ndarray] = []
    for start in range(0, len(texts), batch_size):
        chunk_pairs = None if pairs is None else pairs[start : start + batch_size]
        encodings = model.tokenizer.encode(
            texts[start : start + batch_size], chunk_pairs, truncation=False, max_length=model.max_length
        )
        ids, mask, types = pad(encodings)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        result = model.session.run(list(OUTPUT_NAMES), {name: feeds[name] for name in model._input_names})
        pooled.append(result[1])
    return {"pooler_output": np.concatenate(pooled)}


def _corpus(model: Any, spec: dict[str, Any]) -> dict[str, Any]:
    from .corpus import build_corpus

    corpus = spec["corpus"]
    batch = int(corpus["batch_size"])
    singles, firsts, seconds = build_corpus(int(corpus["size"]), int(corpus["seed"]))
    parts: list[tuple[list[str], list[str] | None]] = [(singles, None), (firsts, seconds)]
    lengths = [
        len(e.ids)
        for t, p in parts
        for e in model.tokenizer.encode(t, p, truncation=False, max_length=model.max_length)
    ]
    warm = CORPUS_WARMUP_BATCHES * batch
    for texts, pairs in parts:
        model(texts[:warm], None if pairs is None else pairs[:warm], batch_size=batch, hidden_states=False)
        _naive(model, texts[:warm], None if pairs is None else pairs[:warm], batch)
    timings: dict[str, float] = {}
    pooled: dict[str, list[np.ndarray]] = {"sorted": [], "naive": []}
    for mode in ("sorted", "naive"):
        started = time.perf_counter()
        for texts, pairs in parts:
            if mode == "sorted":
                pooled[mode].append(model(texts, pairs, batch_size=batch, hidden_states=False).pooler_output)
            else:
                pooled[mode].append(_naive(model, texts, pairs, batch)["pooler_output"])
        timings[mode] = time.perf_counter() - started
    n = len(lengths)
    sorted_rate, naive_rate = n / timings["sorted"], n / timings["naive"]
    diff = max(float(np.abs(a - b).max()) for a, b in zip(pooled["sorted"], pooled["naive"], strict=True))
    progress(
        f"{model.variant} corpus ({n} inputs, batch {batch}): sorted {sorted_rate:.1f}/s, naive {naive_rate:.1f}/s"
    )
    return {
        "inputs": n,
        "singles": len(singles),
        "pairs": len(firsts),
        "batch_size": batch,
        "token_lengths": {"min": min(lengths), "max": max(lengths), "mean": float(np.mean(lengths))},
        "sorted_s": timings["sorted"],
        "naive_s": timings["naive"],
        "sorted_inputs_per_s": sorted_rate,
        "naive_inputs_per_s": naive_rate,
        "speedup": sorted_rate / naive_rate,
        "sorted_vs_naive_pooler_max_abs": diff,
    }


def task_onnx(spec: dict[str, Any]) -> dict[str, Any]:
    from bertonnx import BertOnnx, RuntimeOptions

    variant = spec["variant"]
    model = BertOnnx(spec["dir"], variant, options=RuntimeOptions(threads=spec["threads"], inter_op_threads=1))
    spec = {**spec, "input_names": list(model._input_names)}
    check = _recheck(model.session, spec, variant)
    progress(
        f"{variant} re-check: {'correct' if check['correct'] else 'WRONG'} (max abs {check['max_abs_vs_checked']:.2g})"
    )
    result: dict[str, Any] = {"check": check, "intra_op_threads": model.options.intra_op_threads}
    if not check["correct"]:
        return result

    def run(feeds: dict[str, np.ndarray]) -> object:
        return model.session.run(list(OUTPUT_NAMES), {name: feeds[name] for name in spec["input_names"]})

    result["grid"] = _grid(variant, spec, run, model.manifest.config["vocab_size"])
    if spec.get("grid_only"):
        return result
    result["overhead"] = _overhead(model, spec)
    result["corpus"] = _corpus(model, spec)
    return result


def task_peer(spec: dict[str, Any]) -> dict[str, Any]:
    from .throughput import task_peer as run

    return run(spec)


def task_throughput(spec: dict[str, Any]) -> dict[str, Any]:
    from .throughput import task_bertonnx as run

    return run(spec)


TASKS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "peer": task_peer,
    "throughput": task_throughput,
    "roofline": task_roofline,
    "check": task_check,
    "accuracy": task_accuracy,
    "torch": task_torch,
    "onnx": task_onnx,
}


def main(argv: list[str] | None = None) -> int:
    """Run one task: ``TASK SPEC.json RESULT.json``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] not in TASKS:
        print(f"usage: python -m benchmarks.worker {{{','.join(TASKS)}}} SPEC.json RESULT.json", file=sys.stderr)
        return 2
    task, spec_path, result_path = args
    from bertonnx import RandomWeightsWarning

    # the parent reports random weights in its results; one warning per worker process would only be noise
    warnings.simplefilter("ignore", RandomWeightsWarning)
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    result = TASKS[task](spec)
    Path(result_path).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
