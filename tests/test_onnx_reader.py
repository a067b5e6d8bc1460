"""Tests for bertonnx.onnx_reader: read_graph must agree with what ``onnx.load`` reports."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from bertonnx.onnx_reader import GraphInfo, NodeInfo, TensorInfo, ValueInfo, read_graph  # noqa: E402


def _expected(model: onnx.ModelProto) -> GraphInfo:
    """Build the GraphInfo that read_graph should return, using the onnx package's own parser."""

    def value(v: onnx.ValueInfoProto) -> ValueInfo:
        dims = v.type.tensor_type.shape.dim
        shape = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in dims)
        return ValueInfo(v.name, v.type.tensor_type.elem_type, shape)

    graph, nodes = model.graph, model.graph.node
    init_names = {t.name for t in graph.initializer}
    return GraphInfo(
        inputs=tuple(value(v) for v in graph.input if v.name not in init_names),
        outputs=tuple(value(v) for v in graph.output),
        initializers=tuple(
            TensorInfo(t.name, t.data_type, tuple(t.dims), t.data_location == TensorProto.EXTERNAL)
            for t in graph.initializer
        ),
        nodes=tuple(NodeInfo(n.op_type, n.name, tuple(n.input), tuple(n.output), n.domain) for n in nodes),
        opsets={o.domain: o.version for o in model.opset_import},
        producer_name=model.producer_name,
    )


def _small_model() -> onnx.ModelProto:
    """Gather -> MatMul -> Add -> Mul, with float, int64 and scalar initializers and dynamic dims."""
    inits = [
        helper.make_tensor("emb", TensorProto.FLOAT, [10, 4], np.arange(40, dtype=np.float32).tolist()),
        helper.make_tensor("W", TensorProto.FLOAT, [4, 3], [0.5] * 12),
        helper.make_tensor("B", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0]),
        helper.make_tensor("scale", TensorProto.FLOAT, [], [2.0]),
        helper.make_tensor("offsets", TensorProto.INT64, [2], [-1, 7]),
    ]
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["h0"], name="gather"),
        helper.make_node("MatMul", ["h0", "W"], ["h1"], name="matmul"),
        helper.make_node("Add", ["h1", "B"], ["h2"]),  # unnamed node
        helper.make_node("Mul", ["h2", "scale"], ["logits"], name="mul"),
        helper.make_node("FastGelu", ["logits", ""], ["act"], name="gelu", domain="com.microsoft"),
    ]
    graph = helper.make_graph(
        nodes,
        "small",
        # "W" is listed as an input too (old-style IR); read_graph must leave it out of ``inputs``.
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "seq"]),
            helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3]),
            # Some legacy exporters write -1 for an unknown axis: a negative int64 varint (10 bytes).
            helper.make_tensor_value_info("mask", TensorProto.INT64, [-1, "seq"]),
        ],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", None, 3]),
            helper.make_tensor_value_info("act", TensorProto.FLOAT, None),
        ],
        initializer=inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, producer_name="bertonnx-test")


