"""Compute one chunk of rows: check, tokenize, batch by the token budget, run, and build the output table.

The local job and every Ray actor call :func:`compute_rows` on the same ``(id, text, pair, error)``
rows (see :mod:`.readers`), so they judge rows alike and give the same numbers. A chunk is the sorting
window: its rows are sorted by length and cut into runs by :class:`bertonnx.batching.BatchLimits` (the one
batching rule of bertonnx), then results go back to input order.

Output columns: ``id`` (int64), ``n_tokens`` (int32, including ``[CLS]``/``[SEP]``), then per task:
``embed`` -> ``embedding`` (fixed-size list of float32, hidden); ``nsp`` -> ``is_next_probability``
(float32); ``encode`` -> ``last_hidden_state`` (list of ``n_tokens`` fixed-size float32 lists: valid
tokens only), ``pooler_output`` (hidden) and ``nsp_logits`` (2); ``classify`` -> ``label`` (string: the
top label of the checkpoint's classifier) and ``score`` (float32, scored as
``pipeline("text-classification")`` does); ``tag`` -> ``entities`` (a list of structs per row:
:meth:`bertonnx.BertOnnx.tag`'s entities with ``pipeline("token-classification")``'s field names,
``{entity_group, score, word, start, end}``, or with aggregation ``none`` ``{entity, score, index, word, start,
end}``; ``start``/``end`` character offsets into the row's text). Every column and field is named as the
Python method's answer (the pipeline's, where there is one). A ``tag`` row longer than the model's positions
is tagged in windows when ``stride`` is set, else rejected like any over-long row. ``zero-shot`` -> ``labels``
(list of strings, highest score first) and ``scores`` (list of float32), as
``pipeline("zero-shot-classification")`` names them (``n_tokens``: the tokens of all the row's (text, hypothesis)
pairs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pyarrow as pa

from .. import driver
from ..batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, BatchLimits
from ..errors import HeadMissingError
from ..manifest import Manifest
from ..model import BertOnnx
from ..sentence import BLOCK as SENTENCE_BLOCK
from ..tasks import POOLING_MODES, make_task
from ..tasks.embed import PIPELINE_POOLING
from ..tasks.tag import AGGREGATION_STRATEGIES, DEFAULT_IGNORE_LABELS, check_ignore_labels
from ..tasks.zero_shot import DEFAULT_HYPOTHESIS_TEMPLATE, hypotheses, parse_labels
from .errors import BadRowError, row_reason
from .tasks import ON_ERROR_MODES, TASKS

if TYPE_CHECKING:
    pass

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "ON_ERROR_MODES",
    "TASKS",
    "ChunkResult",
    "TaskOptions",
    "check_model_task",
    "compute_rows",
    "default_chunk_rows",
    "output_schema",
    "task_for",
]

#: Tasks that need a head of the export (checked against its manifest before any row is read).
HEAD_TASKS = ("nsp", "classify", "tag", "sparse", "zero-shot")
#: The runtime task of a corpus task whose name differs.
RUNTIME_TASKS = {"sparse": "embed_sparse", "zero-shot": "zero_shot"}
#: The corpus tasks whose rows are single texts (a pair column is not read).
TEXT_TASKS = ("embed", "tag", "sparse", "zero-shot")
#: One weight of the ``sparse`` task's ``sparse`` column: a vocabulary id and its SPLADE weight (TEI's names).
SPARSE_TYPE = pa.struct([("index", pa.int32()), ("value", pa.float32())])
#: One entity of the ``tag`` task's ``entities`` column: ``pipeline("token-classification")``'s group.
ENTITY_TYPE = pa.struct(
    [
        ("entity_group", pa.string()),
        ("score", pa.float32()),
        ("word", pa.string()),
        ("start", pa.int32()),
        ("end", pa.int32()),
    ]
)
#: One token of the ``entities`` column with aggregation ``none`` (the pipeline's names: ``entity``, ``index``).
TOKEN_ENTITY_TYPE = pa.struct(
    [
        ("entity", pa.string()),
        ("score", pa.float32()),
        ("index", pa.int32()),
        ("word", pa.string()),
        ("start", pa.int32()),
        ("end", pa.int32()),
    ]
)
#: The graph outputs of the ``encode`` task's columns.
ENCODE_OUTPUTS = ("last_hidden_state", "pooler_output", "nsp_logits")
#: Output columns holding a list per row (built by :func:`_struct_column`).
LIST_COLUMNS = ("entities", "sparse", "labels", "scores")
#: Rows sorted together (the sorting window) for embed and nsp: wide enough that length sorting pays.
DEFAULT_CHUNK_ROWS = 2048
#: encode keeps every token's hidden state: a smaller window bounds memory (256 x 512 x 768 x 4 B = 400 MB
#: at worst for bert-base).
ENCODE_CHUNK_ROWS = 256


#: An output column's values for the computed rows (see :class:`ChunkResult`).
Columns = np.ndarray | list[np.ndarray] | list[list[dict[str, Any]]]


def default_chunk_rows(task: str) -> int:
    """Rows per sorting window for ``task``."""
    return ENCODE_CHUNK_ROWS if task == "encode" else DEFAULT_CHUNK_ROWS


@dataclass(frozen=True)
class TaskOptions:
    """What a corpus job computes for each row.

    Attributes:
        task: ``embed`` (one vector per text), ``nsp`` (probability that the pair's second sentence
            follows the first), ``encode`` (the three graph outputs) or ``classify`` (the top label of the
            checkpoint's classifier and its score; texts or pairs).
        pooling: for ``embed``: ``pipeline``, ``pooler``, ``cls`` or ``mean``; ``None``: the export's own
            (its sentence-transformers pipeline, cut at its ``max_seq_length``, else ``pooler``).
        normalize: for ``embed``: scale vectors to unit L2 norm.
        truncation: cut inputs longer than the model's positions instead of rejecting them.
        on_error: ``stop`` (raise :class:`BadRowError` on the first bad row) or ``skip`` (reject the row).
        max_batch_tokens: padded tokens per ``session.run``.
        batch_size: inputs per ``session.run``.
        aggregation_strategy: for ``tag``: ``none``, ``simple``, ``first``, ``average`` or ``max``.
        stride: for ``tag``: tag rows longer than the model's positions in windows sharing this many tokens
            (``None``: such rows are rejected).
        ignore_labels: for ``tag``: labels left out.
        candidate_labels, hypothesis_template, multi_label, entailment_label: for ``zero-shot``, as
            :meth:`bertonnx.BertOnnx.zero_shot` takes them.

    Raises:
        ValueError: an unknown task, pooling, on_error or aggregation strategy, or a limit below 1.
    """

    task: str = "embed"
    pooling: str | None = None
    normalize: bool = False
    truncation: bool = False
    on_error: str = "stop"
    max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS
    batch_size: int = DEFAULT_MAX_BATCH_SIZE
    aggregation_strategy: str = "simple"
    stride: int | None = None
    ignore_labels: tuple[str, ...] = DEFAULT_IGNORE_LABELS
    prompt_name: str | None = None
    dimensions: int | None = None
    candidate_labels: str | tuple[str, ...] | None = None
    hypothesis_template: str = DEFAULT_HYPOTHESIS_TEMPLATE
    multi_label: bool = False
    entailment_label: str | None = None
    limits: BatchLimits = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("task", self.task, TASKS),
            ("pooling", self.pooling or PIPELINE_POOLING, (*POOLING_MODES, PIPELINE_POOLING)),
            ("on_error", self.on_error, ON_ERROR_MODES),
            ("aggregation_strategy", self.aggregation_strategy, AGGREGATION_STRATEGIES),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if self.stride is not None and (isinstance(self.stride, bool) or not isinstance(self.stride, int)):
            raise TypeError(f"stride must be an int or None, got {type(self.stride).__name__}")
        if self.stride is not None and self.stride < 0:
            raise ValueError(f"stride must be >= 0, got {self.stride}")
        object.__setattr__(self, "ignore_labels", check_ignore_labels(self.ignore_labels))
        if self.task == "zero-shot":  # checked before any model is loaded (the entailment label needs the model)
            if self.candidate_labels is None:
                raise ValueError("zero-shot needs its candidate labels: candidate_labels=[...] (--candidate-labels)")
            hypotheses(self.hypothesis_template, parse_labels(self.candidate_labels))
            if not isinstance(self.candidate_labels, str):
                object.__setattr__(self, "candidate_labels", tuple(self.candidate_labels or ()))
        object.__setattr__(self, "limits", BatchLimits(self.max_batch_tokens, self.batch_size))


def check_model_task(manifest: Manifest, task: str) -> None:
    """Check that the export offers ``task``'s head (nsp, classify).

    Raises:
        HeadMissingError: it does not; the message names what the export has.
    """
    runtime = RUNTIME_TASKS.get(task, task)
    offered = runtime in manifest.tasks
    if task == "zero-shot":  # any classifier of two labels or more (its labels are judged by the task)
        offered = "classify" in manifest.tasks and (manifest.num_labels or 0) >= 2
    if task in HEAD_TASKS and not offered:
        raise HeadMissingError.for_task(runtime, manifest.architecture, manifest.tasks, manifest.num_labels)


def embedding_width(manifest: Manifest, options: TaskOptions) -> int:
    """Values per ``embedding`` row: the export's sentence-transformers pipeline's (its last module's width, or
    its ``truncate_dim``) when ``embed`` runs it, else the hidden size."""
    block = manifest.data.get(SENTENCE_BLOCK)
    own = options.pooling in (None, PIPELINE_POOLING)
    width = manifest.hidden_size
    if options.task == "embed" and own and isinstance(block, dict) and block.get("model_type") == "SentenceTransformer":
        width = int(block["dimension"]) if options.dimensions else int(block.get("truncate_dim") or block["dimension"])
    return min(width, options.dimensions) if options.task == "embed" and options.dimensions else width


def output_schema(task: str, hidden_size: int, aggregation_strategy: str = "simple") -> pa.Schema:
    """The Parquet schema of a job's output for ``task`` and a model of ``hidden_size`` (``tag``: its entities'
    fields follow ``aggregation_strategy``, as the pipeline's do).

    Raises:
        ValueError: unknown ``task``.
    """
    vector = pa.list_(pa.float32(), hidden_size)
    fields: list[tuple[str, pa.DataType]] = [("id", pa.int64()), ("n_tokens", pa.int32())]
    if task == "embed":
        fields.append(("embedding", vector))
    elif task == "nsp":
        fields.append(("is_next_probability", pa.float32()))
    elif task == "classify":
        fields += [("label", pa.string()), ("score", pa.float32())]
    elif task == "encode":
        fields += [
            ("last_hidden_state", pa.list_(vector)),
            ("pooler_output", vector),
            ("nsp_logits", pa.list_(pa.float32(), 2)),
        ]
    elif task == "tag":
        entity = TOKEN_ENTITY_TYPE if aggregation_strategy == "none" else ENTITY_TYPE
        fields.append(("entities", pa.list_(entity)))
    elif task == "sparse":
        fields.append(("sparse", pa.list_(SPARSE_TYPE)))
    elif task == "zero-shot":
        fields += [("labels", pa.list_(pa.string())), ("scores", pa.list_(pa.float32()))]
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
            arrays, for ``last_hidden_state`` a list of ``[n_tokens, hidden]`` arrays, for ``entities`` a
            list of lists of entity dicts.
    """

    ids: np.ndarray
    reasons: list[str | None]
    n_tokens: np.ndarray
    columns: dict[str, Columns]

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
            values, kind = self.columns[column], schema.field(column).type
            if column in LIST_COLUMNS:
                arrays.append(_struct_column(cast("list[list[dict[str, Any]]]", values), kind, ok, keep_rejected))
            else:
                arrays.append(_column(cast("np.ndarray | list[np.ndarray]", values), kind, ok, keep_rejected, nulls))
        table = pa.Table.from_arrays(arrays, schema=schema)
        assert table.num_rows == rows
        if keep_rejected:
            table = table.append_column("error", pa.array(self.reasons, type=pa.string()))
        return table


def _entity_row(found: list[dict[str, Any]], kind: pa.StructType) -> list[dict[str, Any]]:
    """The entities of one row as the column's structs: the fields of the pipeline's answer, by name."""
    names = [kind.field(i).name for i in range(kind.num_fields)]
    return [{name: entity[name] for name in names} for entity in found]


def _struct_column(values: list[list[Any]], kind: pa.DataType, ok: np.ndarray, keep_rejected: bool) -> pa.Array:
    """tag's entities, sparse's weights or zero-shot's labels and scores as a list column; with ``keep_rejected``,
    null rows where ``ok`` is False."""
    entity = kind.value_type in (ENTITY_TYPE, TOKEN_ENTITY_TYPE)
    rows = [_entity_row(found, kind.value_type) for found in values] if entity else values
    if keep_rejected:
        computed = iter(rows)
        return pa.array([next(computed) if good else None for good in ok], type=kind)
    return pa.array(rows, type=kind)


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
    if pa.types.is_string(kind):  # classify's labels: an object array of str
        if keep_rejected and not ok.all():
            full = np.full(len(ok), "", dtype=object)
            full[ok] = values
            values = full
        return pa.array(values, type=kind, mask=None if nulls is None else ~ok)
    if keep_rejected and not ok.all():
        full = np.zeros((len(ok), *values.shape[1:]), dtype=np.float32)
        full[ok] = values
        values = full
    if isinstance(kind, pa.FixedSizeListType):
        return pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(values, dtype=np.float32).reshape(-1)), kind.list_size, mask=nulls
        )
    return pa.array(values.astype(np.float32, copy=False), type=kind, mask=None if nulls is None else ~ok)


