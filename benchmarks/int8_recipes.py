"""Search for an int8 recipe that is accurate, batch-invariant and fast (issue 24).

``python -m benchmarks.int8_recipes --accuracy-dir models/minilm --reference CKPT [--latency-dir BERT_BASE]``
builds each recipe from the export's ``model.onnx`` and measures, on real MiniLM weights and the mixed corpus
(:func:`benchmarks.corpus.build_mixed_corpus`):

- accuracy: mean-pooled cosine against PyTorch fp32 (min and mean over the texts), and the top-10
  nearest-neighbour agreement with the fp32 variant (the texts as both queries and documents);
- batch invariance: the largest max-abs difference of a text's mean-pooled vector and token states
  alone against inside a padded batch of 16 (at four positions);
- speed: corpus texts/s through the runtime's ``embed`` (length-sorted, token-budget batches), each recipe in a
  fresh process, recipes alternating round by round with the ``fp32`` and ``bf16`` peers so their ratios come
  from one run; optionally B1×T128 latency on a bert-base export, the same way.

Results are merged into a JSON file by recipe (``--json``), so recipes can be measured a few at a time;
``--plot`` draws throughput ratio against min cosine for every recipe in it. Recipes:

- ``fp32`` / ``bf16``: the export's peers (``bf16`` is the OpenVINO IR variant with bf16 matrix products).
- ``dyn-int8-channel``: onnxruntime dynamic int8, per-tensor activations, per-channel weights (the old
  ``int8`` variant).
- ``rowq``: per-row (per-token) symmetric int8 activations and per-channel int8 weights: every weight
  MatMul's input is scaled by its row's max |x| / 127, quantized (``QuantizeLinear``, offset 128 so the u8×s8
  VNNI kernel runs), multiplied by ``MatMulIntegerToFloat`` and rescaled per row. A row's result depends on
  that row only, so it is batch-invariant. ``rowq-fp32-GROUPS`` keeps the named groups (``qkv``, ``ao``
  attention output, ``fi`` FFN input, ``fo`` FFN output, joined by ``+``) in fp32; ``rowq-sA`` first applies
  SmoothQuant-style per-channel scales with migration strength ``A`` (folded into the weights).
- ``nbits8-bB``: onnxruntime ``MatMulNBits`` with 8-bit weights in blocks of ``B`` along K and int8 compute
  (``accuracy_level`` 4: activations quantized per row and block at run time).
- ``ov-w8-gG[-bf16]``: NNCF int8 weight compression (per channel, symmetric) run by OpenVINO with dynamic
  per-token activation quantization in groups of ``G`` along K (``DYNAMIC_QUANTIZATION_GROUP_SIZE``), the
  other operations in f32 (or bf16 with ``-bf16``).

Needs the ``fastpath`` extra (export, bench, OpenVINO, NNCF). Nothing here is imported by the runtime.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_RECIPES = ("fp32", "bf16", "dyn-int8-channel", "rowq", "nbits8-b32", "nbits8-b128", "ov-w8-g32")
#: Peers every throughput round times alongside the candidates.
PEERS = ("fp32", "bf16")
#: How the plot labels this machine's peers.
#: Lowest error drawn (fp32 sits there).
PLOT_FLOOR = 1e-6
PEER_LABELS = {"fp32": "fp32 (exact)", "bf16": "bf16 (OpenVINO)", "dyn-int8-channel": "old int8 (per-tensor dynamic)"}
#: Other engines measured on this machine type (PEERS.md, "Corpus throughput on an AVX-512 VNNI + BF16 EPYC",
#: 2026-12-01: real MiniLM, the 4,000 texts, 2 threads, wall clock): (label, texts/s ÷ bertonnx fp32's 263 in
#: that run, mean-pooled min cosine vs PyTorch). Drawn as diamonds; PEERS.md gives no cosine for the fp32 engines,
#: drawn at the plot's floor as fp32 is.
EXTERNAL_PEERS = (
    ("CTranslate2 int8", 310 / 263, 0.985),
    ("CTranslate2 fp32", 211 / 263, 1.0),
    ("llama.cpp q8_0", 147 / 263, 0.998),
    ("llama.cpp f32", 158 / 263, 1.0),
    ("sentence-transformers (torch)", 124 / 263, 1.0),
)
TOP_K = 10
INVARIANCE_TEXTS = 6
INVARIANCE_BATCH = 16
INVARIANCE_POSITIONS = (0, 15)
WARMUP_TEXTS = 64
LATENCY_SHAPE = (1, 128)
LATENCY_SECONDS = 4.0
#: B1×T128 calls per recipe and round with ``--clock cpu``.
LATENCY_CALLS = 10
#: Weight-MatMul groups by node name (MiniLM/BERT export names), for ``rowq-fp32-...``.
GROUPS = {
    "qkv": ("/attention/self/query/", "/attention/self/key/", "/attention/self/value/"),
    "ao": ("/attention/output/dense/",),
    "fi": ("/intermediate/dense/",),
    "fo": ("/output/dense/",),
}


def group_of(node_name: str) -> str | None:
    """The recipe group of a weight MatMul (``None`` for pooler and heads)."""
    for group, patterns in GROUPS.items():
        if any(p in node_name for p in patterns) and not (group == "fo" and "/attention/" in node_name):
            return group
    return None


# -- recipes ----------------------------------------------------------------------------------------------


def build(recipe: str, directory: Path, work: Path, feeds: list[dict[str, np.ndarray]]) -> tuple[Path, str, dict]:
    """Build ``recipe`` from ``directory``'s export into ``work``; return ``(path, engine, ov_config)``."""
    from benchmarks import fastpath

    source = directory / "model.onnx"
    if recipe == "fp32":
        return source, "ort", {}
    if recipe == "bf16":
        return directory / "model_bf16.xml", "ov", {"INFERENCE_PRECISION_HINT": "bf16"}
    if recipe == "dyn-int8-channel" or recipe.startswith("nbits8-"):
        manifest = json.loads((directory / "bertonnx.json").read_text())
        config = manifest["config"]
        path = fastpath.build(recipe, directory, work, feeds, config["num_attention_heads"], config["hidden_size"])
        return path, "ort", {}
    if recipe.startswith("rowq"):
        import onnx

        from bertonnx_export.variants import calibration_feeds, per_row_int8

        alpha: float | None = None
        unsigned = False
        keep: tuple[str, ...] = ()
        block: int | None = None
        other: int | None = None
        corpus_calibration = False
        for part in recipe.split("-")[1:]:
            if part == "u":
                unsigned = True
            elif part == "c":
                corpus_calibration = True
            elif part.startswith("k") and part[1:].isdigit():
                block = int(part[1:])
            elif part.startswith("a") and part[1:].isdigit():
                other = int(part[1:])
            elif part.startswith("s") and part[1:].replace(".", "").isdigit():
                alpha = float(part[1:])
            elif part != "fp32":
                keep = tuple(part.split("+"))
                if set(keep) - set(GROUPS):
                    raise ValueError(f"{recipe}: unknown groups {sorted(set(keep) - set(GROUPS))}")
        model = onnx.load(str(source))
        calibration = feeds if corpus_calibration else calibration_feeds(directory / "tokenizer.json", 512)
        per_row_int8(
            model,
            calibration,
            smooth_alpha=alpha,
            unsigned_gelu=unsigned,
            skip=lambda name: group_of(name) in keep,
            gelu_block=block,
            other_block=other,
        )
        target = work / f"{recipe}.onnx"
        onnx.save(model, str(target))
        return target, "ort", {}
    if recipe == "int8":
        return directory / "model_int8.onnx", "ort", {}
    if recipe.startswith("ov-w8-g"):
        import nncf
        import openvino

        spec = recipe.removeprefix("ov-w8-g")
        group, _, precision = spec.partition("-")
        target = work / f"{recipe}.xml"
        model = openvino.Core().read_model(str(source))
        model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM)
        openvino.save_model(model, str(target), compress_to_fp16=False)
        size = group if group != "tok" else str(2**64 - 1)
        return target, "ov", {"INFERENCE_PRECISION_HINT": precision or "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": size}
    raise ValueError(f"unknown recipe {recipe!r}")


