"""DeBERTa-v3 against BERT: onnxruntime fp32 and PyTorch eager at B1×T128, and where DeBERTa's graph spends its time.

``python -m bertonnx_benchmarks.deberta [--quick] [--threads N] [--out benchmarks/deberta.json]`` builds two seeded
encoders of the published shapes (no download): BERT-base (12 layers, hidden 768, vocab 30,522, 512 absolute
positions) and DeBERTa-v3-base (12 layers, hidden 768, vocab 128,100, relative attention with 256 log buckets,
``pos_att_type`` c2p + p2c, shared attention keys, no absolute positions, no segments). Each is exported by the
export's own graph code (:func:`bertonnx_export.graph.export_graph`: the class's forward through optimum's ONNX
config of the family) and opened by the runtime's :func:`bertonnx.session.build_session`. Per model, after
warm-up calls, PyTorch (``inference_mode``) and onnxruntime alternate call by call on the same seeded
``[1, 128]`` input for ``--repeats`` rounds; the p50 of each and their ratio are reported, with the outputs'
max abs difference (the timed graph computes what PyTorch does).

A third model, DeBERTa-v3-base with ``relative_attention`` off (absolute positions, content-to-content attention
only), is the ablation: the difference of the two DeBERTa p50s is what the disentangled attention costs each
engine. Then onnxruntime's profiler (``enable_profiling``) runs DeBERTa's graph ``--profile-runs`` times and its
node events are summed by op type and by node (over the 12 layers), so the report can say where the time goes.

Run it under the machine's timing lock: ``flock /work/team/timing.lock python -m bertonnx_benchmarks.deberta``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from .machine import cpu_facts, now_utc, versions

BATCH, TOKENS = 1, 128
#: Timed calls run in blocks per engine (call-by-call alternation would time one engine's spinning threads
#: against the other: onnxruntime's and OpenMP's idle workers spin for a while after each call).
ROUNDS = 4
BLOCK_PAUSE_S = 0.5
SEED = 1234
WEIGHT_STD = 0.02
COMMON = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "max_position_embeddings": 512,
}
#: deberta-v3-base's config.json, less its weights.
DEBERTA_V3_BASE = {
    "vocab_size": 128100,
    "relative_attention": True,
    "position_buckets": 256,
    "pos_att_type": ["p2c", "c2p"],
    "norm_rel_ebd": "layer_norm",
    "share_att_key": True,
    "position_biased_input": False,
    "max_relative_positions": -1,
    "type_vocab_size": 0,
    "layer_norm_eps": 1e-7,
    "pad_token_id": 0,
}
BERT_BASE = {"vocab_size": 30522, "type_vocab_size": 2}
#: A layer's index in a node name: the profile sums each node over the 12 layers.
LAYER_INDEX = re.compile(r"layer\.\d+")
#: The ablation: DeBERTa-v3-base without its relative attention (content-to-content attention over absolute
#: position embeddings, as BERT): what the disentangled part costs each engine.
NO_RELATIVE = {"relative_attention": False, "position_biased_input": True, "pos_att_type": None}
MODELS = ("bert-base", "deberta-v3-base", "deberta-v3-base-no-relative")


def _build(kind: str) -> Any:
    import torch
    import transformers

    if kind.startswith("deberta"):
        overrides = NO_RELATIVE if kind.endswith("no-relative") else {}
        config = transformers.DebertaV2Config(**COMMON, **{**DEBERTA_V3_BASE, **overrides})
        model = transformers.DebertaV2Model(config)
    else:
        config = transformers.BertConfig(**COMMON, **BERT_BASE)
        model = transformers.BertModel(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            values = torch.randn(param.shape, generator=generator) * WEIGHT_STD
            param.copy_(values + 1.0 if "LayerNorm.weight" in name else values)
    return model.eval()


def _feeds(inputs: tuple[str, ...], vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    ids = rng.integers(5, min(vocab, 30000), size=(BATCH, TOKENS), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 1, 2
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    return {name: feeds[name] for name in inputs}


def _profile(path: Path, feeds: dict[str, np.ndarray], threads: int, runs: int, workdir: Path) -> dict[str, Any]:
    """onnxruntime's node events over ``runs`` calls after one warm-up: ms per call by op type, and the costliest
    nodes with each summed over the layers (``layer.*``)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    so.profile_file_prefix = str(workdir / "deberta_profile")
    session = ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    for _ in range(runs):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
    kernels = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    runs_seen = runs + 1
    by_op: dict[str, float] = defaultdict(float)
    by_node: dict[str, float] = defaultdict(float)
    for event in kernels:
        micros = float(event.get("dur", 0))
        op = event.get("args", {}).get("op_name", "?")
        by_op[op] += micros
        by_node[f"{op} {LAYER_INDEX.sub('layer.*', event['name'].removesuffix('_kernel_time'))}"] += micros
    total = sum(by_op.values())

    def ms(micros: float) -> float:
        return round(micros / 1e3 / runs_seen, 2)

    return {
        "node_ms_per_call": ms(total),
        "by_op_ms": {op: ms(us) for op, us in sorted(by_op.items(), key=lambda i: -i[1])[:12]},
        "top_nodes_ms": {node: ms(us) for node, us in sorted(by_node.items(), key=lambda i: -i[1])[:20]},
    }


