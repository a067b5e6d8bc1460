"""``BertOnnx``: load an exported directory once, then run texts and pairs through it.

The constructor does all the loading and checking (manifest, file sizes and hashes, graph inputs and
outputs, tokenizer); the methods only tokenize, batch, run and post-process. One object may be called
from many threads: onnxruntime sessions are thread-safe, the OpenVINO session lends each call its own
infer request, and no call mutates shared state.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator, Mapping, MappingView, Sequence, Set
from pathlib import Path
from typing import TYPE_CHECKING, overload

import numpy as np

from .batching import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    SORT_WINDOW_TOKENS,
    TOKENIZE_CHUNK_TEXTS,
    Batch,
    BatchLimits,
    iter_chunks,
    make_batch,
    plan_batches,
)
from .errors import ModelDirectoryError, RandomWeightsWarning
from .manifest import (
    INPUT_NAMES,
    ONNXRUNTIME_BACKEND,
    OUTPUT_NAMES,
    TOKENIZER_FILE,
    VARIANT_BACKENDS,
    VARIANT_FILES,
    Manifest,
    read_manifest,
)
from .options import RuntimeOptions
from .outputs import POOLING_MODES, BertOutput, Tokenized, is_next_probability, pool, pooling_outputs
from .session import open_variant_session, release_freed_memory, run_options
from .tokenizer import TextTokenizer

if TYPE_CHECKING:
    import onnxruntime as ort
    from tokenizers import Encoding

    from .openvino_session import OpenVinoSession

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_BATCH_TOKENS",
    "DEFAULT_VARIANT",
    "POOLING_MODES",
    "VERIFY_MODES",
    "BertOnnx",
]

DEFAULT_VARIANT = "fp32"
#: Inputs per ``session.run`` at most; the token budget (``max_batch_tokens``) usually binds first.
DEFAULT_BATCH_SIZE = DEFAULT_MAX_BATCH_SIZE
#: ``size``: compare file sizes with the manifest (instant); ``sha256``: also hash the model file (a large
#: share of a cold start, hence not the default: benchmarks/DEFAULTS.md, "Hashing the model on load").
VERIFY_MODES = ("size", "sha256")


def _as_texts(value: object, name: str) -> Iterable[str]:
    """A single string becomes one input; lists, tuples, arrays of str and other ordered iterables
    (generators too) pass through, checked lazily. Sets (no order for the results to follow), mappings and
    their views (a dict would be read as its keys) are refused."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (Mapping, MappingView)):
        raise TypeError(
            f"{name} is a {type(value).__name__}: a mapping or a view of one is not taken as texts (a dict "
            "would be read as its keys); pass a list of str, e.g. list(d.values())"
        )
    if isinstance(value, Set):
        raise TypeError(
            f"{name} is a {type(value).__name__}, which has no order for the results to follow; pass a list "
            "of str, e.g. sorted(...)"
        )
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a str or an iterable of str, got {type(value).__name__}")
    return value


def _checked(items: Iterable[object], name: str) -> Iterator[str]:
    for index, item in enumerate(items):
        if not isinstance(item, str):
            got = "None" if item is None else type(item).__name__
            raise TypeError(f"{name}[{index}] is {got}; every input must be a str")
        yield item


def _check_positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