def _field(number: int, payload: bytes) -> bytes:
    """Encode one length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def test_small_model_matches_onnx_load(tmp_path: Path) -> None:
    path = tmp_path / "small.onnx"
    onnx.save(_small_model(), path)
    info = read_graph(path)
    assert info == _expected(onnx.load(path))
    # Spot checks independent of the onnx-derived expectation.
    assert info.inputs == (
        ValueInfo("ids", TensorProto.INT64, ("batch", "seq")),
        ValueInfo("mask", TensorProto.INT64, (-1, "seq")),
    )
    assert info.outputs[0] == ValueInfo("logits", TensorProto.FLOAT, ("batch", None, 3))
    assert info.outputs[1] == ValueInfo("act", TensorProto.FLOAT, ())
    by_name = {t.name: t for t in info.initializers}
    assert by_name["scale"] == TensorInfo("scale", TensorProto.FLOAT, ())
    assert by_name["scale"].size == 1
    assert by_name["offsets"].data_type == TensorProto.INT64
    assert sum(t.size for t in info.initializers) == 40 + 12 + 3 + 1 + 2
    assert [n.op_type for n in info.nodes] == ["Gather", "MatMul", "Add", "Mul", "FastGelu"]
    assert info.nodes[2].name == ""
    assert info.nodes[4] == NodeInfo("FastGelu", "gelu", ("logits", ""), ("act",), "com.microsoft")
    assert info.opsets == {"": 17, "com.microsoft": 1}
    assert info.producer_name == "bertonnx-test"


def test_packed_dims_and_split_graph_field(tmp_path: Path) -> None:
    """onnx writes dims unpacked; a packed encoding and a graph split in two fields must also parse."""
    model = _small_model()
    tensor = numpy_helper.from_array(np.zeros((2, 300, 5), dtype=np.float16), name="packed")
    packed = _field(1, b"".join(_varint(d) for d in tensor.dims))  # TensorProto.dims, packed
    tensor.ClearField("dims")
    # A second ModelProto.graph field holding one initializer: protobuf merges it into the first graph.
    extra_graph = _field(7, _field(5, packed + tensor.SerializeToString()))
    path = tmp_path / "packed.onnx"
    path.write_bytes(model.SerializeToString() + extra_graph)

    info = read_graph(path)
    assert info == _expected(onnx.load(path))
    assert info.initializers[-1] == TensorInfo("packed", TensorProto.FLOAT16, (2, 300, 5))


def _raw_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A MatMul/Add model whose initializers are stored as raw_data (about 1 MiB in total)."""
    rng = np.random.default_rng(0)
    arrays = {
        "big": rng.standard_normal((512, 512)).astype(np.float32),  # 1 MiB of raw_data
        "half": rng.standard_normal((64, 33)).astype(np.float16),
        "quant": rng.integers(-128, 127, (7, 3)).astype(np.int8),
        "bias": rng.standard_normal(512).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "big"], ["y"], name="mm"),
        helper.make_node("Add", ["y", "bias"], ["z"], name="add"),
    ]
    graph = helper.make_graph(
        nodes,
        "raw",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 512])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 512])],
        initializer=[numpy_helper.from_array(a, name=n) for n, a in arrays.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), arrays


def test_raw_data_payloads_are_skipped(tmp_path: Path) -> None:
    model, arrays = _raw_model()
    path = tmp_path / "raw.onnx"
    onnx.save(model, path)
    assert path.stat().st_size > 1_000_000

    info = read_graph(path)
    assert info == _expected(onnx.load(path))
    assert [(t.name, t.dims) for t in info.initializers] == [(n, a.shape) for n, a in arrays.items()]
    assert [t.data_type for t in info.initializers] == [
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.INT8,
        TensorProto.FLOAT,
    ]
    assert not any(t.external for t in info.initializers)
    assert sum(t.size for t in info.initializers) == sum(a.size for a in arrays.values())


def test_external_data_is_recorded(tmp_path: Path) -> None:
    model, arrays = _raw_model()
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    assert path.stat().st_size < 10_000  # the weights went to ext.onnx.data

    info = read_graph(path)
    assert info == _expected(onnx.load(path, load_external_data=False))
    expected = [(n, a.shape, True) for n, a in arrays.items()]
    assert [(t.name, t.dims, t.external) for t in info.initializers] == expected


@pytest.mark.parametrize(
    "make_bytes",
    [
        pytest.param(lambda good: good[: len(good) // 2], id="truncated-half"),
        pytest.param(lambda good: good[:-1], id="truncated-last-byte"),
        pytest.param(lambda good: b"this is not an onnx model, just some text\n" * 20, id="text"),
        pytest.param(lambda good: b"\xff" * 64, id="endless-varint"),
        pytest.param(lambda good: b"", id="empty"),
        pytest.param(lambda good: b"\x10\x05" + good, id="producer-name-as-varint"),  # wrong wire type
        pytest.param(lambda good: b"\x3a\x02\x08\x07", id="graph-node-as-varint"),  # wrong wire type, nested
        pytest.param(lambda good: b"\x00\x00" + good, id="field-zero"),
    ],
)
def test_invalid_files_raise_value_error(tmp_path: Path, make_bytes: Callable[[bytes], bytes]) -> None:
    good = _small_model().SerializeToString()
    path = tmp_path / "bad.onnx"
    path.write_bytes(make_bytes(good))
    with pytest.raises(ValueError, match=r"bad\.onnx is not a valid ONNX model file: .*; re-run the export"):
        read_graph(path)


def test_missing_file_raises_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_graph(tmp_path / "missing.onnx")
