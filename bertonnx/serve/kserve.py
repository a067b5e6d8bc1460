"""KServe v2 / Triton HTTP inference: token-id tensors in, the graph's float32 outputs out.

Bodies are JSON, or JSON followed by raw tensor bytes (Triton's binary tensor data extension, which
``tritonclient.http`` uses by default): the ``Inference-Header-Content-Length`` header gives the JSON
part's length, each binary input says its ``parameters.binary_data_size``, and outputs asked for with
``parameters.binary_data`` (or the request's ``binary_data_output``) come back the same way.

Rows are right-padded: each row's ``attention_mask`` is ones then zeros. Each row becomes one input of
the scheduler (padding stripped), so KServe rows batch with every other request; ``last_hidden_state``
comes back in the request's ``[batch, sequence, hidden]`` shape with zeros past each row's tokens, as
``BertOutput`` does offline. Since the answer has the request's shape, the limits are checked on the
tensors' shapes, before their data is read: at most the model's positions in the sequence dimension (a
mask with one 1 per row does not make a [32, 10000] tensor short) and ``--max-client-batch-size`` rows.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from ..manifest import OUTPUT_NAMES, PER_TOKEN_OUTPUTS
from ..table import OUTPUTS
from .answers import FlatArray
from .errors import ServeError, validation_message
from .protocol import REQUEST_EXAMPLES, KServeInferRequest, KServeTensor

__all__ = [
    "BINARY_HEADER",
    "INPUT_DATATYPE",
    "OUTPUT_DATATYPE",
    "InferRows",
    "answer_floats",
    "decode_body",
    "encode_response",
    "parse_infer_request",
]

#: Length of the JSON part of a body that carries binary tensors.
BINARY_HEADER = "Inference-Header-Content-Length"
INPUT_DATATYPE = "INT64"
OUTPUT_DATATYPE = "FP32"
_CONTENT_ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decode_body(body: bytes, content_encoding: str | None, payload_limit: int) -> bytes:
    """Undo ``Content-Encoding: gzip|deflate`` (as ``tritonclient`` may send), at most ``payload_limit`` bytes.

    Raises:
        ServeError: an unknown encoding or corrupt data (422), or more than ``payload_limit`` bytes (413).
    """
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding not in _CONTENT_ENCODINGS:
        raise ServeError(f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or none", "validation")
    decompressor = zlib.decompressobj(_CONTENT_ENCODINGS[encoding])
    try:
        data = decompressor.decompress(body, payload_limit + 1)
    except zlib.error as exc:
        raise ServeError(f"the {encoding} body is corrupt ({exc}); resend it", "validation") from None
    if len(data) > payload_limit or decompressor.unconsumed_tail:
        raise ServeError(
            f"the body decompresses to more than the payload limit of {payload_limit} bytes; send fewer rows "
            "or start the server with a larger --payload-limit",
            "payload_too_large",
        )
    return data


@dataclass(frozen=True)
class InferRows:
    """A parsed infer request: one row per input, and how to answer."""

    request: KServeInferRequest
    shape: tuple[int, int]
    ids: list[list[int]]
    type_ids: list[list[int]]
    outputs: list[tuple[str, bool]]  # (name, binary)


def _tensor_array(
    tensor: KServeTensor, binary: memoryview, offset: int, max_length: int, max_rows: int
) -> tuple[np.ndarray, int]:
    name = tensor.name
    if tensor.datatype != INPUT_DATATYPE:
        raise ServeError(f"input {name} has datatype {tensor.datatype}; send {INPUT_DATATYPE}", "validation")
    if len(tensor.shape) != 2 or min(tensor.shape) < 1:
        raise ServeError(f"input {name} has shape {tensor.shape}; send [batch, sequence], both >= 1", "validation")
    rows, columns = tensor.shape
    if columns > max_length:
        raise ServeError(
            f"input {name} has shape {tensor.shape}: {columns} positions, more than the model's {max_length}; "
            f"pad rows only to the longest row's length (at most {max_length})",
            "validation",
        )
    if rows > max_rows:
        raise ServeError(
            f"input {name} has {rows} rows, more than --max-client-batch-size {max_rows}; split the request",
            "payload_too_large",
        )
    size = (tensor.parameters or {}).get("binary_data_size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size != rows * columns * 8:
            raise ServeError(
                f"input {name}: binary_data_size {size!r} does not match shape {tensor.shape} of INT64 "
                f"({rows * columns * 8} bytes)",
                "validation",
            )
        if offset + size > len(binary):
            raise ServeError(
                f"input {name}: the body holds {len(binary) - offset} binary bytes for it, {size} announced",
                "validation",
            )
        array = np.frombuffer(binary[offset : offset + size], dtype="<i8").astype(np.int64).reshape(rows, columns)
        return array, offset + size
    if tensor.data is None:
        raise ServeError(f"input {name} has neither data nor parameters.binary_data_size", "validation")
    try:
        array = np.asarray(tensor.data)
    except ValueError:
        raise ServeError(f"input {name}: data is ragged; send a flat or [batch][sequence] list", "validation") from None
    if array.dtype.kind == "O" and array.size and all(isinstance(v, int) for v in array.flat):
        raise ServeError(f"input {name}: data holds integers outside INT64's range", "validation")
    if array.dtype.kind not in "iu" or array.size != rows * columns:
        kind = "booleans" if array.dtype.kind == "b" else f"values of type {array.dtype}"
        raise ServeError(
            f"input {name}: data must be {rows * columns} integers for shape {tensor.shape}, got {array.size} {kind}",
            "validation",
        )
    if any(isinstance(value, bool) for value in _flat(tensor.data)):  # numpy takes [101, true] as ints
        raise ServeError(f"input {name}: data holds true or false; send integers only", "validation")
    if array.ndim > 1 and array.shape != (rows, columns):  # KServe allows flat data; nested must match shape
        raise ServeError(
            f"input {name}: data is nested as {list(array.shape)}, but shape says {tensor.shape}; send flat data "
            "or nest it as [batch][sequence]",
            "validation",
        )
    return array.astype(np.int64).reshape(rows, columns), offset


def _flat(data: list[Any]) -> list[Any]:
    """The leaves of nested lists (data already checked to hold ``rows × columns`` values)."""
    while data and any(isinstance(item, list) for item in data):
        data = [leaf for item in data for leaf in (item if isinstance(item, list) else [item])]
    return data


def parse_infer_request(
    body: bytes,
    header_length: str | None,
    *,
    input_names: Sequence[str],
    vocab_size: int,
    type_vocab_size: int,
    max_length: int,
    max_client_batch_size: int,
    output_names: Sequence[str] = OUTPUT_NAMES,
) -> InferRows:
    """Check an infer body and turn it into rows of token ids.

    Raises:
        ServeError: 422 for anything malformed (naming the tensor and what to send), 413 for more rows
            than ``max_client_batch_size``.
    """
    json_part, binary = body, memoryview(b"")
    if header_length is not None:
        if not (header_length.isascii() and header_length.isdigit()) or int(header_length) > len(body):
            raise ServeError(
                f"{BINARY_HEADER} is {header_length!r}; it must be the JSON part's length (<= {len(body)})",
                "validation",
            )
        json_part, binary = body[: int(header_length)], memoryview(body)[int(header_length) :]
    try:
        request = KServeInferRequest.model_validate_json(json_part)
    except ValidationError as exc:
        raise ServeError(validation_message(exc, REQUEST_EXAMPLES["infer"]), "validation") from None
    arrays: dict[str, np.ndarray] = {}
    offset = 0
    for tensor in request.inputs:
        if tensor.name not in input_names:
            raise ServeError(f"unknown input {tensor.name!r}; the model takes {', '.join(input_names)}", "validation")
        if tensor.name in arrays:
            raise ServeError(f"input {tensor.name} is given twice", "validation")
        arrays[tensor.name], offset = _tensor_array(tensor, binary, offset, max_length, max_client_batch_size)
    if offset != len(binary):
        raise ServeError(f"the body has {len(binary) - offset} binary bytes no input claims", "validation")
    missing = [name for name in input_names if name not in arrays]
    if missing:
        raise ServeError(f"missing inputs {', '.join(missing)}; the model takes {', '.join(input_names)}", "validation")
    shapes = {name: array.shape for name, array in arrays.items()}
    if len(set(shapes.values())) != 1:
        raise ServeError(f"inputs must have one shape, got {shapes}", "validation")
    ids = arrays["input_ids"]
    rows, columns = ids.shape
    mask = arrays.get("attention_mask", np.ones_like(ids))
    types = arrays.get("token_type_ids", np.zeros_like(ids))
    segments = "token_type_ids" in arrays  # a graph without segments (RoBERTa ...) has type_vocab_size 0
    lengths = mask.sum(axis=1)
    expected = np.arange(columns)[None, :] < lengths[:, None]
    for row in range(rows):
        length = int(lengths[row])
        if not np.array_equal(mask[row], expected[row]) or length < 1:
            raise ServeError(
                f"attention_mask row {row} must be ones then zeros (right padding) with at least one 1", "validation"
            )
        if length > max_length:
            raise ServeError(
                f"row {row} has {length} tokens, more than the model's {max_length} positions", "validation"
            )
        if ids[row, :length].min() < 0 or ids[row, :length].max() >= vocab_size:
            raise ServeError(f"input_ids row {row} has ids outside [0, {vocab_size})", "validation")
        if segments and (types[row, :length].min() < 0 or types[row, :length].max() >= type_vocab_size):
            raise ServeError(f"token_type_ids row {row} has values outside [0, {type_vocab_size})", "validation")
    return InferRows(
        request=request,
        shape=(rows, columns),
        ids=[ids[row, : int(lengths[row])].tolist() for row in range(rows)],
        type_ids=[types[row, : int(lengths[row])].tolist() for row in range(rows)],
        outputs=_requested_outputs(request, output_names),
    )


def _requested_outputs(request: KServeInferRequest, output_names: Sequence[str]) -> list[tuple[str, bool]]:
    default_binary = (request.parameters or {}).get("binary_data_output", False)
    if not isinstance(default_binary, bool):
        raise ServeError("parameters.binary_data_output must be true or false", "validation")
    if request.outputs is None:
        return [(name, default_binary) for name in output_names]
    outputs: list[tuple[str, bool]] = []
    for output in request.outputs:
        if output.name not in output_names:
            raise ServeError(f"unknown output {output.name!r}; the model gives {', '.join(output_names)}", "validation")
        if any(output.name == seen for seen, _ in outputs):
            raise ServeError(f"output {output.name} is asked for twice; name each output once", "validation")
        binary = (output.parameters or {}).get("binary_data", default_binary)
        if not isinstance(binary, bool):
            raise ServeError(f"output {output.name}: parameters.binary_data must be true or false", "validation")
        outputs.append((output.name, binary))
    if not outputs:
        raise ServeError(f"outputs is empty; ask for some of {', '.join(output_names)} or omit it", "validation")
    return outputs


def answer_floats(rows: InferRows, hidden_size: int, num_labels: int | None = None) -> tuple[int, int]:
    """Float32 values of the answer, as (JSON, binary): per-token outputs have the request's padded shape;
    ``num_labels`` is the width of ``logits`` / ``token_logits`` (classifier exports). Shapes come from the
    model table (:data:`bertonnx.table.OUTPUTS`)."""
    count, columns = rows.shape
    sizes = {"batch": count, "tokens": columns, "hidden": hidden_size, "labels": num_labels or 2}
    json_floats = binary_floats = 0
    for name, binary in rows.outputs:
        floats = math.prod(axis if isinstance(axis, int) else sizes[axis] for axis in OUTPUTS[name].axes)
        if binary:
            binary_floats += floats
        else:
            json_floats += floats
    return json_floats, binary_floats


def encode_response(
    rows: InferRows, answers: Sequence[Mapping[str, np.ndarray]], *, model_name: str, hidden_size: int
) -> tuple[dict[str, Any], list[bytes]]:
    """The answer's JSON part (numpy arrays in it, for :class:`.answers.JSONAnswer`) and its binary tensors
    (sent after it, with the JSON part's length in ``Inference-Header-Content-Length``)."""
    count, columns = rows.shape
    outputs = []
    blobs = []
    for name, binary in rows.outputs:
        if name in PER_TOKEN_OUTPUTS:  # each answer holds its own tokens: pad them to the request's shape
            tail = answers[0][name].shape[1:] if answers else ((hidden_size,) if name == "last_hidden_state" else ())
            array = np.zeros((count, columns, *tail), dtype=np.float32)
            for row, answer in enumerate(answers):
                states = answer[name]
                array[row, : states.shape[0]] = states
        else:
            array = np.stack([answer[name] for answer in answers]).astype(np.float32)
        tensor: dict[str, Any] = {"name": name, "datatype": OUTPUT_DATATYPE, "shape": list(array.shape)}
        if binary:
            blob = array.astype("<f4").tobytes()
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = FlatArray(array)
        outputs.append(tensor)
    header: dict[str, Any] = {"model_name": model_name, "model_version": "1", "outputs": outputs}
    if rows.request.id is not None:
        header["id"] = rows.request.id
    return header, blobs