class BertOnnx:
    """BERT encoder, pooler and next-sentence head from a ``bertonnx export`` directory, on onnxruntime
    (or on OpenVINO for the ``bf16`` variant).

    Example:
        >>> model = BertOnnx("models/bert-base-uncased")
        >>> model.nsp("the weather is nice", "i agree with you")
    """

    def __init__(
        self,
        model_dir: str | Path,
        variant: str = DEFAULT_VARIANT,
        *,
        threads: int | None = None,
        options: RuntimeOptions | None = None,
        verify: str = "size",
    ) -> None:
        """Load the model directory.

        Args:
            model_dir: directory written by ``bertonnx export``.
            variant: one of the variants the directory holds: ``fp32`` (exact), ``optimized`` (fused),
                ``int8`` (fastest, lossy) or ``bf16`` (the accurate fast path; needs OpenVINO).
            threads: intra-op threads (default: physical cores); overrides ``options.threads``.
            options: onnxruntime settings (spinning, arena, inter-op threads ...).
            verify: ``size`` (default) or ``sha256`` (also hash the model's files against the manifest).
                Small files (tokenizer, config) are always hashed.

        Raises:
            TypeError: an argument has the wrong type.
            ValueError: unknown ``variant`` or ``verify``.
            VariantMissingError: the directory does not hold ``variant`` (a ``ValueError``).
            ImportError: ``bf16`` was asked for and OpenVINO is not installed.
            ModelDirectoryError: the directory is missing, not a bertonnx export, or a file is missing or
                corrupt.

        Warns:
            RandomWeightsWarning: the export holds seeded random weights or random heads (its manifest
                says so), so its outputs are not a trained model's.
        """
        if not isinstance(variant, str):
            raise TypeError(f"variant must be a str, got {type(variant).__name__}")
        if verify not in VERIFY_MODES:
            raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
        if options is not None and not isinstance(options, RuntimeOptions):
            raise TypeError(f"options must be a bertonnx.RuntimeOptions, got {type(options).__name__}")
        options = options or RuntimeOptions()
        if threads is not None:
            options = RuntimeOptions(**{**options.__dict__, "threads": threads})
        manifest = read_manifest(model_dir)
        if variant not in VARIANT_FILES:
            raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANT_FILES)}")
        manifest.require_variant(variant)
        model_path, *_ = [
            manifest.record(name).verify(manifest.directory, check_hash=verify == "sha256")
            for name in manifest.variant_files(variant)
        ]
        tokenizer_path = manifest.record(TOKENIZER_FILE).verify(manifest.directory, check_hash=True)

        self.manifest: Manifest = manifest
        self.variant = variant
        self.options = options
        self.model_path = model_path
        self.hidden_size = manifest.hidden_size
        self.max_length = manifest.max_position_embeddings
        self.tokenizer = TextTokenizer(tokenizer_path, self.max_length)
        #: The engine running the graph: ``onnxruntime``, or ``openvino`` for the ``bf16`` variant.
        self.backend: str = manifest.data["variants"][variant].get("backend", VARIANT_BACKENDS[variant])
        if self.backend != VARIANT_BACKENDS[variant]:
            raise ModelDirectoryError(
                f"{manifest.directory}: variant {variant!r} names backend {self.backend!r}, but this bertonnx "
                f"runs it on {VARIANT_BACKENDS[variant]}. Upgrade bertonnx or re-export."
            )
        self.session: ort.InferenceSession | OpenVinoSession = open_variant_session(model_path, variant, options)
        #: The precision of the matrix products: ``f32``, ``int8``, or ``bf16`` (which needs a CPU with
        #: AVX512-BF16 or AMX; OpenVINO computes in ``f32`` elsewhere, and this then says ``f32``).
        self.precision: str = getattr(self.session, "inference_precision", "int8" if variant == "int8" else "f32")
        self._run_options = run_options(options) if self.backend == ONNXRUNTIME_BACKEND else None
        self._input_names = [i.name for i in self.session.get_inputs()]
        output_names = [o.name for o in self.session.get_outputs()]
        if "input_ids" not in self._input_names or set(self._input_names) - set(INPUT_NAMES):
            raise ModelDirectoryError(f"{model_path} takes inputs {self._input_names}; expected {list(INPUT_NAMES)}")
        if set(OUTPUT_NAMES) - set(output_names):
            raise ModelDirectoryError(f"{model_path} gives outputs {output_names}; expected {list(OUTPUT_NAMES)}")
        if manifest.random_weights:
            note = manifest.weights.get("note") or "some of its weights were seeded, not trained"
            warnings.warn(
                f"{manifest.directory} holds random weights: {note} Export pretrained weights for real use; "
                "warnings.simplefilter('ignore', bertonnx.RandomWeightsWarning) silences this.",
                RandomWeightsWarning,
                stacklevel=2,
            )

    def __repr__(self) -> str:
        weights = "RANDOM weights" if self.manifest.random_weights else "pretrained weights"
        return f"BertOnnx({str(self.manifest.directory)!r}, variant={self.variant!r}, {weights})"

    # -- inputs ---------------------------------------------------------------------------------------

    def _check_call(self, batch_size: object, truncation: object, max_length: object) -> None:
        _check_positive_int(batch_size, "batch_size")
        if not isinstance(truncation, bool):
            raise TypeError(f"truncation must be a bool, got {type(truncation).__name__}")
        max_length = _check_positive_int(max_length, "max_length")
        if not 2 <= max_length <= self.max_length:
            raise ValueError(
                f"max_length must be between 2 and the model's {self.max_length} positions, got {max_length}"
            )

    def _batches(
        self,
        texts: object,
        text_pairs: object,
        batch_size: int,
        truncation: bool,
        max_length: int,
        max_batch_tokens: int,
    ) -> Iterator[Batch]:
        self._check_call(batch_size, truncation, max_length)
        limits = BatchLimits(max_batch_tokens=max_batch_tokens, max_batch_size=batch_size)
        first = _checked(_as_texts(texts, "texts"), "texts")
        second = None if text_pairs is None else _checked(_as_texts(text_pairs, "text_pairs"), "text_pairs")
        window: list[Encoding] = []
        window_start = window_tokens = 0
        for start, chunk, chunk_pairs in iter_chunks(first, second, TOKENIZE_CHUNK_TEXTS):
            encodings = self.tokenizer.encode(
                chunk, chunk_pairs, truncation=truncation, max_length=max_length, first_index=start
            )
            window.extend(encodings)
            window_tokens += sum(len(e.ids) for e in encodings)
            if window_tokens >= SORT_WINDOW_TOKENS:
                yield from self._window_batches(window, window_start, limits)
                window_start, window, window_tokens = start + len(chunk), [], 0
        yield from self._window_batches(window, window_start, limits)

    @staticmethod
    def _window_batches(window: list[Encoding], first_index: int, limits: BatchLimits) -> Iterator[Batch]:
        lengths = np.fromiter((len(e.ids) for e in window), dtype=np.int64, count=len(window))
        for rows in plan_batches(lengths, limits):
            yield make_batch([window[i] for i in rows], rows + first_index)

    def encode(
        self,
        texts: str | Iterable[str],
        text_pairs: str | Iterable[str] | None = None,
        *,
        truncation: bool = False,
        max_length: int = 512,
    ) -> list[Encoding]:
        """Tokenize inputs exactly as the model is fed, without padding, in the caller's order.

        With :func:`bertonnx.batching.make_batch` and :meth:`run_batch` this is the step-by-step form of a
        call, for callers that batch inputs themselves (the server's scheduler batches across requests).

        Args:
            texts: a string or an iterable of strings.
            text_pairs: second sentences, one per text (segment id 1), or ``None``.
            truncation: cut inputs longer than ``max_length`` (longest sequence first for pairs).
            max_length: token limit including ``[CLS]``/``[SEP]``, at most the model's positions (512).

        Returns:
            One ``tokenizers.Encoding`` per input (``.ids``, ``.type_ids``, ``.tokens``).

        Raises:
            TypeError: an input is not a string, the inputs are a set, mapping or dict view (pass a list),
                or an option has the wrong type.
            ValueError: texts and pairs differ in length, an input is too long without truncation (the
                message names its index and token count), or ``max_length`` is out of range.
        """
        self._check_call(1, truncation, max_length)
        first = _checked(_as_texts(texts, "texts"), "texts")
        second = None if text_pairs is None else _checked(_as_texts(text_pairs, "text_pairs"), "text_pairs")
        encodings: list[Encoding] = []
        for start, chunk, chunk_pairs in iter_chunks(first, second, TOKENIZE_CHUNK_TEXTS):
            encodings += self.tokenizer.encode(
                chunk, chunk_pairs, truncation=truncation, max_length=max_length, first_index=start
            )
        return encodings

    def run_batch(self, batch: Batch, outputs: Sequence[str] = OUTPUT_NAMES) -> dict[str, np.ndarray]:
        """Run one padded batch and return the requested graph outputs (rows in the batch's order).

        Args:
            batch: from :func:`bertonnx.batching.make_batch`.
            outputs: names among ``last_hidden_state`` ``[b, t, hidden]``, ``pooler_output`` ``[b, hidden]``
                and ``nsp_logits`` ``[b, 2]`` (all float32). Asking for fewer saves copying the rest.

        Raises:
            ValueError: an unknown output name.
        """
        unknown = [name for name in outputs if name not in OUTPUT_NAMES]
        if unknown:
            raise ValueError(f"unknown outputs {unknown}; expected names among {', '.join(OUTPUT_NAMES)}")
        feeds = {name: getattr(batch, name) for name in self._input_names}
        values = self.session.run(list(outputs), feeds, self._run_options)
        if self.options.release_memory:
            release_freed_memory()
        return dict(zip(outputs, values, strict=True))

    # -- calls ----------------------------------------------------------------------------------------

    def __call__(
        self,
        texts: str | Iterable[str],
        text_pairs: str | Iterable[str] | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        truncation: bool = False,
        max_length: int = 512,
        hidden_states: bool = True,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> BertOutput:
        """Run texts (and pairs) through the model; results come back in the caller's order.

        Inputs are sorted by token length in windows and cut into batches of at most ``max_batch_tokens``
        padded tokens (longest × count) and ``batch_size`` inputs, each padded to its own longest input.

        Args:
            texts: a string, or a list/iterable of strings (a generator is read window by window).
            text_pairs: second sentences, one per text (segment id 1), or ``None``.
            batch_size: inputs per ``session.run`` at most.
            truncation: cut inputs longer than ``max_length`` (longest sequence first for pairs) instead
                of raising.
            max_length: token limit including ``[CLS]``/``[SEP]``, at most the model's positions (512).
            hidden_states: keep ``last_hidden_state``; pass ``False`` for large inputs when only pooled
                outputs are needed (memory then stays bounded).
            max_batch_tokens: padded tokens per ``session.run`` at most (an input longer than this runs alone).

        Returns:
            A :class:`BertOutput`; empty input gives arrays with zero rows.

        Raises:
            TypeError: an input is not a string (e.g. ``None``), the inputs are a set, mapping or dict view
                (pass a list), or an option has the wrong type.
            ValueError: texts and pairs differ in length, an input is too long without truncation, or an
                option is out of range.
        """
        names = OUTPUT_NAMES if hidden_states else tuple(n for n in OUTPUT_NAMES if n != "last_hidden_state")
        lengths: list[np.ndarray] = []
        indices: list[np.ndarray] = []
        outputs: dict[str, list[np.ndarray]] = {name: [] for name in OUTPUT_NAMES}
        for batch in self._batches(texts, text_pairs, batch_size, truncation, max_length, max_batch_tokens):
            result = self.run_batch(batch, names)
            indices.append(batch.indices)
            lengths.append(batch.lengths)
            for name in names:
                outputs[name].append(result[name])
        return self._assemble(indices, lengths, outputs, hidden_states)

    def _assemble(
        self,
        indices: list[np.ndarray],
        lengths: list[np.ndarray],
        outputs: dict[str, list[np.ndarray]],
        hidden_states: bool,
    ) -> BertOutput:
        order = np.concatenate(indices) if indices else np.zeros(0, dtype=np.int64)
        n = order.shape[0]
        all_lengths = np.zeros(n, dtype=np.int64)
        all_lengths[order] = np.concatenate(lengths) if lengths else all_lengths
        pooled = {}
        for name, width in (("pooler_output", self.hidden_size), ("nsp_logits", 2)):
            array = np.zeros((n, width), dtype=np.float32)
            if n:
                array[order] = np.concatenate(outputs[name])
            pooled[name] = array
        hidden = None
        if hidden_states:
            longest = int(all_lengths.max()) if n else 0
            hidden = np.zeros((n, longest, self.hidden_size), dtype=np.float32)
            for batch_indices, batch_lengths, states in zip(
                indices, lengths, outputs["last_hidden_state"], strict=True
            ):
                for row, (index, length) in enumerate(zip(batch_indices, batch_lengths, strict=True)):
                    hidden[index, :length] = states[row, :length]
        return BertOutput(hidden, pooled["pooler_output"], pooled["nsp_logits"], all_lengths)

    @overload
    def nsp(  # type: ignore[overload-overlap]  # str is also Iterable[str]; this first overload wins
        self, text_a: str, text_b: str, *, truncation: bool = ..., batch_size: int = ...
    ) -> float: ...

    @overload
    def nsp(
        self, text_a: Iterable[str], text_b: Iterable[str], *, truncation: bool = ..., batch_size: int = ...
    ) -> np.ndarray: ...

    def nsp(
        self,
        text_a: str | Iterable[str],
        text_b: str | Iterable[str],
        *,
        truncation: bool = False,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> float | np.ndarray:
        """Probability that ``text_b`` follows ``text_a`` (next-sentence prediction).

        Args:
            text_a: first sentence, or a list of them.
            text_b: second sentence, or a list of the same length.
            truncation: cut pairs longer than the model's limit instead of raising.
            batch_size: pairs per ``session.run`` at most.

        Returns:
            A float for two strings, else a ``[n]`` float32 array.

        Raises:
            TypeError: one argument is a string and the other a list, an argument is a set, mapping or dict
                view (pass a list), or an item is not a string.
            ValueError: the lists differ in length, or a pair is too long without truncation.
        """
        _as_texts(text_a, "text_a")
        _as_texts(text_b, "text_b")
        single = isinstance(text_a, str)
        if single != isinstance(text_b, str):
            raise TypeError("text_a and text_b must both be strings or both be lists of strings")
        out = self(
            text_a,
            text_b,
            batch_size=batch_size,
            truncation=truncation,
            max_length=self.max_length,
            hidden_states=False,
        )
        probability = is_next_probability(out.nsp_logits)
        return float(probability[0]) if single else probability

    def embed(
        self,
        texts: str | Iterable[str],
        pooling: str = "pooler",
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        truncation: bool = False,
        max_length: int = 512,
        normalize: bool = False,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ) -> np.ndarray:
        """One vector per text, ``[n, hidden]`` float32, with memory bounded for any number of texts.

        Args:
            texts: a string or an iterable of strings.
            pooling: ``pooler`` (trained pooler), ``cls`` ([CLS] state) or ``mean`` (mean of attended
                tokens, including [CLS] and [SEP], as sentence-transformers does).
            batch_size: texts per ``session.run`` at most.
            truncation: cut texts longer than ``max_length`` instead of raising.
            max_length: token limit including special tokens.
            normalize: scale each vector to unit L2 norm.
            max_batch_tokens: padded tokens per ``session.run`` at most (an input longer than this runs alone).

        Raises:
            ValueError: unknown ``pooling``; a text too long without truncation.
            TypeError: a text is not a string, or ``texts`` is a set, mapping or dict view (pass a list).
        """
        names = pooling_outputs(pooling)
        rows: list[np.ndarray] = []
        indices: list[np.ndarray] = []
        for batch in self._batches(texts, None, batch_size, truncation, max_length, max_batch_tokens):
            rows.append(pool(self.run_batch(batch, names), batch.attention_mask, pooling))
            indices.append(batch.indices)
        out = np.zeros((sum(len(i) for i in indices), self.hidden_size), dtype=np.float32)
        if indices:
            out[np.concatenate(indices)] = np.concatenate(rows)
        if normalize and len(out):
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), np.finfo(np.float32).tiny)
        return out

    def tokenize(
        self, text: str, pair: str | None = None, *, truncation: bool = False, max_length: int = 512
    ) -> Tokenized:
        """Tokens, ids, segment ids and mask of one input, exactly as the model is fed.

        Raises:
            TypeError: ``text`` or ``pair`` is not a string.
            ValueError: the input is longer than ``max_length`` and ``truncation`` is off.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if pair is not None and not isinstance(pair, str):
            raise TypeError(f"pair must be a str or None, got {type(pair).__name__}")
        self._check_call(1, truncation, max_length)
        (encoding,) = self.tokenizer.encode(
            [text], None if pair is None else [pair], truncation=truncation, max_length=max_length
        )
        return Tokenized(list(encoding.tokens), list(encoding.ids), list(encoding.type_ids), [1] * len(encoding.ids))