def task_for(model: BertOnnx, options: TaskOptions) -> Any:
    """The runtime task a corpus job's ``options`` ask of ``model`` (built by :func:`bertonnx.tasks.make_task`,
    like every other caller's).

    Raises:
        HeadMissingError: the export lacks the task's head. ValueError, TypeError: a bad option.
    """
    if options.task == "embed":
        # no --truncation: the task's own default (an export of a sentence-transformers folder cuts at its
        # max_seq_length, as encode; any other export rejects long rows)
        return make_task(
            model,
            "embed",
            pooling=options.pooling,
            normalize=options.normalize,
            truncation=options.truncation or None,
            prompt_name=options.prompt_name,
            dimensions=options.dimensions,
        )
    if options.task == "nsp":
        return make_task(model, "nsp", truncation=options.truncation)
    if options.task == "classify":
        return make_task(model, "classify", top_k=1, truncation=options.truncation)
    if options.task == "sparse":
        return make_task(model, "embed_sparse", truncation=options.truncation or None, prompt_name=options.prompt_name)
    if options.task == "zero-shot":  # the text is always cut beside a hypothesis, as the pipeline
        return make_task(
            model,
            "zero_shot",
            candidate_labels=options.candidate_labels,
            hypothesis_template=options.hypothesis_template,
            multi_label=options.multi_label,
            entailment_label=options.entailment_label,
        )
    if options.task == "tag":
        return make_task(
            model,
            "tag",
            aggregation_strategy=options.aggregation_strategy,
            ignore_labels=options.ignore_labels,
            stride=options.stride,
            truncation=options.truncation and options.stride is None,  # long rows are windowed, never cut
        )
    return make_task(model, "encode", outputs=ENCODE_OUTPUTS, truncation=options.truncation)


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
    use_pairs = options.task not in TEXT_TASKS and any(p is not None for p in pairs)
    if options.task == "nsp":
        for i, (text, pair) in enumerate(zip(texts, pairs, strict=True)):
            if reasons[i] is None and text is not None and pair is None:
                reasons[i] = "no second sentence; nsp needs a pair column (pair_column, --pair-column)"
    good = [i for i, reason in enumerate(reasons) if reason is None]
    task = task_for(model, options)
    prepared = task.prepare(
        [texts[i] or "" for i in good], [pairs[i] or "" for i in good] if use_pairs else None, 0, strict=False
    )
    for position, error in prepared.rejected.items():
        reasons[good[position]] = row_reason(error, options.task)
    if options.on_error == "stop":
        for i, reason in enumerate(reasons):
            if reason is not None:
                raise BadRowError(int(ids[i]), reason)
    kept = [good[position] for position in prepared.kept]
    n_tokens = np.zeros(len(ids), dtype=np.int32)
    for i, tokens in zip(kept, prepared.input_tokens(), strict=True):
        n_tokens[i] = tokens
    units = prepared.units
    found = driver.list_in_order(driver.run(model.run_batch, task, driver.plan(units, options.limits))) if units else []
    answers = task.finish(prepared, found)
    return ChunkResult(ids, reasons, n_tokens, _columns(options, answers, model))


