"""Search for an accurate fast path: quantization recipes, their accuracy on real weights and their speed.

``python -m benchmarks.fastpath --accuracy-dir MINILM_EXPORT --reference CKPT --latency-dir BERT_BASE_EXPORT``
builds every recipe from each directory's ``model.onnx``, measures accuracy against PyTorch fp32 on real
text with the real-weights export (random weights hide quantization damage), and the B1×T128 latency of the
same recipe on bert-base in a fresh process per recipe with the same thread budget. It writes a markdown
table (``--out``). Recipes:

- ``dyn-int8-tensor`` / ``dyn-int8-channel``: onnxruntime dynamic int8, per-tensor / per-channel weights.
- ``fused-dyn-int8-channel``: the same on the transformer-fused graph (QAttention).
- ``smooth-A``: SmoothQuant-style scales (migration strength A) before every weight MatMul, then
  per-channel dynamic int8.
- ``outliers-K``: LLM.int8()-style decomposition: the K input channels with the largest calibrated
  magnitude go through an fp32 MatMul, the rest through int8; ``-row`` also scales each token row to unit
  max before quantizing (per-token activation scales).
- ``nbits8-bB`` / ``nbits8-mha-bB``: ``MatMulNBits`` 8-bit weights in blocks of B along K with int8 compute
  and blockwise activation quantization (``accuracy_level`` 4), on the plain / MultiHeadAttention-fused graph.
- ``only-GROUP``: per-channel dynamic int8 on one group of MatMuls (qkv, attn-out, ffn-in, ffn-out), the
  rest fp32: which layers lose the accuracy.
- ``ov-f32`` / ``ov-bf16``: OpenVINO on the same graph in f32, and the export's ``bf16`` variant (IR with
  fp16-stored weights, bf16 matrix products).
- ``ov-int8-static`` / ``-no-ffn-out`` / ``-nosq``: NNCF post-training static int8 (transformer model
  type, calibrated on the first 64 inputs): all MatMuls / all but the FFN output projections / all MatMuls
  with NNCF's SmoothQuant off; needs ``nncf``.
- ``ov-int8-attn-out-bf16``: static int8 on the attention output projections only (the one group that
  stays accurate in int8), everything else in bf16.
- ``ov-w8-dyn-gG``: NNCF int8 weight compression (per channel) with OpenVINO's dynamic per-token
  activation quantization in groups of G along K; needs ``nncf``.

Nothing here is imported by the runtime or the export; it needs the ``fastpath`` extra (export, bench,
OpenVINO and NNCF).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

CALIBRATION_TEXTS = 32
#: NNCF's static int8 was calibrated on 32 inputs first (mean-pooled worst 0.817 on MiniLM); 64 gave 0.969.
NNCF_CALIBRATION_TEXTS = 64
LATENCY_SHAPE = (1, 128)
LATENCY_SECONDS = 6.0
#: Fresh processes per recipe, timed in rounds; the reported p50 is the median of their p50s.
LATENCY_REPEATS = 3
WARMUP_RUNS = 5
SMOOTH_EPS = 1e-5
ROW_EPS = 1e-6
GROUPS = {
    "qkv": ("/query/", "/key/", "/value/"),
    "attn-out": ("/attention/output/dense/",),
    "ffn-in": ("/intermediate/dense/",),
    "ffn-out": ("/output/dense/",),
}
DEFAULT_RECIPES = (
    "fp32",
    "dyn-int8-tensor",
    "dyn-int8-channel",
    "fused-dyn-int8-channel",
    "smooth-0.5",
    "smooth-0.7",
    "outliers-4",
    "outliers-8-row",
    "nbits8-b32",
    "nbits8-mha-b32",
    "nbits8-mha-b64",
    "only-qkv",
    "only-attn-out",
    "only-ffn-in",
    "only-ffn-out",
    "ov-f32",
    "ov-bf16",
    "ov-int8-static",
    "ov-int8-static-no-ffn-out",
    "ov-int8-static-nosq",
    "ov-int8-attn-out-bf16",
    "ov-w8-dyn-g32",
)
#: OpenVINO compile settings per recipe (the recipe's file is OpenVINO IR).
OV_LATENCY_HINTS = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
#: NNCF ignores these MatMuls in ``-no-ffn-out`` (the FFN output projection of every layer).
FFN_OUT_PATTERN = r".*layer\.\d+/output/dense/MatMul.*"
#: ``ov-int8-attn-out-bf16`` keeps every MatMul but the attention output projection out of int8.
NOT_ATTN_OUT_PATTERNS = [
    r".*/attention/self/(query|key|value)/MatMul.*",
    r".*/attention/self/MatMul.*",
    r".*/intermediate/dense/MatMul.*",
    FFN_OUT_PATTERN,
]
#: Recipes compiled with OpenVINO's bf16 precision hint (the rest in f32).
OV_BF16_RECIPES = ("ov-bf16", "ov-int8-attn-out-bf16")


def ov_config(recipe: str, threads: int) -> dict[str, Any]:
    """OpenVINO compile settings of an ``ov-`` recipe."""
    config: dict[str, Any] = {**OV_LATENCY_HINTS, "INFERENCE_NUM_THREADS": threads}
    config["INFERENCE_PRECISION_HINT"] = "bf16" if recipe in OV_BF16_RECIPES else "f32"
    if recipe.startswith("ov-w8-dyn-g"):
        config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = int(recipe.rsplit("-g", 1)[1])
    return config


#: Sentences for calibration and evaluation (real English, varied topics and lengths).
SENTENCES = (
    "The history of natural language processing generally started in the 1950s.",
    "Alan Turing published an article titled Computing Machinery and Intelligence.",
    "The weather is nice today and I agree with you that we should go for a walk in the park before it rains.",
    "Stock markets fell sharply on Monday after the central bank raised interest rates by half a percentage point.",
    "She plays the violin in the city orchestra and teaches music at a local school.",
    "How do I reset my password if I no longer have access to my email account?",
    "The recipe calls for two cups of flour, one egg, and a pinch of salt.",
    "Researchers found that the new vaccine was effective in more than ninety percent of participants.",
    "Please remember to turn off the lights when you leave the office.",
    "The river flooded the valley after three days of heavy rain.",
    "He went to the store and bought a gallon of milk.",
    "Penguins are flightless birds that live almost exclusively in the southern hemisphere.",
    "Our flight was delayed by four hours because of a mechanical problem.",
    "The committee will publish its final report at the end of the year.",
    "Can you recommend a good book about the history of mathematics?",
    "The museum reopened last week after a two-year renovation.",
)


def _texts() -> tuple[list[str], list[tuple[str, str]]]:
    from bertonnx_export.gate import GATE_INPUTS

    rng = np.random.default_rng(0)
    singles = [" ".join(rng.choice(SENTENCES, size=int(rng.integers(1, 6)))) for _ in range(90)]
    singles += [text for text, pair in GATE_INPUTS if pair is None]
    pairs = [(SENTENCES[i], SENTENCES[(i + 1) % len(SENTENCES)]) for i in range(len(SENTENCES))]
    pairs += [(text, pair) for text, pair in GATE_INPUTS if pair is not None]
    return singles, pairs


def _feeds(encoding: Any) -> dict[str, np.ndarray]:
    n = len(encoding.ids)
    return {
        "input_ids": np.array([encoding.ids], dtype=np.int64),
        "attention_mask": np.ones((1, n), dtype=np.int64),
        "token_type_ids": np.array([encoding.type_ids], dtype=np.int64),
    }


def _encodings(directory: Path) -> list[dict[str, np.ndarray]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(512)
    singles, pairs = _texts()
    return [_feeds(tokenizer.encode(t)) for t in singles] + [_feeds(tokenizer.encode(a, b)) for a, b in pairs]


# -- graph transforms -------------------------------------------------------------------------------------


def _weight_matmuls(model: Any) -> dict[str, list[Any]]:
    """Weight MatMuls grouped by their activation input (Q, K and V share one)."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    groups: dict[str, list[Any]] = defaultdict(list)
    for node in model.graph.node:
        if (
            node.op_type == "MatMul"
            and node.input[1] in inits
            and numpy_helper.to_array(inits[node.input[1]]).ndim == 2
        ):
            groups[node.input[0]].append(node)
    return groups


