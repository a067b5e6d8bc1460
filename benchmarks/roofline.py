"""The machine's GEMM peaks with the benchmark's thread budget: the ceilings the grid is measured against.

Each peak is one onnxruntime node on a square matrix product (the same library and kernels the model
uses): fp32 ``MatMul`` and int8 ``MatMulInteger`` (uint8 activations × int8 weights, as dynamic
quantization feeds it). numpy's float32 matmul is reported too; the fp32 peak is the faster of the two.
The bf16 peak is an OpenVINO ``MatMul`` compiled with the bf16 precision hint (the engine of the ``bf16``
variant), measured when OpenVINO is installed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .grid import TimingPlan, measure, summarize

#: Square GEMM size: large enough to reach the peak, small enough to time in well under a second.
GEMM_SIZE = 2048
GEMM_SEED = 0
GIGA = 1e9


def _session(model: Any, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _gemm_graph(kind: str, n: int, rng: np.random.Generator) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    if kind == "fp32":
        weight = numpy_helper.from_array(rng.standard_normal((n, n), dtype=np.float32), "B")
        node = helper.make_node("MatMul", ["A", "B"], ["C"])
        a_type, c_type = TensorProto.FLOAT, TensorProto.FLOAT
    else:
        weight = numpy_helper.from_array(rng.integers(-127, 128, (n, n), dtype=np.int8), "B")
        node = helper.make_node("MatMulInteger", ["A", "B"], ["C"])
        a_type, c_type = TensorProto.UINT8, TensorProto.INT32
    graph = helper.make_graph(
        [node],
        f"gemm_{kind}",
        [helper.make_tensor_value_info("A", a_type, [n, n])],
        [helper.make_tensor_value_info("C", c_type, [n, n])],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def measure_peaks(threads: int, plan: TimingPlan, n: int = GEMM_SIZE) -> dict[str, Any]:
    """GEMM throughput in GFLOP/s (int8: GOP/s) for fp32 and int8 with ``threads`` intra-op threads.

    Returns:
        ``{"size", "flops_per_call", "fp32_gflops", "int8_gops", "onnxruntime_fp32": stats, ...}``.
    """
    rng = np.random.default_rng(GEMM_SEED)
    flops = 2.0 * n * n * n
    result: dict[str, Any] = {"size": n, "threads": threads, "flops_per_call": flops}
    inputs = {
        "fp32": rng.standard_normal((n, n), dtype=np.float32),
        "int8": rng.integers(0, 256, (n, n), dtype=np.uint8),
    }
    for kind, feed in inputs.items():
        session = _session(_gemm_graph(kind, n, rng), threads)
        stats = summarize(measure(lambda s=session, f=feed: s.run(None, {"A": f}), plan))
        stats["gflops"] = flops / (stats["min_ms"] / 1e3) / GIGA
        result[f"onnxruntime_{kind}"] = stats
    a = inputs["fp32"]
    b = rng.standard_normal((n, n), dtype=np.float32)
    stats = summarize(measure(lambda: a @ b, plan))
    stats["gflops"] = flops / (stats["min_ms"] / 1e3) / GIGA
    result["numpy_fp32"] = stats
    result["fp32_gflops"] = max(result["onnxruntime_fp32"]["gflops"], stats["gflops"])
    result["int8_gops"] = result["onnxruntime_int8"]["gflops"]
    bf16 = _openvino_bf16(a, b, threads, plan)
    if bf16 is not None:
        bf16["gflops"] = flops / (bf16["min_ms"] / 1e3) / GIGA
        result["openvino_bf16"] = bf16
    result["bf16_gflops"] = None if bf16 is None else bf16["gflops"]
    result["note"] = "peak = best (min-time) run of one square GEMM; fp32 peak = max(onnxruntime, numpy)"
    return result


def _openvino_bf16(a: np.ndarray, b: np.ndarray, threads: int, plan: TimingPlan) -> dict[str, Any] | None:
    """Timing of ``a @ b`` on OpenVINO with bf16 matrix products, or ``None`` without OpenVINO."""
    try:
        import openvino
        import openvino.opset13 as ops
    except ImportError:
        return None
    parameter = ops.parameter(list(a.shape), openvino.Type.f32, name="A")
    model = openvino.Model([ops.matmul(parameter, ops.constant(b), False, False)], [parameter])
    config = {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "LATENCY"}
    request = openvino.Core().compile_model(model, "CPU", config).create_infer_request()
    stats: dict[str, Any] = summarize(measure(lambda: request.infer({0: a}), plan))
    return stats