class OpenVinoRunner:
    """``run``/``get_inputs``/``get_outputs`` over an OpenVINO model compiled with ``config``."""

    def __init__(self, path: Path, config: dict[str, Any], threads: int) -> None:
        import openvino

        full = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_NUM_THREADS": threads, **config}
        self.compiled = openvino.Core().compile_model(str(path), "CPU", full)
        self.request = self.compiled.create_infer_request()
        from bertonnx.openvino_session import IoName

        self._inputs = [IoName(p.get_any_name()) for p in self.compiled.inputs]
        self._outputs = [IoName(p.get_any_name()) for p in self.compiled.outputs]

    def get_inputs(self) -> list[Any]:
        return list(self._inputs)

    def get_outputs(self) -> list[Any]:
        return list(self._outputs)

    def run(self, names: Any, feeds: Any, run_options: object = None) -> list[np.ndarray]:
        result = self.request.infer(dict(feeds), share_outputs=False)
        return [np.asarray(result[n]) for n in (names or [o.name for o in self._outputs])]


def load_model(directory: Path, path: Path, engine: str, config: dict[str, Any], threads: int) -> Any:
    """The runtime's :class:`~bertonnx.BertOnnx` on ``directory`` with its session swapped for the recipe's."""
    import warnings

    from bertonnx import BertOnnx
    from bertonnx.session import build_session

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = BertOnnx(directory, "fp32", threads=threads)
    if engine == "ov":
        model.session = OpenVinoRunner(path, config, threads)
        model._run_options = None
    else:
        model.session = build_session(path, model.options)
    return model


