"""``BertOnnx``: load an exported directory once, then run texts and pairs through it.

The constructor does all the loading and checking (manifest, file sizes and hashes, graph inputs and
outputs, tokenizer); the methods only tokenize, batch, run and post-process. One object may be called
from many threads: onnxruntime sessions are thread-safe, the OpenVINO session lends each call its own
infer request, and no call mutates shared state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from . import driver
from .batching import (
    DEFAULT_MAX_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    TOKENIZE_CHUNK_TEXTS,
    Batch,
    BatchLimits,
    iter_chunks,
)
from .errors import HeadMissingError
from .head_methods import HeadMethods
from .inputs import as_texts, checked_texts
from .loading import VERIFY_MODES, clean_up_spaces, open_graph, open_mlm_head, runtime_options, warn_if_random
from .manifest import (
    ONNXRUNTIME_BACKEND,
    OUTPUT_NAMES,
    TOKENIZER_FILE,
    Manifest,
    read_manifest,
)
from .options import RuntimeOptions
from .outputs import BertOutput, Tokenized
from .sentence import SentencePipeline, read_pipeline
from .session import release_freed_memory, run_options
from .tasks import POOLING_MODES, Graph, make_task
from .tasks.base import check_positive_int, encoder_for, fed_length
from .tasks.embed_sparse import SparseVector
from .tasks.graph import assemble
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


class BertOnnx(HeadMethods):
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
        options = runtime_options(variant, verify, options, threads)
        manifest = read_manifest(model_dir)
        graph = open_graph(manifest, variant, options, verify=verify)
        self.manifest: Manifest = manifest
        self.variant = variant
        self.options = options
        self.model_path = graph.path
        self.hidden_size = manifest.hidden_size
        self.max_length = manifest.max_position_embeddings
        tokenizer_path = manifest.record(TOKENIZER_FILE).verify(manifest.directory, check_hash=True)
        self.tokenizer = TextTokenizer(tokenizer_path, self.max_length, clean_up_spaces=clean_up_spaces(manifest))
        #: The engine running the graph: ``onnxruntime``, or ``openvino`` for the ``bf16`` variant.
        self.backend: str = graph.backend
        self.session: ort.InferenceSession | OpenVinoSession = graph.session
        #: The precision of the matrix products: ``f32``, ``int8``, or ``bf16`` (which needs a CPU with
        #: AVX512-BF16 or AMX; OpenVINO computes in ``f32`` elsewhere, and this then says ``f32``).
        self.precision: str = graph.precision
        self._run_options = run_options(options) if self.backend == ONNXRUNTIME_BACKEND else None
        self._input_names = list(graph.input_names)
        self._output_names = graph.output_names
        #: The outputs of ``OUTPUT_NAMES`` this export's graph gives (a ``BertModel`` export has no NSP head).
        self._outputs = tuple(name for name in OUTPUT_NAMES if name in graph.output_names)
        #: Runtime tasks this export offers (``graph``, the raw outputs, is always offered too).
        self.tasks: tuple[str, ...] = manifest.tasks
        head = open_mlm_head(manifest, self.tokenizer, options, verify=verify)
        self._mlm_session = head.session if head is not None else None
        self._mlm_names = head.names if head is not None else ("", "")
        #: The id of the token ``fill_mask`` predicts, when the export has an MLM head (else ``None``).
        self.mask_token_id: int | None = head.mask_token_id if head is not None else None
        warn_if_random(manifest)

    @cached_property
    def sentence(self) -> SentencePipeline | None:
        """The export's sentence-transformers pipeline (``sentence_transformers`` manifest block), or ``None``
        (a plain transformers export, or one written before the block existed). Dense weights are read once,
        each checked against the manifest's sha256."""
        manifest = self.manifest

        def load(name: str) -> np.ndarray:
            path = manifest.record(name).verify(manifest.directory, check_hash=True)
            array: np.ndarray = np.load(path, allow_pickle=False)
            return array

        return read_pipeline(manifest.data, manifest.directory, load)

    @property
    def output_names(self) -> tuple[str, ...]:
        """The graph outputs of the loaded variant, in the graph's order."""
        return self._output_names

    def __repr__(self) -> str:
        weights = "RANDOM weights" if self.manifest.random_weights else "pretrained weights"
        return f"BertOnnx({str(self.manifest.directory)!r}, variant={self.variant!r}, {weights})"

    # -- running the graph ------------------------------------------------------------------------------

    def encode(
        self,
        texts: str | Iterable[str],
        text_pairs: str | Iterable[str] | None = None,
        *,
        truncation: bool = False,
        max_length: int | None = None,
    ) -> list[Encoding]:
        """Tokenize inputs exactly as the model is fed, without padding, in the caller's order.

        With :func:`bertonnx.batching.make_batch` and :meth:`run_batch` this is the step-by-step form of a
        call, for callers that batch inputs themselves (the server's scheduler batches across requests).

        Args:
            texts: a string or an iterable of strings.
            text_pairs: second sentences, one per text (segment id 1), or ``None``.
            truncation: cut inputs longer than ``max_length`` (longest sequence first for pairs).
            max_length: token limit including ``[CLS]``/``[SEP]``, at most the model's positions (the default).

        Returns:
            One ``tokenizers.Encoding`` per input (``.ids``, ``.type_ids``, ``.tokens``).

        Raises:
            TypeError: an input is not a string, the inputs are a set, mapping or dict view (pass a list),
                or an option has the wrong type.
            ValueError: texts and pairs differ in length, an input is too long without truncation (the
                message names its index and token count), or ``max_length`` is out of range.
        """
        encoder = encoder_for(self, truncation, max_length)
        encodings: list[Encoding] = []
        for start, chunk, chunk_pairs in self._chunks(texts, text_pairs):
            encodings += encoder.prepare(chunk, chunk_pairs, start).units
        return encodings

    def run_batch(self, batch: Batch, outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Run one padded batch and return the requested graph outputs (rows in the batch's order).

        Args:
            batch: from :func:`bertonnx.batching.make_batch`.
            outputs: names among the graph's outputs (:attr:`output_names`; shapes in
                :data:`bertonnx.table.OUTPUTS`, all float32); default: those of ``OUTPUT_NAMES`` the graph
                gives. Asking for fewer saves copying the rest.

        Raises:
            ValueError: an unknown output name.
        """
        outputs = self._outputs if outputs is None else outputs
        unknown = [name for name in outputs if name not in self._output_names]
        if unknown:
            raise ValueError(f"unknown outputs {unknown}; expected names among {', '.join(self._output_names)}")
        feeds = {name: getattr(batch, name) for name in self._input_names}
        values = self.session.run(list(outputs), feeds, self._run_options)
        if self.options.release_memory:
            release_freed_memory()
        return dict(zip(outputs, values, strict=True))

    def run_mlm_head(self, hidden_states: np.ndarray) -> np.ndarray:
        """``[m, hidden]`` float32 hidden states at mask positions -> ``[m, vocab]`` float32 logits.

        Raises:
            HeadMissingError: the export has no MLM head.
        """
        if self._mlm_session is None:
            raise HeadMissingError.for_task("fill_mask", self.manifest.architecture, self.tasks)
        name_in, name_out = self._mlm_names
        (logits,) = self._mlm_session.run([name_out], {name_in: hidden_states}, self._run_options)
        result: np.ndarray = logits
        return result

    def task(self, name: str, **options: Any) -> Any:
        """The task ``name`` on this export, with ``options`` checked (:func:`bertonnx.tasks.make_task`); run it
        with :meth:`run_task`, or hand its units to a scheduler of your own.

        Raises:
            HeadMissingError: the export lacks the task's head.
            TypeError, ValueError: an unknown task or a bad option.
        """
        return make_task(self, name, **options)

    def run_task(
        self,
        task: Any,
        first: object,
        second: object = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        name: str = "texts",
    ) -> list[Any]:
        """Every input's answer from ``task``'s steps, in the caller's order (:func:`bertonnx.driver.answers`).

        Args:
            task: from :meth:`task`.
            first: the inputs (a string or an iterable of strings, read 512 at a time).
            second: per input its second part (a pair's second text, a context ...), or ``None``.
            batch_size: units per ``session.run`` at most.
            max_batch_tokens: padded tokens per ``session.run`` at most.
            name: what ``first`` is called in error messages.

        Raises:
            TypeError, ValueError: as the task's ``prepare`` and the batch limits.
        """
        check_positive_int(batch_size, "batch_size")
        limits = BatchLimits(max_batch_tokens=max_batch_tokens, max_batch_size=batch_size)
        return list(driver.answers(self.run_batch, task, self._chunks(first, second, name), limits))

    def _chunks(
        self, first: object, second: object, name: str = "texts"
    ) -> Iterator[tuple[int, list[str], list[Any] | None]]:
        texts = checked_texts(as_texts(first, name), name)
        pairs = None if second is None else checked_texts(as_texts(second, "text_pairs"), "text_pairs")
        return iter_chunks(texts, pairs, TOKENIZE_CHUNK_TEXTS)

    # -- calls ----------------------------------------------------------------------------------------

    def __call__(
        self,
        texts: str | Iterable[str],
        text_pairs: str | Iterable[str] | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        truncation: bool = False,
        max_length: int | None = None,
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
            max_length: token limit including ``[CLS]``/``[SEP]``, at most the model's positions (the default).
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
        check_positive_int(batch_size, "batch_size")
        encoder = encoder_for(self, truncation, max_length)
        limits = BatchLimits(max_batch_tokens=max_batch_tokens, max_batch_size=batch_size)
        names = tuple(n for n in self._outputs if hidden_states or n != "last_hidden_state")

        def encode(chunk: list[str], pairs: list[str] | None, start: int) -> list[Encoding]:
            return encoder.prepare(chunk, pairs, start).units

        first = checked_texts(as_texts(texts, "texts"), "texts")
        second = None if text_pairs is None else checked_texts(as_texts(text_pairs, "text_pairs"), "text_pairs")
        batches = driver.stream(encode, first, second, limits)
        parts = list(driver.run(self.run_batch, Graph(names, whole_batch=True), batches))
        widths = {"last_hidden_state": self.hidden_size, "pooler_output": self.hidden_size, "nsp_logits": 2}
        outputs, lengths = assemble(parts, names, widths)
        missing = np.zeros((len(lengths), 0), dtype=np.float32)  # the export has no such head: no made-up values
        return BertOutput(
            outputs.get("last_hidden_state"),
            outputs.get("pooler_output", missing),
            outputs.get("nsp_logits", missing),
            lengths,
        )

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
            HeadMissingError: the export has no NSP head.
            TypeError: one argument is a string and the other a list, an argument is a set, mapping or dict
                view (pass a list), or an item is not a string.
            ValueError: the lists differ in length, or a pair is too long without truncation.
        """
        task = self.task("nsp", truncation=truncation)
        as_texts(text_a, "text_a")
        as_texts(text_b, "text_b")
        single = isinstance(text_a, str)
        if single != isinstance(text_b, str):
            raise TypeError("text_a and text_b must both be strings or both be lists of strings")
        found = self.run_task(task, text_a, text_b, batch_size=batch_size)
        probability = np.asarray(found, dtype=np.float32).reshape(len(found))
        return float(probability[0]) if single else probability

    def embed(
        self,
        texts: str | Iterable[str],
        pooling: str | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        truncation: bool | None = None,
        max_length: int | None = None,
        normalize: bool | None = None,
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
        prompt_name: str | None = None,
        prompt: str | None = None,
        dimensions: int | None = None,
    ) -> np.ndarray:
        """One vector per text, ``[n, width]`` float32, with memory bounded for any number of texts.

        An export of a sentence-transformers folder embeds as the folder says by default (its pooling, dense
        layers, Normalize, default prompt, ``truncate_dim``; texts cut to its ``max_seq_length``): the result
        is ``SentenceTransformer(folder).encode(texts)``. Any other export pools with ``pooler`` and refuses
        texts over the positions unless ``truncation``.

        Args:
            texts: a string or an iterable of strings.
            pooling: ``pipeline`` (the export's sentence-transformers pipeline), ``pooler`` (trained pooler),
                ``cls`` ([CLS] state) or ``mean`` (mean of attended tokens, including [CLS] and [SEP]);
                ``None``: the export's own (``pipeline`` when it has one, else ``pooler``).
            batch_size: texts per ``session.run`` at most.
            truncation: cut texts longer than ``max_length`` instead of raising (default: on with the
                pipeline, as ``encode``, else off).
            max_length: token limit including special tokens (default: the pipeline's ``max_seq_length``,
                else the model's positions).
            normalize: scale each vector to unit L2 norm, after the cut to ``dimensions``.
            max_batch_tokens: padded tokens per ``session.run`` at most (an input longer than this runs alone).
            prompt_name: one of the export's prompts (default: its ``default_prompt_name``).
            prompt: a prompt text prepended to every text (instead of ``prompt_name``).
            dimensions: keep each vector's first ``dimensions`` values (Matryoshka; default: the export's
                ``truncate_dim``, else all).

        Raises:
            ValueError: unknown ``pooling`` or ``prompt_name``; a text too long without truncation;
                ``dimensions`` not between 1 and the width.
            TypeError: a text is not a string, or ``texts`` is a set, mapping or dict view (pass a list).
            HeadMissingError: ``pooler`` asked of an export without a pooler.
        """
        task = self.task(
            "embed",
            pooling=pooling,
            normalize=normalize,
            truncation=truncation,
            max_length=max_length,
            prompt_name=prompt_name,
            prompt=prompt,
            dimensions=dimensions,
        )
        found = self.run_task(task, texts, batch_size=batch_size, max_batch_tokens=max_batch_tokens)
        return np.stack(found) if found else np.zeros((0, task.width(self.hidden_size)), dtype=np.float32)

    def embed_sparse(
        self,
        texts: str | Iterable[str],
        *,
        top_k: int | None = None,
        threshold: float = 0.0,
        prompt_name: str | None = None,
        prompt: str | None = None,
        truncation: bool | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> list[SparseVector]:
        """SPLADE: per text its non-zero vocabulary ids (ascending) and weights, equal to
        ``SparseEncoder(folder).encode`` for an export of a sentence-transformers SparseEncoder folder.

        Args:
            top_k: keep the ``top_k`` largest weights (``encode``'s ``max_active_dims``); ``None``: all.
            threshold: keep weights above this only.
            prompt_name, prompt: as :meth:`embed`.
            truncation: cut texts at the export's ``max_seq_length`` (default on, as ``encode``).

        Raises:
            HeadMissingError: the export is not of a SparseEncoder folder.
            ValueError, TypeError: a bad option or text.
        """
        task = self.task(
            "embed_sparse",
            top_k=top_k,
            threshold=threshold,
            prompt_name=prompt_name,
            prompt=prompt,
            truncation=truncation,
        )
        return self.run_task(task, texts, batch_size=batch_size)

    # -- the checkpoint's heads --------------------------------------------------------------------------

    def require(self, task: str) -> None:
        """Check that this export offers ``task`` (``embed``, ``nsp``, ``classify``, ``rerank``, ``fill_mask`` ...).

        Raises:
            HeadMissingError: it does not; the message names the architecture, the tasks the export offers
                and the checkpoint to export instead.
        """
        has_head = task in self.tasks
        if task == "rerank":
            has_head = has_head and self.manifest.num_labels == 1
        elif task in ("fill_mask", "embed_sparse"):
            has_head = has_head and self._mlm_session is not None
        elif task == "zero_shot":  # any classifier of two labels or more; its labels are judged by the task
            has_head = "classify" in self.tasks and (self.manifest.num_labels or 0) >= 2
        if not has_head:
            raise HeadMissingError.for_task(task, self.manifest.architecture, self.tasks, self.manifest.num_labels)

    def require_task(self, task: str) -> None:
        """Raise unless the export offers ``task`` (the same check as :meth:`require`).

        Raises:
            HeadMissingError: the export lacks the task's head.
        """
        self.require(task)

    def tokenize(
        self, text: str, pair: str | None = None, *, truncation: bool = False, max_length: int | None = None
    ) -> Tokenized:
        """Tokens, ids, segment ids and mask of one input, exactly as the model is fed (``max_length``
        default: a sentence-transformers export's ``max_seq_length``, as ``embed`` cuts; else the positions).

        Raises:
            TypeError: ``text`` or ``pair`` is not a string.
            ValueError: the input is longer than ``max_length`` and ``truncation`` is off.
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if pair is not None and not isinstance(pair, str):
            raise TypeError(f"pair must be a str or None, got {type(pair).__name__}")
        (encoding,) = self.tokenizer.encode(
            [text],
            None if pair is None else [pair],
            truncation=truncation,
            max_length=encoder_for(self, truncation, fed_length(self) if max_length is None else max_length).max_length,
        )
        return Tokenized(list(encoding.tokens), list(encoding.ids), list(encoding.type_ids), [1] * len(encoding.ids))