def measure(kind: str, threads: int, warmup: int, repeats: int, workdir: Path) -> dict[str, Any]:
    """Export one model, check the graph against PyTorch, and time both engines on the same input."""
    import torch

    from bertonnx.options import RuntimeOptions
    from bertonnx.session import build_session
    from bertonnx_export.graph import export_graph, graph_inputs

    torch.set_num_threads(threads)
    model = _build(kind)
    path = workdir / f"{kind}.onnx"
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_graph(model, path)
    export_s = time.perf_counter() - started
    inputs = graph_inputs(model)
    feeds = _feeds(inputs, model.config.vocab_size)
    session = build_session(path, RuntimeOptions(threads=threads))
    tensors = {name: torch.from_numpy(value) for name, value in feeds.items()}

    def run_torch() -> np.ndarray:
        with torch.inference_mode():
            return model(**tensors).last_hidden_state.numpy()

    def run_ort() -> np.ndarray:
        return session.run(["last_hidden_state"], feeds)[0]

    max_abs = float(np.abs(run_torch() - run_ort()).max())
    for _ in range(warmup):
        run_torch()
        run_ort()
    times: dict[str, list[float]] = {"torch": [], "onnxruntime": []}
    order = (("torch", run_torch), ("onnxruntime", run_ort))
    for round_index in range(ROUNDS):  # blocks of calls, alternating engines, who goes first swapped each round
        for name, call in order if round_index % 2 == 0 else order[::-1]:
            time.sleep(BLOCK_PAUSE_S)  # the other engine's idle threads stop spinning first
            for _ in range(max(1, repeats // ROUNDS)):
                started = time.perf_counter()
                call()
                times[name].append((time.perf_counter() - started) * 1e3)
    p50 = {name: statistics.median(values) for name, values in times.items()}
    return {
        "model": kind,
        "parameters": sum(p.numel() for p in model.parameters()),
        "graph_inputs": list(inputs),
        "export_s": round(export_s, 1),
        "max_abs_vs_torch": max_abs,
        "torch_p50_ms": round(p50["torch"], 2),
        "onnxruntime_p50_ms": round(p50["onnxruntime"], 2),
        "ort_over_torch": round(p50["onnxruntime"] / p50["torch"], 3),
        "repeats": len(times["torch"]),
        "path": path,
        "feeds": feeds,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print (and with ``--out`` write) the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few repeats and one profiled run (a smoke test)")
    parser.add_argument("--threads", type=int, default=2, help="threads for both engines (default 2)")
    parser.add_argument("--repeats", type=int, default=30, help="timed calls per engine and model (default 30)")
    parser.add_argument("--profile-runs", type=int, default=10, help="profiled onnxruntime calls of DeBERTa")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    repeats, warmup, profile_runs = (3, 1, 1) if args.quick else (args.repeats, 5, args.profile_runs)
    report: dict[str, Any] = {
        "when": now_utc(),
        "cpu": cpu_facts(),
        "versions": versions(),
        "threads": args.threads,
        "shape": f"B{BATCH}xT{TOKENS}",
        "load_before": Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3],
        "models": [],
    }
    with tempfile.TemporaryDirectory(prefix="deberta-bench-") as tmp:
        workdir = Path(tmp)
        for kind in MODELS:
            result = measure(kind, args.threads, warmup, repeats, workdir)
            path, feeds = result.pop("path"), result.pop("feeds")
            if kind == "deberta-v3-base":
                result["profile"] = _profile(path, feeds, args.threads, profile_runs, workdir)
            report["models"].append(result)
            print(json.dumps(result), flush=True)
    bert, deberta, plain = report["models"]
    report["deberta_ratio_over_bert_ratio"] = round(deberta["ort_over_torch"] / bert["ort_over_torch"], 3)
    report["relative_attention_ms"] = {
        engine: round(deberta[f"{engine}_p50_ms"] - plain[f"{engine}_p50_ms"], 2) for engine in ("torch", "onnxruntime")
    }
    report["load_after"] = Path("/proc/loadavg").read_text(encoding="utf-8").split()[:3]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
