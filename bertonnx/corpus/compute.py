"""Compute one chunk of rows: check, tokenize, batch by the token budget, run, and build the output table.

The local job and every Ray actor call :func:`compute_rows` on the same ``(id, text, pair, error)``
rows (see :mod:`.readers`), so they judge rows alike and give the same numbers. A chunk is the sorting
window: its rows are sorted by length and cut into runs by :class:`bertonnx.batching.BatchLimits` (the one
batching rule of bertonnx), then results go back to input order.

Output columns: ``id`` (int64), ``n_tokens`` (int32, including ``[CLS]``/``[SEP]``), then per task:
``embed`` -> ``embedding`` (fixed-size list of float32, hidden); ``nsp`` -> ``is_next_probability``
(float32); ``encode`` -> ``last_hidden_state`` (list of ``n_tokens`` fixed-size float32 lists: valid
tokens only), ``pooler_output`` (hidden) and ``nsp_logits`` (2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, BatchLimits, make_batch, plan_batches
from ..model import BertOnnx
from ..outputs import POOLING_MODES, is_next_probability, pool, pooling_outputs
from .errors import BadRowError
from .tasks import ON_ERROR_MODES, TASKS

if TYPE_CHECKING:
    from tokenizers import Encoding

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "ON_ERROR_MODES",
    "TASKS",
    "ChunkResult",
    "TaskOptions",
    "compute_rows",
    "default_chunk_rows",
    "output_schema",
]

#: Rows sorted together (the sorting window) for embed and nsp: wide enough that length sorting pays.
DEFAULT_CHUNK_ROWS = 2048
#: encode keeps every token's hidden state: a smaller window bounds memory (256 x 512 x 768 x 4 B = 400 MB
#: at worst for bert-base).
ENCODE_CHUNK_ROWS = 256


def default_chunk_rows(task: str) -> int:
    """Rows per sorting window for ``task``."""
    return ENCODE_CHUNK_ROWS if task == "encode" else DEFAULT_CHUNK_ROWS


@dataclass(frozen=True)
class TaskOptions:
    """What a corpus job computes for each row.

    Attributes:
        task: ``embed`` (one vector per text), ``nsp`` (probability that the pair's second sentence
            follows the first) or ``encode`` (the three graph outputs).
        pooling: for ``embed``: ``pooler``, ``cls`` or ``mean``.
        normalize: for ``embed``: scale vectors to unit L2 norm.
        truncate: cut inputs longer than the model's positions instead of rejecting them.
        on_error: ``stop`` (raise :class:`BadRowError` on the first bad row) or ``skip`` (reject the row).
        max_batch_tokens: padded tokens per ``session.run``.
        batch_size: inputs per ``session.run``.

    Raises:
        ValueError: an unknown task, pooling or on_error, or a limit below 1.
    """

    task: str = "embed"
    pooling: str = "pooler"
    normalize: bool = False
    truncate: bool = False
    on_error: str = "stop"
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    batch_size: int = DEFAULT_MAX_BATCH_SIZE
    limits: BatchLimits = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("task", self.task, TASKS),
            ("pooling", self.pooling, POOLING_MODES),
            ("on_error", self.on_error, ON_ERROR_MODES),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        object.__setattr__(self, "limits", BatchLimits(self.max_batch_tokens, self.batch_size))


def output_schema(task: str, hidden_size: int) -> pa.Schema:
    """The Parquet schema of a job's output for ``task`` and a model of ``hidden_size``.

    Raises:
        ValueError: unknown ``task``.
    """
    vector = pa.list_(pa.float32(), hidden_size)
    fields: list[tuple[str, pa.DataType]] = [("id", pa.int64()), ("n_tokens", pa.int32())]
    if task == "embed":
        fields.append(("embedding", vector))
    elif task == "nsp":
        fields.append(("is_next_probability", pa.float32()))
    elif task == "encode":
        fields += [
            ("last_hidden_state", pa.list_(vector)),
            ("pooler_output", vector),
            ("nsp_logits", pa.list_(pa.float32(), 2)),
        ]
    else:
        raise ValueError(f"task must be one of {', '.join(TASKS)}, got {task!r}")
    return pa.schema(fields)


@dataclass
class ChunkResult:
    """Results of one chunk: ``ids``/``reasons`` for every row, arrays for the computed ones.

    Attributes:
        ids: ``[n]`` int64, every row's id, in input order.
        reasons: ``[n]``, ``None`` for a computed row, else why it was rejected.
        n_tokens: ``[n]`` int32, 0 for rejected rows.
        columns: output column -> values of the computed rows (in input order): ``[m, ...]`` float32
            arrays, or for ``last_hidden_state`` a list of ``[n_tokens, hidden]`` arrays.
    """

    ids: np.ndarray
    reasons: list[str | None]
    n_tokens: np.ndarray
    columns: dict[str, np.ndarray | list[np.ndarray]]

    @property
    def ok(self) -> np.ndarray:
        """``[n]`` bool: rows that were computed."""
        return np.fromiter((r is None for r in self.reasons), dtype=bool, count=len(self.reasons))

    def rejects(self) -> list[tuple[int, str]]:
        """``(id, reason)`` of each rejected row, in input order."""
        return [(int(i), r) for i, r in zip(self.ids, self.reasons, strict=True) if r is not None]

    def table(self, schema: pa.Schema, *, keep_rejected: bool = False) -> pa.Table:
        """The output rows as an Arrow table of ``schema``.

        Args:
            schema: from :func:`output_schema`.
            keep_rejected: keep rejected rows, with null results and an ``error`` column giving the reason
                (Ray keeps the row count of a batch so); else only computed rows.
        """
        ok = self.ok
        mask = None if keep_rejected else ok
        rows = len(self.ids) if keep_rejected else int(ok.sum())
        nulls = None if not keep_rejected or ok.all() else pa.array(~ok)
        arrays: list[pa.Array] = [
            pa.array(self.ids if mask is None else self.ids[mask], type=pa.int64()),
            pa.array(self.n_tokens if mask is None else self.n_tokens[mask], type=pa.int32()),
        ]
        for column in schema.names[2:]:
            arrays.append(_column(self.columns[column], schema.field(column).type, ok, keep_rejected, nulls))
        table = pa.Table.from_arrays(arrays, schema=schema)
        assert table.num_rows == rows
        if keep_rejected:
            table = table.append_column("error", pa.array(self.reasons, type=pa.string()))
        return table


def _column(
    values: np.ndarray | list[np.ndarray],
    kind: pa.DataType,
    ok: np.ndarray,
    keep_rejected: bool,
    nulls: pa.Array | None,
) -> pa.Array:
    """Values of the computed rows as an Arrow column; with ``keep_rejected``, null rows where ``ok`` is False."""
    if isinstance(values, list):  # last_hidden_state: one [n_tokens, hidden] array per computed row
        width = kind.value_type.list_size
        lengths = [len(v) for v in values]
        if keep_rejected:  # an empty list for a rejected row, masked as null below
            computed = iter(lengths)
            lengths = [next(computed) if good else 0 for good in ok]
        offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        flat = np.concatenate(values).reshape(-1) if values else np.zeros(0, dtype=np.float32)
        inner = pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), width)
        return pa.ListArray.from_arrays(pa.array(offsets), inner, mask=nulls)
    if keep_rejected and not ok.all():
        full = np.zeros((len(ok), *values.shape[1:]), dtype=np.float32)
        full[ok] = values
        values = full
    if isinstance(kind, pa.FixedSizeListType):
        return pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(values, dtype=np.float32).reshape(-1)), kind.list_size, mask=nulls
        )
    return pa.array(values.astype(np.float32, copy=False), type=kind, mask=None if nulls is None else ~ok)


def compute_rows(model: BertOnnx, rows: pa.Table, options: TaskOptions) -> ChunkResult:
    """Check, tokenize and run one chunk of :data:`bertonnx.corpus.readers.ROW_SCHEMA` rows.

    Args:
        model: the loaded model.
        rows: columns ``id``, ``text``, ``pair`` (null when no pairs) and ``error`` (null on good rows).
        options: the task and its settings.

    Returns:
        A :class:`ChunkResult` for every row of ``rows``.

    Raises:
        BadRowError: a row is bad and ``options.on_error`` is ``stop`` (the first bad row of the chunk).
    """
    ids = np.asarray(rows.column("id").to_numpy(zero_copy_only=False), dtype=np.int64)
    texts: list[str | None] = rows.column("text").to_pylist()
    pairs: list[str | None] = rows.column("pair").to_pylist()
    reasons: list[str | None] = rows.column("error").to_pylist()
    use_pairs = options.task != "embed" and any(p is not None for p in pairs)
    if options.task == "nsp":
        for i, (text, pair) in enumerate(zip(texts, pairs, strict=True)):
            if reasons[i] is None and text is not None and pair is None:
                reasons[i] = "no second sentence; nsp needs a pair column (--pair-column)"
    good = [i for i, reason in enumerate(reasons) if reason is None]
    limit = model.max_length
    encodings = model.tokenizer.encode(
        [texts[i] or "" for i in good],
        [pairs[i] or "" for i in good] if use_pairs else None,
        truncation=options.truncate,
        max_length=limit if options.truncate else None,  # untruncated: each row's length is judged below
    )
    kept = []
    for i, encoding in zip(good, encodings, strict=True):
        if len(encoding.ids) > limit:
            reasons[i] = (
                f"has {len(encoding.ids)} tokens, more than the model's {limit}; pass --truncate (truncate=True) "
                "to cut it, or split the text"
            )
        else:
            kept.append((i, encoding))
    if options.on_error == "stop":
        for i, reason in enumerate(reasons):
            if reason is not None:
                raise BadRowError(int(ids[i]), reason)
    n_tokens = np.zeros(len(ids), dtype=np.int32)
    for i, encoding in kept:
        n_tokens[i] = len(encoding.ids)
    columns = _run(model, [e for _, e in kept], options)
    return ChunkResult(ids, reasons, n_tokens, columns)


def _run(model: BertOnnx, encodings: list[Encoding], options: TaskOptions) -> dict[str, np.ndarray | list[np.ndarray]]:
    """Run ``encodings`` sorted by length and cut by the token budget; results in the encodings' order."""
    n, hidden = len(encodings), model.hidden_size
    if options.task == "embed":
        names: tuple[str, ...] = pooling_outputs(options.pooling)
    elif options.task == "nsp":
        names = ("nsp_logits",)
    else:
        names = ("last_hidden_state", "pooler_output", "nsp_logits")
    embedding = np.zeros((n, hidden), dtype=np.float32)
    probability = np.zeros(n, dtype=np.float32)
    pooler = np.zeros((n, hidden), dtype=np.float32)
    logits = np.zeros((n, 2), dtype=np.float32)
    states: list[np.ndarray] = [np.zeros((0, hidden), dtype=np.float32)] * n
    lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=n)
    for rows in plan_batches(lengths, options.limits):
        batch = make_batch([encodings[i] for i in rows], rows)
        out = model.run_batch(batch, names)
        if options.task == "embed":
            embedding[rows] = pool(out, batch.attention_mask, options.pooling)
        elif options.task == "nsp":
            probability[rows] = is_next_probability(out["nsp_logits"])
        else:
            pooler[rows] = out["pooler_output"]
            logits[rows] = out["nsp_logits"]
            for row, index in enumerate(rows):
                states[index] = np.array(out["last_hidden_state"][row, : lengths[index]], dtype=np.float32)
    if options.task == "embed":
        if options.normalize and n:
            embedding /= np.maximum(np.linalg.norm(embedding, axis=1, keepdims=True), np.finfo(np.float32).tiny)
        return {"embedding": embedding}
    if options.task == "nsp":
        return {"is_next_probability": probability}
    return {"last_hidden_state": states, "pooler_output": pooler, "nsp_logits": logits}
