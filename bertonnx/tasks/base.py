"""What every task is: four steps, and the model facts its steps read.

A task turns inputs into answers in four steps, and every caller (:class:`bertonnx.BertOnnx`, the server's
routes, the corpus job) runs the same four:

1. ``prepare(first, second, first_index)``: check the options, tokenize (or cut into windows) one chunk of
   inputs; the result is a :class:`Prepared`: the flat list of token sequences the engine runs (``units``) and
   what ``finish`` needs to put them back together;
2. the driver (:mod:`bertonnx.driver`) or the server's scheduler batches the units of any number of chunks
   and requests by the token budget and runs the graph for ``task.outputs`` only;
3. ``postprocess(outputs, batch, rows)``: per unit (a batch row), its answer (a vector, logits cut to its
   tokens ...);
4. ``finish(prepared, unit_answers)``: per input, its answer (merged windows, ranked labels, a shape).

Window and merge code therefore exists once, in the task. Tasks are frozen dataclasses (hashable: the server's
engine groups a batch's rows by task); :func:`bertonnx.tasks.make_task` builds one from a model's facts
(:class:`ModelFacts`) and the caller's options, choosing every default in one place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..batching import SORT_WINDOW_TOKENS, Batch, TokenSequence
from ..errors import InputTooLongError

if TYPE_CHECKING:
    from ..manifest import Manifest
    from ..tokenizer import TextTokenizer
    from ..windows import Windowing
    from .tag import TokenStrings

__all__ = [
    "Encoder",
    "ModelFacts",
    "PerInput",
    "Prepared",
    "Task",
    "check_bool",
    "check_positive_int",
    "encoder_for",
]


class ModelFacts(Protocol):
    """What a task's steps read of a loaded model (:class:`bertonnx.BertOnnx` has all of it)."""

    @property
    def manifest(self) -> Manifest: ...

    @property
    def tokenizer(self) -> TextTokenizer: ...

    @property
    def windowing(self) -> Windowing: ...

    @property
    def token_strings(self) -> TokenStrings: ...

    @property
    def max_length(self) -> int: ...

    @property
    def hidden_size(self) -> int: ...

    @property
    def labels(self) -> list[str]: ...

    @property
    def output_names(self) -> tuple[str, ...]: ...

    @property
    def mask_token_id(self) -> int | None: ...

    def run_mlm_head(self, hidden_states: np.ndarray) -> np.ndarray: ...

    def require(self, task: str) -> None: ...


@dataclass
class Prepared:
    """One chunk of inputs after ``prepare``.

    Attributes:
        units: what the engine runs, in order (encodings or windows).
        counts: units per kept input (``None``: one each).
        state: what ``finish`` needs (texts, windows, contexts ...), the task's own.
        kept: the caller's indices of the inputs whose units these are (in order).
        rejected: with ``strict=False``, the caller's index of each refused input -> why (a typed error).
        lengths: tokens of each kept input's whole text when its units are windows (``None``: one unit each).
    """

    units: list[TokenSequence]
    counts: list[int] | None = None
    state: Any = None
    kept: list[int] = field(default_factory=list)
    rejected: dict[int, Exception] = field(default_factory=dict)
    lengths: list[int] | None = None

    def input_tokens(self) -> list[int]:
        """Tokens of each kept input (special tokens included): its unit's, or its whole text's."""
        if self.lengths is not None:
            return list(self.lengths)
        return [len(unit.ids) for unit in self.units]

    @property
    def tokens(self) -> int:
        """Tokens of every unit."""
        return sum(len(unit.ids) for unit in self.units)

    def grouped(self, answers: Sequence[Any]) -> list[list[Any]]:
        """``answers`` (one per unit, in order) grouped per kept input."""
        if self.counts is None:
            return [[answer] for answer in answers]
        groups, start = [], 0
        for count in self.counts:
            groups.append(list(answers[start : start + count]))
            start += count
        return groups