# -- measurements -----------------------------------------------------------------------------------------


def corpus(size: int) -> list[str]:
    """``size`` texts of the 4,000-text mixed corpus, spread evenly over it (all of it for 4,000)."""
    from benchmarks.corpus import MIXED_CORPUS_SIZE, build_mixed_corpus

    texts = build_mixed_corpus(MIXED_CORPUS_SIZE)
    step = max(1, MIXED_CORPUS_SIZE // size)
    return texts[::step][:size]


def torch_reference(checkpoint: Path, model: Any, texts: list[str], cache: Path) -> np.ndarray:
    """PyTorch fp32 mean-pooled vectors of ``texts`` (BertModel, tokenized by the runtime), cached."""
    if cache.exists():
        return np.load(cache)
    import torch
    from transformers import BertModel

    torch.set_num_threads(2)
    bert = BertModel.from_pretrained(str(checkpoint), add_pooling_layer=False).eval()
    encodings = model.encode(texts, truncation=True)
    order = np.argsort([len(e.ids) for e in encodings])
    out = np.zeros((len(texts), bert.config.hidden_size), np.float32)
    with torch.inference_mode():
        for start in range(0, len(order), 32):
            rows = order[start : start + 32]
            length = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), length), np.int64)
            mask = np.zeros_like(ids)
            types = np.zeros_like(ids)
            for r, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[r, :n], mask[r, :n], types[r, :n] = encodings[i].ids, 1, encodings[i].type_ids
            hidden = bert(
                input_ids=torch.from_numpy(ids),
                attention_mask=torch.from_numpy(mask),
                token_type_ids=torch.from_numpy(types),
            ).last_hidden_state.numpy()
            out[rows] = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, out)
    return out


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.sum(a64 * b64, -1) / (np.linalg.norm(a64, axis=-1) * np.linalg.norm(b64, axis=-1))


def top_k(vectors: np.ndarray, k: int = TOP_K) -> np.ndarray:
    """Indices of each vector's ``k`` nearest others by cosine, ``[n, k]``."""
    unit = vectors.astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def nn_agreement(reference: np.ndarray, candidate: np.ndarray, k: int = TOP_K) -> float:
    """Share of each text's top-``k`` neighbours (by the reference) that the candidate also ranks top-``k``."""
    a, b = top_k(reference, k), top_k(candidate, k)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b, strict=True)]))