def _columns(options: TaskOptions, answers: list[Any], model: BertOnnx) -> dict[str, Columns]:
    """The output columns of the computed rows from the task's answers (in row order)."""
    task = options.task
    hidden = model.hidden_size
    if task == "embed":
        width = embedding_width(model.manifest, options)
        return {"embedding": np.stack(answers) if answers else np.zeros((0, width), dtype=np.float32)}
    if task == "nsp":
        return {"is_next_probability": np.asarray(answers, dtype=np.float32).reshape(len(answers))}
    if task == "classify":
        top = [ranked[0] for ranked in answers]
        return {
            "label": np.array([best["label"] for best in top], dtype=object),
            "score": np.array([best["score"] for best in top], dtype=np.float32),
        }
    if task == "tag":
        return {"entities": answers}
    if task == "zero-shot":
        return {"labels": [a["labels"] for a in answers], "scores": [a["scores"] for a in answers]}
    if task == "sparse":
        return {
            "sparse": [
                [{"index": int(i), "value": float(v)} for i, v in zip(a["indices"], a["values"], strict=True)]
                for a in answers
            ]
        }
    columns: dict[str, Columns] = {"last_hidden_state": [row["last_hidden_state"] for row in answers]}
    for name, width in (("pooler_output", hidden), ("nsp_logits", 2)):
        columns[name] = np.stack([row[name] for row in answers]) if answers else np.zeros((0, width), dtype=np.float32)
    return columns