def _calibrate(source: Path, names: list[str], feeds: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-channel max |x| of each named activation over the calibration inputs."""
    import onnx
    import onnxruntime as ort

    probe = onnx.load(str(source))
    for name in names:
        probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    peak: dict[str, np.ndarray] = {}
    for feed in feeds[:CALIBRATION_TEXTS]:
        for name, value in zip(names, session.run(names, feed), strict=True):
            current = np.abs(value.reshape(-1, value.shape[-1])).max(axis=0)
            peak[name] = np.maximum(peak[name], current) if name in peak else current
    return peak


def _smooth(source: Path, target: Path, alpha: float, feeds: list[dict[str, np.ndarray]]) -> None:
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    inits = {i.name: i for i in model.graph.initializer}
    groups = _weight_matmuls(model)
    peak = _calibrate(source, list(groups), feeds)
    for x, nodes in groups.items():
        weights = [numpy_helper.to_array(inits[n.input[1]]) for n in nodes]
        wmax = np.max(np.stack([np.abs(w).max(axis=1) for w in weights]), axis=0)
        scale = (np.maximum(peak[x], SMOOTH_EPS) ** alpha / np.maximum(wmax, SMOOTH_EPS) ** (1 - alpha)).astype(
            np.float32
        )
        inverse = f"{x}_smooth_inv"
        model.graph.initializer.append(numpy_helper.from_array((1.0 / scale).astype(np.float32), inverse))
        position = min(i for i, n in enumerate(model.graph.node) if n in nodes)
        model.graph.node.insert(position, helper.make_node("Mul", [x, inverse], [f"{x}_smoothed"], name=f"{x}_Smooth"))
        for node, weight in zip(nodes, weights, strict=True):
            node.input[0] = f"{x}_smoothed"
            inits[node.input[1]].CopyFrom(numpy_helper.from_array(weight * scale[:, None], node.input[1]))
    onnx.save(model, str(target))


def _outliers(source: Path, target: Path, k: int, rowscale: bool, feeds: list[dict[str, np.ndarray]]) -> list[str]:
    """Split each weight MatMul into int8 inliers and fp32 outlier channels; return the fp32 node names."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    inits = {i.name: i for i in model.graph.initializer}
    groups = _weight_matmuls(model)
    peak = _calibrate(source, list(groups), feeds)
    keep_fp32 = []
    for x, nodes in groups.items():
        index = np.sort(np.argsort(-peak[x])[:k]).astype(np.int64)
        mask = np.ones_like(peak[x], dtype=np.float32)
        mask[index] = 0.0
        model.graph.initializer.extend(
            [numpy_helper.from_array(mask, f"{x}_mask"), numpy_helper.from_array(index, f"{x}_outlier_idx")]
        )
        chain = [
            helper.make_node("Gather", [x, f"{x}_outlier_idx"], [f"{x}_outl"], axis=-1),
            helper.make_node("Mul", [x, f"{x}_mask"], [f"{x}_masked" if rowscale else f"{x}_inl"]),
        ]
        if rowscale:
            model.graph.initializer.append(numpy_helper.from_array(np.array(ROW_EPS, np.float32), f"{x}_eps"))
            chain += [
                helper.make_node("Abs", [f"{x}_masked"], [f"{x}_abs"]),
                helper.make_node("ReduceMax", [f"{x}_abs"], [f"{x}_rmax0"], axes=[-1], keepdims=1),
                helper.make_node("Add", [f"{x}_rmax0", f"{x}_eps"], [f"{x}_rmax"]),
                helper.make_node("Div", [f"{x}_masked", f"{x}_rmax"], [f"{x}_inl"]),
            ]
        position = min(i for i, n in enumerate(model.graph.node) if n in nodes)
        for node in reversed(chain):
            model.graph.node.insert(position, node)
        for node in nodes:
            weight = numpy_helper.to_array(inits[node.input[1]])
            rows = f"{node.input[1]}_outlier_rows"
            model.graph.initializer.append(numpy_helper.from_array(weight[index], rows))
            out = node.output[0]
            node.input[0] = f"{x}_inl"
            node.output[0] = f"{out}_int8"
            tail = [helper.make_node("MatMul", [f"{x}_outl", rows], [f"{out}_fp32"], name=f"{node.name}_outliers")]
            inlier = f"{out}_int8"
            if rowscale:
                tail.append(helper.make_node("Mul", [f"{out}_int8", f"{x}_rmax"], [f"{out}_rescaled"]))
                inlier = f"{out}_rescaled"
            tail.append(helper.make_node("Add", [inlier, f"{out}_fp32"], [out]))
            position = list(model.graph.node).index(node) + 1
            for extra in reversed(tail):
                model.graph.node.insert(position, extra)
            keep_fp32.append(f"{node.name}_outliers")
    onnx.save(model, str(target))
    return keep_fp32


def _group_of(name: str) -> str | None:
    for group, patterns in GROUPS.items():
        if any(p in name for p in patterns) and not (group == "ffn-out" and "/attention/" in name):
            return group
    return None


def build(
    recipe: str, directory: Path, work: Path, feeds: list[dict[str, np.ndarray]], heads: int, hidden: int
) -> Path:
    """Build ``recipe`` from ``directory``'s fp32 graph into ``work``; return the model path."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = directory / "model.onnx"
    target = work / f"{recipe}.onnx"
    dynamic: Callable[..., None] = lambda src, **kw: quantize_dynamic(  # noqa: E731
        str(src), str(target), op_types_to_quantize=["MatMul", "Attention"], weight_type=QuantType.QInt8, **kw
    )
    if recipe == "fp32":
        return source
    if recipe in ("dyn-int8-tensor", "dyn-int8-channel"):
        dynamic(source, per_channel=recipe.endswith("channel"))
    elif recipe == "fused-dyn-int8-channel":
        dynamic(
            directory / "model_optimized.onnx",
            per_channel=True,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    elif recipe.startswith("smooth-"):
        smoothed = work / f"{recipe}.fp32.onnx"
        _smooth(source, smoothed, float(recipe.split("-")[1]), feeds)
        dynamic(smoothed, per_channel=True)
    elif recipe.startswith("outliers-"):
        split = work / f"{recipe}.fp32.onnx"
        parts = recipe.split("-")
        keep = _outliers(source, split, int(parts[1]), parts[-1] == "row", feeds)
        dynamic(split, per_channel=True, nodes_to_exclude=keep)
    elif recipe.startswith("only-"):
        group = recipe.removeprefix("only-")
        names = [n.name for n in onnx.load(str(source), load_external_data=False).graph.node if n.op_type == "MatMul"]
        dynamic(source, per_channel=True, nodes_to_exclude=[n for n in names if _group_of(n) != group])
    elif recipe.startswith("nbits"):
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        graph: Any = onnx.load(str(source))
        if "-mha-" in recipe:
            from onnxruntime.transformers.fusion_options import FusionOptions
            from onnxruntime.transformers.optimizer import optimize_model

            options = FusionOptions("bert")
            options.use_multi_head_attention = True
            graph = optimize_model(str(source), "bert", heads, hidden, options, opt_level=0).model
        logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
        quantizer = MatMulNBitsQuantizer(
            graph, bits=8, block_size=int(recipe.rsplit("-b", 1)[1]), is_symmetric=True, accuracy_level=4
        )
        quantizer.process()
        quantizer.model.save_model_to_file(str(target), False)
    elif recipe.startswith("ov-"):
        return _build_openvino(recipe, source, work / f"{recipe}.xml", feeds)
    else:
        raise ValueError(f"unknown recipe {recipe!r}; expected one of {', '.join(DEFAULT_RECIPES)}")
    return target


def _build_openvino(recipe: str, source: Path, target: Path, feeds: list[dict[str, np.ndarray]]) -> Path:
    import openvino

    from bertonnx_export.variants import build_bf16

    if recipe == "ov-bf16":
        build_bf16(source, target)
        return target
    model = openvino.Core().read_model(str(source))
    if recipe != "ov-f32":
        try:
            import nncf
        except ImportError:
            raise SystemExit(f"recipe {recipe} needs NNCF: pip install -e '.[fastpath]'") from None
        if recipe.startswith(("ov-int8-static", "ov-int8-attn-out")):
            from nncf.quantization.advanced_parameters import (
                AdvancedQuantizationParameters,
                AdvancedSmoothQuantParameters,
            )

            patterns = {"ov-int8-static-no-ffn-out": [FFN_OUT_PATTERN], "ov-int8-attn-out-bf16": NOT_ATTN_OUT_PATTERNS}
            ignored = nncf.IgnoredScope(patterns=patterns[recipe]) if recipe in patterns else None
            advanced = AdvancedQuantizationParameters(
                smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1)  # -1 turns SmoothQuant off
            )
            model = nncf.quantize(
                model,
                nncf.Dataset(feeds[:NNCF_CALIBRATION_TEXTS]),
                model_type=nncf.ModelType.TRANSFORMER,
                subset_size=NNCF_CALIBRATION_TEXTS,
                ignored_scope=ignored,
                advanced_parameters=advanced if recipe.endswith("nosq") else None,
            )
        elif recipe.startswith("ov-w8-dyn-g"):
            model = nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_SYM)
        else:
            raise ValueError(f"unknown recipe {recipe!r}; expected one of {', '.join(DEFAULT_RECIPES)}")
    openvino.save_model(model, str(target), compress_to_fp16=False)
    return target


# -- measurements -----------------------------------------------------------------------------------------


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.sum(a64 * b64, -1) / (np.linalg.norm(a64, axis=-1) * np.linalg.norm(b64, axis=-1))


def _session(path: Path, recipe: str, threads: int) -> Any:
    """The runtime's own onnxruntime session (:func:`bertonnx.session.build_session`, the settings ``BertOnnx``
    runs with), or for ``ov-`` recipes a compiled OpenVINO model with the recipe's settings."""
    if recipe.startswith("ov-"):
        import openvino

        return _OpenVinoRunner(openvino.Core().compile_model(str(path), "CPU", ov_config(recipe, threads)))
    from bertonnx.options import RuntimeOptions
    from bertonnx.session import build_session

    return build_session(path, RuntimeOptions(threads=threads))


