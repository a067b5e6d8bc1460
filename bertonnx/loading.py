"""Loading an export: the checks and the sessions ``BertOnnx``'s constructor needs, one step each.

The constructor (:class:`bertonnx.BertOnnx`) reads the manifest, then calls these: the variant's graph opened on
its engine with its inputs and outputs checked against the manifest (:func:`open_graph`), the MLM head's graph
when the export has one (:func:`open_mlm_head`), and the random-weights warning (:func:`warn_if_random`). Files
are verified against the manifest (sizes, and sha256 with ``verify="sha256"``) before they are opened.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import ModelDirectoryError, RandomWeightsWarning
from .manifest import INPUT_NAMES, VARIANT_BACKENDS, VARIANT_FILES, Manifest
from .options import RuntimeOptions
from .session import build_session, open_variant_session
from .tokenizer import TextTokenizer

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = [
    "MASK_TOKEN",
    "VERIFY_MODES",
    "Graph",
    "MlmHead",
    "clean_up_spaces",
    "open_graph",
    "open_mlm_head",
    "runtime_options",
    "warn_if_random",
]

#: ``size``: compare file sizes with the manifest (instant); ``sha256``: also hash the model file (a large
#: share of a cold start, hence not the default: benchmarks/DEFAULTS.md, "Hashing the model on load").
VERIFY_MODES = ("size", "sha256")
#: The token ``fill_mask`` predicts when the tokenizer names none (BERT's); the adapter reads the family's own.
MASK_TOKEN = "[MASK]"


def runtime_options(variant: object, verify: object, options: object, threads: int | None) -> RuntimeOptions:
    """The constructor's arguments checked, and ``threads`` folded into the options.

    Raises:
        TypeError: ``variant`` is not a str or ``options`` not a ``RuntimeOptions``.
        ValueError: unknown ``verify``.
    """
    if not isinstance(variant, str):
        raise TypeError(f"variant must be a str, got {type(variant).__name__}")
    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {', '.join(VERIFY_MODES)}, got {verify!r}")
    if options is not None and not isinstance(options, RuntimeOptions):
        raise TypeError(f"options must be a bertonnx.RuntimeOptions, got {type(options).__name__}")
    checked = options or RuntimeOptions()
    if threads is not None:
        checked = RuntimeOptions(**{**checked.__dict__, "threads": threads})
    return checked


def clean_up_spaces(manifest: Manifest) -> bool:
    """transformers' ``clean_up_tokenization_spaces`` from the export's ``tokenizer_config.json`` (BERT: True)."""
    record = manifest.files.get("tokenizer_config.json")
    if record is None:
        return True
    try:
        config = json.loads((manifest.directory / record.name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return bool(config.get("clean_up_tokenization_spaces", True)) if isinstance(config, dict) else True


@dataclass(frozen=True)
class Graph:
    """A variant's graph, opened: its file, session, engine, precision and input and output names."""

    path: Path
    session: Any
    backend: str
    precision: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


def open_graph(manifest: Manifest, variant: str, options: RuntimeOptions, *, verify: str) -> Graph:
    """Verify and open ``variant``'s graph on its engine and check its inputs and outputs against the manifest.

    Raises:
        ValueError: unknown ``variant``.
        VariantMissingError: the export does not hold it.
        ModelDirectoryError: a file is missing or corrupt, the engine is not this bertonnx's for the variant, or
            the graph's inputs or outputs are not what the manifest says.
        ImportError: ``bf16`` without OpenVINO.
    """
    if variant not in VARIANT_FILES:
        raise ValueError(f"unknown variant {variant!r}; expected one of {', '.join(VARIANT_FILES)}")
    manifest.require_variant(variant)
    path, *_ = [
        manifest.record(name).verify(manifest.directory, check_hash=verify == "sha256")
        for name in manifest.variant_files(variant)
    ]
    backend = manifest.data["variants"][variant].get("backend", VARIANT_BACKENDS[variant])
    if backend != VARIANT_BACKENDS[variant]:
        raise ModelDirectoryError(
            f"{manifest.directory}: variant {variant!r} names backend {backend!r}, but this bertonnx "
            f"runs it on {VARIANT_BACKENDS[variant]}. Upgrade bertonnx or re-export."
        )
    session = open_variant_session(path, variant, options)
    precision = getattr(session, "inference_precision", "int8" if variant == "int8" else "f32")
    inputs = tuple(i.name for i in session.get_inputs())
    outputs = tuple(o.name for o in session.get_outputs())
    if "input_ids" not in inputs or set(inputs) - set(INPUT_NAMES):
        raise ModelDirectoryError(f"{path} takes inputs {list(inputs)}; expected {list(INPUT_NAMES)}")
    if set(manifest.graph_outputs) - set(outputs):
        raise ModelDirectoryError(
            f"{path} gives outputs {list(outputs)}; its manifest expects {list(manifest.graph_outputs)}"
        )
    return Graph(path, session, backend, precision, inputs, outputs)


@dataclass(frozen=True)
class MlmHead:
    """The MLM head's graph, opened: its session, input and output names, and the mask token's id."""

    session: ort.InferenceSession
    names: tuple[str, str]
    mask_token_id: int


def open_mlm_head(
    manifest: Manifest, tokenizer: TextTokenizer, options: RuntimeOptions, *, verify: str
) -> MlmHead | None:
    """The MLM head of an export offering ``fill_mask`` (``None`` otherwise), verified and opened.

    Raises:
        ModelDirectoryError: its file is missing or corrupt, or the tokenizer has no mask token.
    """
    record = manifest.mlm_head
    if record is None or "fill_mask" not in manifest.tasks:
        return None
    path, *_ = [
        manifest.record(name).verify(manifest.directory, check_hash=verify == "sha256") for name in record.files
    ]
    mask = tokenizer.mask_token or MASK_TOKEN
    mask_id = tokenizer.token_to_id(mask)
    if mask_id is None:
        raise ModelDirectoryError(
            f"the export's tokenizer has no {mask} token, but the export has an MLM head; re-run the export"
        )
    return MlmHead(build_session(path, options), (record.input, record.output), mask_id)


def warn_if_random(manifest: Manifest) -> None:
    """Warn :class:`~bertonnx.errors.RandomWeightsWarning` when the export holds seeded weights or heads."""
    if manifest.random_weights:
        note = manifest.weights.get("note") or "some of its weights were seeded, not trained"
        warnings.warn(
            f"{manifest.directory} holds random weights: {note} Export pretrained weights for real use; "
            "warnings.simplefilter('ignore', bertonnx.RandomWeightsWarning) silences this.",
            RandomWeightsWarning,
            stacklevel=3,
        )