def batch_invariance(model: Any, texts: list[str]) -> float:
    """Max abs difference of mean-pooled vectors and token states: a text alone vs in a padded batch."""
    big = 1 << 20
    rng = np.random.default_rng(0)
    lengths = np.array([len(t.split()) for t in texts])
    chosen = list(np.argsort(lengths)[:: max(1, len(texts) // INVARIANCE_TEXTS)][:INVARIANCE_TEXTS])
    worst = 0.0
    for index in chosen:
        text = texts[index]
        alone_out = model([text], max_batch_tokens=big, truncation=True)
        alone = model.embed([text], "mean", max_batch_tokens=big, truncation=True)[0]
        mates = [texts[int(i)] for i in rng.choice(len(texts), INVARIANCE_BATCH - 1, replace=False)]
        for position in INVARIANCE_POSITIONS:
            batch = [*mates[:position], text, *mates[position:]]
            out = model(batch, max_batch_tokens=big, batch_size=INVARIANCE_BATCH, truncation=True)
            mean = model.embed(batch, "mean", max_batch_tokens=big, batch_size=INVARIANCE_BATCH, truncation=True)[
                position
            ]
            worst = max(
                worst,
                float(np.abs(mean - alone).max()),
                float(np.abs(out.token_states(position) - alone_out.token_states(0)).max()),
            )
    return worst


_WORKER = """
import json, sys, time, warnings
from pathlib import Path
sys.path.insert(0, {root!r})
from benchmarks.int8_recipes import load_model, corpus
spec = json.loads(sys.argv[1])
texts = corpus(spec["texts"])
model = load_model(Path(spec["dir"]), Path(spec["path"]), spec["engine"], spec["config"], spec["threads"])
if spec["mode"] == "corpus":
    model.embed(texts[: {warmup}], "mean", truncation=True)
    start = time.perf_counter()
    model.embed(texts, "mean", truncation=True)
    print(json.dumps({{"texts_per_s": len(texts) / (time.perf_counter() - start)}}))
else:
    import numpy as np
    b, t = spec["shape"]
    rng = np.random.default_rng(0)
    feeds = {{"input_ids": rng.integers(1000, 30000, (b, t)), "attention_mask": np.ones((b, t), np.int64),
             "token_type_ids": np.zeros((b, t), np.int64)}}
    for _ in range(5):
        model.session.run(["last_hidden_state"], feeds)
    times, end = [], time.perf_counter() + spec["seconds"]
    while time.perf_counter() < end or len(times) < 10:
        t0 = time.perf_counter(); model.session.run(["last_hidden_state"], feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({{"p50_ms": float(np.median(times)), "min_ms": float(np.min(times))}}))
"""


def timed(spec: dict[str, Any]) -> dict[str, float]:
    """Run one timing job (``spec["mode"]``: ``corpus`` or ``latency``) in a fresh process."""
    root = str(Path(__file__).resolve().parents[1])
    script = _WORKER.format(root=root, warmup=WARMUP_TEXTS)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(spec)], capture_output=True, text=True, env=env, timeout=900
    )
    if out.returncode != 0:
        raise RuntimeError(f"timing {spec['path']} failed:\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def cpu_rounds(models: dict[str, Any], job: Callable[[Any], object], rounds: int) -> dict[str, list[float]]:
    """Process CPU seconds of ``job(model)`` per model and round, models alternating (order reversed each round)."""
    seconds: dict[str, list[float]] = defaultdict(list)
    names = list(models)
    for round_number in range(rounds):
        for name in names if round_number % 2 == 0 else names[::-1]:
            start = time.process_time()
            job(models[name])
            seconds[name].append(time.process_time() - start)
            print(f"cpu round {round_number + 1}: {name} {seconds[name][-1]:.2f} s", file=sys.stderr, flush=True)
    return seconds


def file_size(path: Path) -> int:
    """Bytes of a model file and its weights (ONNX external data or the IR's .bin)."""
    extra = [path.with_name(path.name + ".data"), path.with_suffix(".bin")]
    return path.stat().st_size + sum(p.stat().st_size for p in extra if p.exists() and p != path)


def machine() -> str:
    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    shown = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16") if f in flags]
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, flags: {' '.join(shown)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.int8_recipes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--accuracy-dir", type=Path, help="real-weights export (MiniLM)")
    parser.add_argument("--reference", type=Path, help="its checkpoint directory (PyTorch)")
    parser.add_argument(
        "--render", type=Path, metavar="PNG", help="only draw --json's recipes to PNG and print their markdown table"
    )
    parser.add_argument("--latency-dir", type=Path, help="bert-base export for B1xT128 latency (default: skip)")
    parser.add_argument("--recipes", default=",".join(DEFAULT_RECIPES))
    parser.add_argument("--texts", type=int, default=1000, help="texts of the mixed corpus (4000 = all of it)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating timing rounds (0: accuracy only)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: texts/s with --threads, a fresh process per recipe and round; cpu: texts per CPU-second with 1 "
        "thread, all recipes in this process (ratios that hold on a machine other jobs keep busy)",
    )
    parser.add_argument("--skip-accuracy", action="store_true", help="only time (the JSON keeps earlier accuracy)")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/int8_recipes.json"))
    parser.add_argument("--work", type=Path, default=Path(".cache/int8-recipes"))
    args = parser.parse_args(argv)
    if args.render is not None:
        results = json.loads(args.json.read_text())
        plot(results, args.render, PEER_LABELS)
        print(table(results))
        return 0
    if args.accuracy_dir is None or args.reference is None:
        parser.error("--accuracy-dir and --reference are required (unless --render)")
    recipes = [r for r in args.recipes.split(",") if r]
    texts = corpus(args.texts)
    work = args.work / "minilm"
    work.mkdir(parents=True, exist_ok=True)
    fp32_model = load_model(args.accuracy_dir, args.accuracy_dir / "model.onnx", "ort", {}, args.threads)
    feeds = _calibration_feeds(fp32_model, texts)
    if not args.skip_accuracy:
        reference = torch_reference(args.reference, fp32_model, texts, args.work / f"torch-mean-{len(texts)}.npy")
        fp32_vectors = fp32_model.embed(texts, "mean", truncation=True)
    results: dict[str, Any] = json.loads(args.json.read_text()) if args.json.exists() else {}
    built: dict[str, tuple[Path, str, dict]] = {}
    for recipe in [] if args.skip_accuracy else dict.fromkeys(recipes):
        start = time.perf_counter()
        built[recipe] = build(recipe, args.accuracy_dir, work, feeds)
        build_s = time.perf_counter() - start
        model = load_model(args.accuracy_dir, *built[recipe], args.threads)
        vectors = model.embed(texts, "mean", truncation=True)
        cos = cosines(vectors, reference)
        row = {
            "texts": len(texts),
            "min_cos": float(cos.min()),
            "mean_cos": float(cos.mean()),
            "nn10_vs_fp32": nn_agreement(fp32_vectors, vectors),
            "batch_max_abs": batch_invariance(model, texts),
            "build_s": build_s,
            "bytes": file_size(built[recipe][0]),
        }
        results.setdefault(recipe, {}).update(row)
        print(json.dumps({"recipe": recipe, **row}), file=sys.stderr, flush=True)
        _save(args.json, results)
    timed_recipes = list(dict.fromkeys([*PEERS, *recipes]))
    for recipe in timed_recipes:
        if recipe not in built:
            built[recipe] = build(recipe, args.accuracy_dir, work, feeds)
    speeds: dict[str, list[float]] = defaultdict(list)
    cpu_clock = args.clock == "cpu"
    if cpu_clock and args.rounds:
        models = {r: load_model(args.accuracy_dir, *built[r], 1) for r in timed_recipes}
        for model in models.values():
            model.embed(texts[:WARMUP_TEXTS], "mean", truncation=True)
        for recipe, seconds in cpu_rounds(
            models, lambda m: m.embed(texts, "mean", truncation=True), args.rounds
        ).items():
            speeds[recipe] = [len(texts) / t for t in seconds]
    for round_number in range(0 if cpu_clock else args.rounds):
        order = timed_recipes if round_number % 2 == 0 else timed_recipes[::-1]
        for recipe in order:
            path, engine, config = built[recipe]
            spec = {"dir": str(args.accuracy_dir), "path": str(path), "engine": engine, "config": config,
                    "threads": args.threads, "texts": args.texts, "mode": "corpus"}  # fmt: skip
            speeds[recipe].append(timed(spec)["texts_per_s"])
            print(f"round {round_number + 1}: {recipe} {speeds[recipe][-1]:.1f} texts/s", file=sys.stderr, flush=True)
    latencies: dict[str, list[float]] = defaultdict(list)
    if args.latency_dir is not None and args.rounds:
        lat_work = args.work / "latency"
        lat_work.mkdir(parents=True, exist_ok=True)
        lat_built = {
            r: build(r, args.latency_dir, lat_work, _calibration_feeds(fp32_model, texts)) for r in timed_recipes
        }
        if cpu_clock:
            lat_models = {r: load_model(args.latency_dir, *lat_built[r], 1) for r in timed_recipes}
            batch, length = LATENCY_SHAPE
            rng = np.random.default_rng(0)
            feeds = {
                "input_ids": rng.integers(1000, 30000, (batch, length)),
                "attention_mask": np.ones((batch, length), np.int64),
                "token_type_ids": np.zeros((batch, length), np.int64),
            }
            job = lambda m: [m.session.run(["last_hidden_state"], feeds) for _ in range(LATENCY_CALLS)]  # noqa: E731
            for model in lat_models.values():
                job(model)
            for recipe, seconds in cpu_rounds(lat_models, job, args.rounds).items():
                latencies[recipe] = [1e3 * t / LATENCY_CALLS for t in seconds]
        for round_number in range(0 if cpu_clock else args.rounds):
            order = timed_recipes if round_number % 2 == 0 else timed_recipes[::-1]
            for recipe in order:
                path, engine, config = lat_built[recipe]
                spec = {"dir": str(args.latency_dir), "path": str(path), "engine": engine, "config": config,
                        "threads": args.threads, "texts": 1, "mode": "latency", "shape": list(LATENCY_SHAPE),
                        "seconds": LATENCY_SECONDS}  # fmt: skip
                latencies[recipe].append(timed(spec)["p50_ms"])
                print(f"latency round {round_number + 1}: {recipe} {latencies[recipe][-1]:.1f} ms", file=sys.stderr)
    if speeds:
        base = {p: float(np.median(speeds[p])) for p in PEERS}
        for recipe in timed_recipes:
            value = float(np.median(speeds[recipe]))
            results.setdefault(recipe, {}).update(
                {
                    "texts_per_s": value,
                    "texts_per_s_rounds": speeds[recipe],
                    "vs_fp32": value / base["fp32"],
                    "vs_bf16": value / base["bf16"],
                    "speed_texts": args.texts,
                }
            )
            if latencies:
                lat = float(np.median(latencies[recipe]))
                results[recipe].update(
                    {
                        "b1t128_ms": lat,
                        "b1t128_rounds": latencies[recipe],
                        "b1t128_speedup": float(np.median(latencies["fp32"])) / lat,
                    }
                )
    import onnxruntime

    results["_machine"] = {
        "clock": args.clock,
        "cpu": machine(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "onnxruntime": onnxruntime.__version__,
        "threads": 1 if args.clock == "cpu" else args.threads,
    }
    _save(args.json, results)
    return 0


def _save(path: Path, results: dict[str, Any]) -> None:
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    partial.replace(path)


#: Markdown columns of the recipe table: (JSON key, header, format).
TABLE = (
    ("texts", "texts (accuracy)", "d"),
    ("min_cos", "mean-pooled min cos vs PyTorch", ".5f"),
    ("mean_cos", "mean cos", ".5f"),
    ("nn10_vs_fp32", "top-10 NN agreement vs fp32", ".4f"),
    ("batch_max_abs", "alone vs in batch, max abs", ".2g"),
    ("texts_per_s", "texts/s", ".0f"),
    ("vs_fp32", "× fp32", ".2f"),
    ("vs_bf16", "× bf16", ".2f"),
    ("b1t128_ms", "bert-base B1×T128 ms", ".1f"),
    ("b1t128_speedup", "B1×T128 × fp32", ".2f"),
    ("bytes", "file MB", ""),
)


def table(results: dict[str, Any], recipes: list[str] | None = None) -> str:
    """The recipes of ``results`` as a markdown table (a dash where a figure was not measured)."""
    rows = ["| recipe | " + " | ".join(h for _, h, _ in TABLE) + " |", "|---|" + "---:|" * len(TABLE)]
    for recipe in recipes or [r for r in results if not r.startswith("_")]:
        cells = []
        for key, _, fmt in TABLE:
            value = results[recipe].get(key)
            if value is None:
                cells.append("–")
            elif key == "bytes":
                cells.append(f"{value / 1e6:.0f}")
            else:
                cells.append(format(value, fmt))
        rows.append(f"| `{recipe}` | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def plot(results: dict[str, Any], path: Path, peers: dict[str, str]) -> None:
    """Throughput (× fp32) against mean-pooled min cosine for every recipe with both; ``peers`` labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    for recipe, row in results.items():
        if recipe.startswith("_") or "vs_fp32" not in row or "min_cos" not in row:
            continue
        peer = recipe in peers
        invariant = row.get("batch_max_abs", 1.0) <= 1e-5
        marker = "s" if peer else ("o" if invariant else "x")
        full = row.get("texts", 0) >= 4000
        color = "tab:red" if peer else ("tab:blue" if full else "tab:gray")
        error = max(1 - row["min_cos"], PLOT_FLOOR)  # fp32's 1e-12 would stretch the axis
        ax.scatter(error, row["vs_fp32"], marker=marker, s=40, color=color)
        ax.annotate(peers.get(recipe, recipe), (error, row["vs_fp32"]), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")  # fmt: skip
    for label, speed, min_cos in EXTERNAL_PEERS:
        error = max(1 - min_cos, PLOT_FLOOR)
        ax.scatter(error, speed, marker="D", s=36, color="tab:orange")
        ax.annotate(label, (error, speed), fontsize=7, xytext=(4, -9), textcoords="offset points")
    ax.set_xscale("log")
    ax.invert_xaxis()
    ax.axvline(1 - 0.998, color="gray", ls="--", lw=0.8)
    ax.axhline(1.8, color="gray", ls=":", lw=0.8)
    ax.set_xlabel("1 − mean-pooled min cosine vs PyTorch (log; right = more accurate)")
    clock = "CPU time, 1 thread" if results.get("_machine", {}).get("clock") == "cpu" else "wall clock"
    ax.set_ylabel(f"corpus texts/s, × fp32 ({clock})")
    machine_info = results.get("_machine", {})
    ax.set_title(f"int8 recipes on real MiniLM ({machine_info.get('cpu', '')})", fontsize=8)
    ax.text(0.5, 0.72, "o batch-invariant  x batch-dependent  ■ bertonnx peers\n◆ other engines (PEERS.md: wall clock, "
            "2 threads)\ngray: accuracy on 400 texts, else 4,000\ndashed: 0.998 target; dotted: 1.8× fp32",
            transform=ax.transAxes, fontsize=7, va="top")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _calibration_feeds(model: Any, texts: list[str]) -> list[dict[str, np.ndarray]]:
    """Single-text feeds for SmoothQuant calibration (the first texts of the corpus)."""
    feeds = []
    for encoding in model.encode(texts[:64], truncation=True):
        n = len(encoding.ids)
        feeds.append(
            {
                "input_ids": np.array([encoding.ids], np.int64),
                "attention_mask": np.ones((1, n), np.int64),
                "token_type_ids": np.array([encoding.type_ids], np.int64),
            }
        )
    return feeds


if __name__ == "__main__":
    raise SystemExit(main())