class _OpenVinoRunner:
    """``session.run`` over a compiled OpenVINO model with arbitrary compile settings."""

    def __init__(self, compiled: Any) -> None:
        self.request = compiled.create_infer_request()

    def run(self, names: list[str], feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        result = self.request.infer(feed, share_outputs=False)
        return [np.asarray(result[name]) for name in names]


def accuracy(
    path: Path, feeds: list[dict[str, np.ndarray]], reference: list[dict[str, np.ndarray]], recipe: str = ""
) -> dict[str, float]:
    """Worst cosines vs PyTorch (hidden states per token, pooler, mean-pooled), NSP agreement and prob diff."""
    from bertonnx.tasks import is_next_probability

    session = _session(path, recipe, threads=2)
    hidden, pooler, mean, agree, prob = [], [], [], 0, 0.0
    for feed, ref in zip(feeds, reference, strict=True):
        lhs, pooled, nsp = session.run(["last_hidden_state", "pooler_output", "nsp_logits"], feed)
        hidden.append(_cosines(lhs[0], ref["last_hidden_state"][0]).min())
        pooler.append(_cosines(pooled[0], ref["pooler_output"][0]))
        mean.append(_cosines(lhs[0].mean(0), ref["last_hidden_state"][0].mean(0)))
        agree += int(np.argmax(nsp) == np.argmax(ref["nsp_logits"]))
        p = [float(is_next_probability(z)[0]) for z in (nsp, ref["nsp_logits"])]
        prob = max(prob, abs(p[0] - p[1]))
    return {
        "hidden_min_cos": float(min(hidden)),
        "pooler_min_cos": float(min(pooler)),
        "mean_pooled_min_cos": float(min(mean)),
        "nsp_agreement": agree / len(feeds),
        "nsp_prob_max_diff": float(prob),
    }


# The runtime's session builder, so the recipes are timed with the settings BertOnnx runs them with.
_LATENCY_SCRIPT = """
import json, sys, time, numpy as np
from pathlib import Path
from bertonnx.options import RuntimeOptions
from bertonnx.session import build_session
path, seconds = sys.argv[1], float(sys.argv[5])
threads, b, t, warmup = (int(v) for v in (sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[6]))
s = build_session(Path(path), RuntimeOptions(threads=threads))
rng = np.random.default_rng(0)
f = {"input_ids": rng.integers(1000, 30000, (b, t)), "attention_mask": np.ones((b, t), np.int64),
     "token_type_ids": np.zeros((b, t), np.int64)}
for _ in range(warmup): s.run(None, f)
times, end = [], time.perf_counter() + seconds
while time.perf_counter() < end or len(times) < 10:
    t0 = time.perf_counter(); s.run(None, f); times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"p50_ms": float(np.median(times)), "min_ms": float(np.min(times)), "runs": len(times)}))
"""


_OV_LATENCY_SCRIPT = """
import json, sys, time, numpy as np, openvino as ov
path, seconds, config = sys.argv[1], float(sys.argv[5]), json.loads(sys.argv[7])
b, t, warmup = (int(v) for v in (sys.argv[3], sys.argv[4], sys.argv[6]))
request = ov.Core().compile_model(path, "CPU", config).create_infer_request()
rng = np.random.default_rng(0)
f = {"input_ids": rng.integers(1000, 30000, (b, t)), "attention_mask": np.ones((b, t), np.int64),
     "token_type_ids": np.zeros((b, t), np.int64)}
for _ in range(warmup): request.infer(f)
times, end = [], time.perf_counter() + seconds
while time.perf_counter() < end or len(times) < 10:
    t0 = time.perf_counter(); request.infer(f); times.append((time.perf_counter() - t0) * 1e3)
print(json.dumps({"p50_ms": float(np.median(times)), "min_ms": float(np.min(times)), "runs": len(times)}))
"""


def latency(path: Path, threads: int, recipe: str = "") -> dict[str, float]:
    """B1×T128 latency of ``path`` in a fresh process with ``threads`` intra-op threads."""
    batch, seq = LATENCY_SHAPE
    args = [str(path), str(threads), str(batch), str(seq), str(LATENCY_SECONDS), str(WARMUP_RUNS)]
    script = _LATENCY_SCRIPT
    if recipe.startswith("ov-"):
        script = _OV_LATENCY_SCRIPT
        args.append(json.dumps(ov_config(recipe, threads)))
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _reference(
    directory: Path, checkpoint: str | None, feeds: list[dict[str, np.ndarray]]
) -> list[dict[str, np.ndarray]]:
    import torch

    from bertonnx.manifest import read_manifest
    from bertonnx_export.graph import BertWithHeads
    from bertonnx_export.heads import seeded_labels
    from bertonnx_export.source import load_source

    manifest = read_manifest(directory)
    weights = manifest.weights
    if weights["kind"] == "random":
        source = load_source(
            manifest.data["source"]["model"],
            weights="random",
            seed=weights["seed"],
            task=manifest.architecture,
            labels=seeded_labels(manifest),
        )
    else:
        model = checkpoint or manifest.data["source"]["model"]
        source = load_source(
            model,
            allow_random_heads=bool(weights["random_heads"]),
            seed=weights["seed"] or 0,
            task=manifest.architecture,
            labels=seeded_labels(manifest),
        )
    module = BertWithHeads(source.model).eval()
    with torch.inference_mode():
        return [
            {k: v.numpy() for k, v in module(**{n: torch.from_numpy(a) for n, a in f.items()}).items()} for f in feeds
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fastpath", description=__doc__.split("\n\n")[0])
    parser.add_argument("--accuracy-dir", type=Path, required=True, help="export with real weights (e.g. MiniLM)")
    parser.add_argument("--reference", help="its checkpoint directory (default: the manifest's source)")
    parser.add_argument("--latency-dir", type=Path, help="bert-base export for latency (default: skip latency)")
    parser.add_argument("--recipes", default=",".join(DEFAULT_RECIPES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--repeats", type=int, default=LATENCY_REPEATS, help="fresh processes per recipe; p50 = their median"
    )
    parser.add_argument("--out", type=Path, help="write the markdown table here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    from bertonnx.manifest import read_manifest

    feeds = _encodings(args.accuracy_dir)
    reference = _reference(args.accuracy_dir, args.reference, feeds)
    rows = []
    latency_paths: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="bertonnx-fastpath-") as tmp:
        work = Path(tmp)
        for recipe in args.recipes.split(","):
            acc_config = read_manifest(args.accuracy_dir).config
            (work / "acc").mkdir(exist_ok=True)
            path = build(
                recipe,
                args.accuracy_dir,
                work / "acc",
                feeds,
                acc_config["num_attention_heads"],
                acc_config["hidden_size"],
            )
            row: dict[str, Any] = {"recipe": recipe, **accuracy(path, feeds, reference, recipe)}
            if args.latency_dir is not None:
                lat_config = read_manifest(args.latency_dir).config
                lat_work = work / "lat" / recipe
                lat_work.mkdir(parents=True)
                latency_paths[recipe] = build(
                    recipe,
                    args.latency_dir,
                    lat_work,
                    _encodings(args.latency_dir),
                    lat_config["num_attention_heads"],
                    lat_config["hidden_size"],
                )
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        # Timing in rounds (each recipe once per round, one process at a time): a slow spell of the machine
        # then lands on one round of every recipe rather than on every process of one recipe.
        timings: dict[str, list[dict[str, float]]] = defaultdict(list)
        for round_number in range(args.repeats if latency_paths else 0):
            for recipe, lat_path in latency_paths.items():
                timings[recipe].append(latency(lat_path, args.threads, recipe))
                print(f"round {round_number + 1}: {recipe} {timings[recipe][-1]}", file=sys.stderr, flush=True)
        for row in rows:
            runs = timings.get(row["recipe"])
            if runs:
                row["p50_ms"] = float(np.median([r["p50_ms"] for r in runs]))
                row["min_ms"] = min(r["min_ms"] for r in runs)
                row["process_p50s_ms"] = " / ".join(f"{r['p50_ms']:.1f}" for r in runs)
    import platform
    import shlex
    from datetime import datetime, timezone
    from importlib import metadata

    import onnxruntime

    def _version(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "not installed"

    accuracy_source = read_manifest(args.accuracy_dir).data["source"]
    header = [
        "# Fast-path search: accuracy on real weights, latency on bert-base",
        "",
        f"- command: `{shlex.join(['python', '-m', 'benchmarks.fastpath', *(argv or sys.argv[1:])])}`",
        f"- date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}; onnxruntime {onnxruntime.__version__}, "
        f"openvino {_version('openvino')}, nncf {_version('nncf')}, "
        f"python {platform.python_version()}, {args.threads} threads, latency at batch {LATENCY_SHAPE[0]} x "
        f"{LATENCY_SHAPE[1]} tokens ({LATENCY_SECONDS:g} s per process; {args.repeats} fresh processes per recipe, "
        "timed in rounds; p50 = median of the processes' p50s, min = fastest call)",
        f"- accuracy: {accuracy_source['model']} ({len(feeds)} inputs: generated sentences, pairs and the export "
        "gate's inputs up to 512 tokens) against PyTorch fp32; worst case over inputs",
        "",
    ]
    keys = [
        "recipe",
        "p50_ms",
        "process_p50s_ms",
        "min_ms",
        "hidden_min_cos",
        "mean_pooled_min_cos",
        "pooler_min_cos",
        "nsp_agreement",
        "nsp_prob_max_diff",
    ]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        cells = [row.get(k) for k in keys]
        lines.append("| " + " | ".join(f"{c:.5g}" if isinstance(c, float) else str(c) for c in cells) + " |")
    text = "\n".join(header + lines) + "\n"
    print(text)
    if args.out:
        partial = args.out.with_name(f".{args.out.name}.partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
