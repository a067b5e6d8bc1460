"""A minimal reader of ONNX model files that needs neither ``onnx`` nor ``torch``.

The runtime may depend only on onnxruntime, tokenizers and numpy, yet ``inspect`` must report the
graph's inputs, outputs, operators and parameter count. This module decodes just enough of the protobuf
wire format (varints and length-delimited fields) to list initializers, nodes, graph inputs/outputs and
opsets. Tensor payloads (``raw_data``, ``float_data`` ...) are skipped by their length prefix and the file
is memory-mapped, so a 440 MB model is scanned without reading or copying its weights. Node attributes
(including If/Loop subgraphs) are skipped and external-data files are never opened.
"""

from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass

__all__ = ["GraphInfo", "NodeInfo", "TensorInfo", "ValueInfo", "read_graph"]

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5  # protobuf wire types (3 and 4 are deprecated groups)
# Field numbers from onnx.proto.
MODEL_PRODUCER_NAME = 2  # ModelProto.producer_name
MODEL_GRAPH = 7  # ModelProto.graph
MODEL_OPSET_IMPORT = 8  # ModelProto.opset_import
OPSET_DOMAIN = 1  # OperatorSetIdProto.domain
OPSET_VERSION = 2  # OperatorSetIdProto.version
GRAPH_NODE = 1  # GraphProto.node
GRAPH_INITIALIZER = 5  # GraphProto.initializer
GRAPH_INPUT = 11  # GraphProto.input
GRAPH_OUTPUT = 12  # GraphProto.output
NODE_INPUT = 1  # NodeProto.input
NODE_OUTPUT = 2  # NodeProto.output
NODE_NAME = 3  # NodeProto.name
NODE_OP_TYPE = 4  # NodeProto.op_type
NODE_DOMAIN = 7  # NodeProto.domain
TENSOR_DIMS = 1  # TensorProto.dims (packed or unpacked int64)
TENSOR_DATA_TYPE = 2  # TensorProto.data_type
TENSOR_NAME = 8  # TensorProto.name
TENSOR_DATA_LOCATION = 14  # TensorProto.data_location
DATA_LOCATION_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL
VALUE_NAME = 1  # ValueInfoProto.name
VALUE_TYPE = 2  # ValueInfoProto.type
TYPE_TENSOR = 1  # TypeProto.tensor_type
TENSOR_TYPE_ELEM_TYPE = 1  # TypeProto.Tensor.elem_type
TENSOR_TYPE_SHAPE = 2  # TypeProto.Tensor.shape
SHAPE_DIM = 1  # TensorShapeProto.dim
DIM_VALUE = 1  # TensorShapeProto.Dimension.dim_value
DIM_PARAM = 2  # TensorShapeProto.Dimension.dim_param


@dataclass(frozen=True)
class TensorInfo:
    """An initializer's name, ``TensorProto.DataType`` value and shape; ``external`` marks external data."""

    name: str
    data_type: int
    dims: tuple[int, ...]
    external: bool = False

    @property
    def size(self) -> int:
        """The number of elements: the product of ``dims`` (1 for a scalar)."""
        return math.prod(self.dims)


@dataclass(frozen=True)
class NodeInfo:
    """A top-level graph node (its attributes are not read)."""

    op_type: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    domain: str


@dataclass(frozen=True)
class ValueInfo:
    """A graph input or output; each axis is a dim_value int, a dim_param str or None if unknown.

    A non-tensor value has ``elem_type`` 0; a value without a recorded shape has ``shape == ()``.
    """

    name: str
    elem_type: int
    shape: tuple[int | str | None, ...]


@dataclass(frozen=True)
class GraphInfo:
    """The model's graph inputs (minus initializers), outputs, initializers, nodes, opsets and producer.

    ``opsets`` maps each ``opset_import`` domain (``""`` for the default ai.onnx domain) to its version.
    """

    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    initializers: tuple[TensorInfo, ...]
    nodes: tuple[NodeInfo, ...]
    opsets: dict[str, int]
    producer_name: str


class _CorruptError(Exception):
    """Malformed bytes; ``read_graph`` re-raises it as a ``ValueError`` naming the file."""