class Task(Protocol):
    """The four steps (module docstring); the driver and the server's engine need only these."""

    @property
    def name(self) -> str: ...

    @property
    def outputs(self) -> tuple[str, ...]: ...

    @property
    def window_tokens(self) -> int: ...

    def prepare(
        self, first: Sequence[str], second: Sequence[str] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared: ...

    def postprocess(self, outputs: Mapping[str, np.ndarray], batch: Batch, rows: np.ndarray | None = None) -> Any: ...

    def finish(self, prepared: Prepared, answers: Sequence[Any]) -> list[Any]: ...


def check_positive_int(value: object, name: str) -> int:
    """``value`` when it is an int >= 1.

    Raises:
        TypeError: not an int (a bool is not taken).
        ValueError: below 1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


def check_bool(value: object, name: str) -> bool:
    """``value`` when it is a bool.

    Raises:
        TypeError: not a bool.
    """
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class Encoder:
    """How a task whose unit is one input tokenizes it, as the model is fed (texts, or pairs with ``second``).

    Attributes:
        tokenizer: the export's tokenizer.
        truncation: cut inputs longer than ``max_length`` (longest sequence first for pairs) instead of refusing.
        max_length: tokens per input at most, special tokens included.
    """

    tokenizer: TextTokenizer
    truncation: bool = False
    max_length: int = 512

    def prepare(
        self, first: Sequence[str], second: Sequence[str] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Tokenize a chunk of inputs.

        Args:
            first: texts (first sequences).
            second: second sequences, one per text, or ``None``.
            first_index: the caller's index of ``first[0]`` (errors name the input).
            strict: raise on the first input over ``max_length``; else record it in ``rejected`` and go on.

        Raises:
            InputTooLongError: an input is over ``max_length`` without truncation (``strict``).
            ValueError: ``first`` and ``second`` differ in length.
        """
        if strict or self.truncation:
            encodings = self.tokenizer.encode(
                first, second, truncation=self.truncation, max_length=self.max_length, first_index=first_index
            )
            return Prepared(list(encodings), kept=list(range(first_index, first_index + len(first))))
        whole = self.tokenizer.encode(first, second, truncation=False, max_length=None, first_index=first_index)
        prepared = Prepared([])
        for offset, encoding in enumerate(whole):
            if len(encoding) > self.max_length:
                index = first_index + offset
                prepared.rejected[index] = InputTooLongError(index, len(encoding), self.max_length)
            else:
                prepared.units.append(encoding)
                prepared.kept.append(first_index + offset)
        return prepared


class PerInput:
    """The steps of a task whose unit is one input: ``prepare`` is its :class:`Encoder`'s, ``finish`` gives
    each input its unit's answer. A subclass is a frozen dataclass with an ``encoder`` field."""

    encoder: Encoder | None
    #: Units gathered before they are sorted by length and cut into batches (:mod:`bertonnx.batching`).
    window_tokens = SORT_WINDOW_TOKENS

    def prepare(
        self, first: Sequence[str], second: Sequence[str] | None = None, first_index: int = 0, *, strict: bool = True
    ) -> Prepared:
        """Tokenize a chunk of inputs (see :meth:`Encoder.prepare`).

        Raises:
            ValueError: the task was built without an encoder (it can only be run on units), or as
                :meth:`Encoder.prepare`.
        """
        if self.encoder is None:
            raise ValueError(
                f"{type(self).__name__} was built without a tokenizer; build it with bertonnx.tasks.make_task"
            )
        return self.encoder.prepare(first, second, first_index, strict=strict)

    def finish(self, prepared: Prepared, answers: Sequence[Any]) -> list[Any]:
        """One answer per input: its unit's."""
        return list(answers)


def fed_length(model: ModelFacts) -> int | None:
    """The tokens per input the export's own pipeline feeds: a sentence-transformers export's
    ``max_seq_length``; ``None`` (the positions) for any other."""
    pipeline = getattr(model, "sentence", None)
    return None if pipeline is None else int(pipeline.max_seq_length)


def encoder_for(model: ModelFacts, truncation: object = False, max_length: object = None) -> Encoder:
    """The :class:`Encoder` of ``model`` with the caller's options, checked.

    Args:
        truncation: cut long inputs instead of refusing them.
        max_length: tokens per input, from 2 to the model's positions (default: the model's).

    Raises:
        TypeError: an option has the wrong type.
        ValueError: ``max_length`` out of range.
    """
    check_bool(truncation, "truncation")
    limit = model.max_length if max_length is None else check_positive_int(max_length, "max_length")
    if not 2 <= limit <= model.max_length:
        raise ValueError(f"max_length must be between 2 and the model's {model.max_length} positions, got {limit}")
    return Encoder(model.tokenizer, bool(truncation), limit)