def _varint(buf: bytes | mmap.mmap, pos: int, end: int) -> tuple[int, int]:
    """Decode the varint at ``pos``; return its value and the position after it."""
    result = shift = 0
    while pos < end and shift < 70:
        byte = buf[pos]
        result |= (byte & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if byte < 0x80:
            return result, pos
    raise _CorruptError("a varint runs past the end of its message" if pos >= end else "a varint is too long")


def _int64(value: int) -> int:
    """Reinterpret an unsigned 64-bit varint as two's-complement int64."""
    return value - (1 << 64) if value >= 1 << 63 else value


class _Message:
    """One protobuf message's fields, indexed by number; payloads are kept as offsets, not copied."""

    def __init__(self, buf: bytes | mmap.mmap, pos: int, end: int, kind: str) -> None:
        self.buf, self.kind = buf, kind
        self.fields: dict[int, list[tuple[int, int, int]]] = {}  # number -> [(wire type, a, b)]
        while pos < end:
            key, pos = _varint(buf, pos, end)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise _CorruptError(f"{kind} has a field numbered 0")
            if wire == VARINT:
                value, pos = _varint(buf, pos, end)
                self.fields.setdefault(number, []).append((wire, value, pos))
                continue
            if wire == LEN:
                size, pos = _varint(buf, pos, end)
            elif wire in (FIXED64, FIXED32):
                size = 8 if wire == FIXED64 else 4
            else:
                raise _CorruptError(f"{kind} field {number} has unsupported wire type {wire}")
            if pos + size > end:
                raise _CorruptError(f"{kind} field {number} ({size} bytes) runs past the end of the message")
            self.fields.setdefault(number, []).append((wire, pos, pos + size))
            pos += size

    def _all(self, number: int, wire: int) -> list[tuple[int, int, int]]:
        entries = self.fields.get(number, [])
        for actual, _, _ in entries:
            if actual != wire:
                raise _CorruptError(f"{self.kind} field {number} has wire type {actual}, expected {wire}")
        return entries

    def texts(self, number: int) -> list[str]:
        try:
            return [self.buf[a:b].decode("utf-8") for _, a, b in self._all(number, LEN)]
        except UnicodeDecodeError:
            raise _CorruptError(f"{self.kind} field {number} is not UTF-8 text") from None

    def text(self, number: int) -> str:
        return (self.texts(number) or [""])[-1]

    def int64(self, number: int) -> int:
        return _int64(([0] + [value for _, value, _ in self._all(number, VARINT)])[-1])

    def int64s(self, number: int) -> list[int]:
        """Decode a repeated int64 field, written either packed (one LEN field) or one varint per value."""
        values: list[int] = []
        for wire, a, b in self.fields.get(number, []):
            if wire == VARINT:
                values.append(_int64(a))
            elif wire != LEN:
                raise _CorruptError(f"{self.kind} field {number} has wire type {wire}, not an int64 list")
            while wire == LEN and a < b:
                value, a = _varint(self.buf, a, b)
                values.append(_int64(value))
        return values

    def messages(self, number: int, kind: str) -> list[_Message]:
        return [_Message(self.buf, a, b, kind) for _, a, b in self._all(number, LEN)]


def _dim(dim: _Message) -> int | str | None:
    if DIM_VALUE in dim.fields:
        return dim.int64(DIM_VALUE)
    return dim.text(DIM_PARAM) if DIM_PARAM in dim.fields else None


def _value_info(value: _Message) -> ValueInfo:
    elem_type = 0
    shape: tuple[int | str | None, ...] = ()
    for type_proto in value.messages(VALUE_TYPE, "TypeProto"):
        for tensor in type_proto.messages(TYPE_TENSOR, "TypeProto.Tensor"):
            elem_type = tensor.int64(TENSOR_TYPE_ELEM_TYPE)
            for shape_proto in tensor.messages(TENSOR_TYPE_SHAPE, "TensorShapeProto"):
                shape = tuple(_dim(d) for d in shape_proto.messages(SHAPE_DIM, "TensorShapeProto.Dimension"))
    return ValueInfo(value.text(VALUE_NAME), elem_type, shape)


def _tensor_info(tensor: _Message) -> TensorInfo:
    external = tensor.int64(TENSOR_DATA_LOCATION) == DATA_LOCATION_EXTERNAL
    dims = tuple(tensor.int64s(TENSOR_DIMS))
    return TensorInfo(tensor.text(TENSOR_NAME), tensor.int64(TENSOR_DATA_TYPE), dims, external)


def _node_info(node: _Message) -> NodeInfo:
    inputs, outputs = tuple(node.texts(NODE_INPUT)), tuple(node.texts(NODE_OUTPUT))
    return NodeInfo(node.text(NODE_OP_TYPE), node.text(NODE_NAME), inputs, outputs, node.text(NODE_DOMAIN))


def _graph_info(model: _Message) -> GraphInfo:
    graphs = model.messages(MODEL_GRAPH, "GraphProto")
    if not graphs:
        raise _CorruptError("it has no graph")
    graph = graphs[0]
    for extra in graphs[1:]:  # protobuf merges repeated occurrences of a singular message field
        for number, entries in extra.fields.items():
            graph.fields.setdefault(number, []).extend(entries)
    opsets = model.messages(MODEL_OPSET_IMPORT, "OperatorSetIdProto")
    inits = tuple(_tensor_info(t) for t in graph.messages(GRAPH_INITIALIZER, "TensorProto"))
    init_names = {t.name for t in inits}
    inputs = (_value_info(v) for v in graph.messages(GRAPH_INPUT, "ValueInfoProto"))
    return GraphInfo(
        inputs=tuple(v for v in inputs if v.name not in init_names),
        outputs=tuple(_value_info(v) for v in graph.messages(GRAPH_OUTPUT, "ValueInfoProto")),
        initializers=inits,
        nodes=tuple(_node_info(n) for n in graph.messages(GRAPH_NODE, "NodeProto")),
        opsets={o.text(OPSET_DOMAIN): o.int64(OPSET_VERSION) for o in opsets},
        producer_name=model.text(MODEL_PRODUCER_NAME),
    )


def read_graph(path: str | os.PathLike[str]) -> GraphInfo:
    """Read the top-level graph of an ONNX model file without loading its weights.

    Args:
        path: The ``.onnx`` file (weights embedded; external-data files are not opened).

    Returns:
        The graph's inputs (excluding initializers), outputs, initializers, nodes, opsets and producer.

    Raises:
        ValueError: The file is truncated or is not an ONNX model.
        OSError: The file cannot be opened.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    try:
        return _graph_info(_Message(buf, 0, size, "ModelProto"))
    except _CorruptError as exc:
        message = f"{os.fspath(path)} is not a valid ONNX model file: {exc}; re-run the export"
        raise ValueError(message) from None
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()
