"""The export step end to end: load, export, derive variants, gate, write the manifest, publish atomically.

Everything is built in a hidden temporary directory beside ``OUTDIR`` and renamed into place only after
the parity gate passed, so an interrupted or failed export never leaves a half-written model directory.
fp32 and optimized must pass (else nothing is written); a lossy variant (int8, bf16) that misses its own
thresholds is left out and recorded in the manifest's ``refused_variants``, and the rest is published.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from bertonnx.info import format_figure
from bertonnx.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_FILE,
    MLM_HEAD_FILE,
    MLM_HEAD_INPUT,
    MLM_HEAD_OUTPUT,
    NSP_IS_NEXT_INDEX,
    REFUSED_VARIANTS_KEY,
    TOKENIZER_FILE,
    VARIANT_FILES,
    refusal_text,
    sha256_file,
)
from bertonnx.openvino_session import OPENVINO_INSTALL_HINT, openvino_version
from bertonnx.version import __version__

from . import gate, sentence
from .errors import ExportError
from .graph import DEFAULT_OPSET, describe_io, export_graph, export_mlm_head
from .heads import label_names
from .source import DEFAULT_MODEL, Source, load_source
from .variants import build_bf16, build_int8, build_optimized, calibration_feeds, externalize

ALL_VARIANTS = tuple(VARIANT_FILES)
VERSIONED_PACKAGES = (
    "torch",
    "transformers",
    "optimum",
    "optimum-onnx",
    "onnx",
    "onnxruntime",
    "openvino",
    "tokenizers",
    "numpy",
)
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
#: ``tokenizer_config.json`` keys that carry a source tokenizer's own padding and truncation settings; the
#: runtime pads and truncates per call, and ``model_max_length`` (the positions) is the only limit written.
SOURCE_LIMIT_KEYS = (
    "max_length",
    "stride",
    "truncation_strategy",
    "truncation_side",
    "pad_to_multiple_of",
    "pad_token_type_id",
    "padding_side",
)
RANDOM_WEIGHTS_NOTE = "RANDOM WEIGHTS: outputs are meaningless; use for latency and parity checks only."

Log = Callable[[str], None]


@dataclass
class ExportOptions:
    """What to export and where. Mirrors ``bertonnx export`` options."""

    outdir: Path
    model: str = DEFAULT_MODEL
    weights: str = "pretrained"
    seed: int = 0
    allow_random_heads: bool = False
    revision: str | None = None
    variants: tuple[str, ...] = ALL_VARIANTS
    opset: int = DEFAULT_OPSET
    force: bool = False
    #: ``--task``: a task name or class name of :mod:`export.heads`; ``None`` exports the checkpoint's own.
    task: str | None = None
    #: ``--labels``: label names of a seeded classification head, in index order (sets ``num_labels``).
    labels: tuple[str, ...] | None = None
    #: ``--num-labels``: the head's width; alone, the labels are named ``LABEL_0`` ... (1 makes a reranker).
    num_labels: int | None = None
    #: ``--variants`` was given: the user named ``variants``, so a lossy one refused by its gate is reported as
    #: a failure (the CLI exits ``EXIT_VARIANT_REFUSED``), not a note. Either way the others are written.
    variants_named: bool = False
    #: Test hook: called with the fp32 graph's path before the gate, to break the graph on purpose (the MLM
    #: head graph, when there is one, is already beside it).
    tamper: Callable[[Path], None] | None = field(default=None, repr=False)


def _log_to_stdout(message: str) -> None:
    print(message, flush=True)


@contextlib.contextmanager
def _step(log: Log, name: str) -> Iterator[None]:
    log(f"[export] {name} ...")
    start = time.perf_counter()
    yield
    log(f"[export] {name}: done in {time.perf_counter() - start:.1f} s")


def _check_options(options: ExportOptions) -> Path:
    label_names(options.labels, options.num_labels)  # an empty, repeated or miscounted label: before any work
    unknown = [v for v in options.variants if v not in VARIANT_FILES]
    if unknown or not options.variants:
        raise ExportError(
            f"--variants must name one or more of {', '.join(VARIANT_FILES)}, got {', '.join(unknown) or 'none'}"
        )
    if "bf16" in options.variants and openvino_version() is None:
        raise ExportError(
            f"the bf16 variant runs on OpenVINO, which is not installed: {OPENVINO_INSTALL_HINT} (or reinstall "
            "bertonnx[export], which includes it), or leave it out with --variants fp32,optimized,int8"
        )
    outdir = Path(options.outdir).expanduser().absolute()
    if outdir.exists() and not options.force:
        raise ExportError(f"{outdir} already exists; pass --force to replace it, or choose another OUTDIR")
    if outdir.exists() and not outdir.is_dir():
        raise ExportError(f"{outdir} exists and is not a directory; remove it or choose another OUTDIR")
    if outdir.exists() and any(outdir.iterdir()) and not (outdir / MANIFEST_FILE).is_file():
        raise ExportError(
            f"{outdir} is a non-empty directory that is not a bertonnx export; --force only replaces exports"
        )
    outdir.parent.mkdir(parents=True, exist_ok=True)
    return outdir


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"bertonnx": __version__}
    for package in VERSIONED_PACKAGES:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _parameter_counts(source: Source) -> dict[str, int]:
    """Parameters of the main graph by part, counted on the PyTorch model (``bertonnx inspect`` counts the
    graph's initializers and must find the same): the base model (embeddings, encoder, pooler when the
    architecture has one), the word embeddings, the pooler, each head, and their total."""
    model = source.model
    row = source.row
    base = model if row.kind.name == "Model" else getattr(model, row.family.base)
    base_count = sum(p.numel() for p in base.parameters())
    counts = {"bert_model": base_count, "token_embeddings": base.get_input_embeddings().weight.numel()}
    pooler = getattr(base, "pooler", None)
    if pooler is not None:
        counts["pooler"] = sum(p.numel() for p in pooler.parameters())
    counted = {"nsp": "nsp_head", "classifier": "classifier_head", "token_classifier": "token_classifier_head"}
    counted.update(qa="qa_head", choice="choice_head", discriminator="discriminator_head")
    for head, key in counted.items():
        if head in row.heads:
            modules = [_module(model, path) for path in row.family.modules(head)]
            counts[key] = sum(p.numel() for module in modules for p in module.parameters())
    counts["exported_total"] = base_count + sum(v for k, v in counts.items() if k.endswith("_head"))
    return counts


def _module(model: Any, path: str) -> Any:
    for name in path.split("."):
        model = getattr(model, name)
    return model


def _task_block(source: Source, mlm_head: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest's ``task`` block: what was exported, the runtime tasks, heads trained or seeded, labels."""
    config = source.model.config
    labelled = source.row.labelled
    num_labels = int(config.num_labels) if labelled else None
    return {
        "architecture": source.row.architecture,
        "tasks": source.row.runtime_tasks(num_labels),
        "heads": source.heads,
        "num_labels": num_labels,
        "id2label": {str(k): str(v) for k, v in config.id2label.items()} if labelled else None,
        "problem_type": getattr(config, "problem_type", None)
        if source.row.architecture.endswith("Classification")
        else None,
        "mlm_head": mlm_head,
    }


#: Manifest config keys -> the config attributes that hold them, in the order tried (DistilBERT names its
#: feed-forward width ``hidden_dim`` and its activation ``activation``).
CONFIG_ATTRIBUTES = {
    "num_hidden_layers": ("num_hidden_layers",),
    "num_attention_heads": ("num_attention_heads",),
    "hidden_size": ("hidden_size",),
    "intermediate_size": ("intermediate_size", "hidden_dim"),
    "vocab_size": ("vocab_size",),
    "type_vocab_size": ("type_vocab_size",),
    "hidden_act": ("hidden_act", "activation"),
    "layer_norm_eps": ("layer_norm_eps",),
}


def _config_numbers(source: Source) -> dict[str, Any]:
    """The architecture numbers: ``max_position_embeddings`` is the tokens an input may have (the runtime's
    limit), ``position_embeddings`` the embedding rows (written where the family offsets positions: RoBERTa's 514
    for 512 tokens); ``type_vocab_size`` is 0 for a family whose graph takes no ``token_type_ids``."""
    c = source.model.config
    family = source.row.family
    numbers: dict[str, Any] = {"model_type": family.model_type}
    for key, names in CONFIG_ATTRIBUTES.items():
        numbers[key] = next((getattr(c, name) for name in names if getattr(c, name, None) is not None), None)
    if "token_type_ids" not in family.graph_inputs(numbers["type_vocab_size"]):
        numbers["type_vocab_size"] = 0
    numbers["max_position_embeddings"] = family.usable_positions(c.max_position_embeddings)
    if family.position_offset:
        numbers["position_embeddings"] = c.max_position_embeddings
    return numbers


def _mask_token(source: Source) -> str:
    """The tokenizer's mask token (``[MASK]``, ``<mask>``), for the gate's masked inputs."""
    token = source.tokenizer.mask_token if source.row.has_mlm else None
    return str(token) if token else gate.MASK_TOKEN


def _weights_note(weights: dict[str, Any]) -> str | None:
    if weights["kind"] == "random":
        return RANDOM_WEIGHTS_NOTE
    if weights["random_heads"]:
        heads = " and ".join(weights["random_heads"])
        seed = weights["seed"]
        several = len(weights["random_heads"]) > 1
        noun, pronoun = ("heads were", "their") if several else ("head was", "its")
        return f"RANDOM HEADS: the {heads} {noun} seeded (seed {seed}), not trained; {pronoun} outputs are meaningless."
    return None


def _save_tokenizer(source: Source, directory: Path, max_length: int) -> None:
    """Save the tokenizer files so that every tool reading them sees what the runtime does: ``max_length``
    positions, no padding, no truncation unless asked.

    transformers copies a ``tokenizer.json``'s baked-in truncation and padding into ``tokenizer_config.json``
    when it loads one (MiniLM's says ``"max_length": 128``), and fastembed truncates every text to the
    smaller of that and ``model_max_length``; so both files are cleared and checked before publishing.
    """
    tokenizer = source.tokenizer
    tokenizer.backend_tokenizer.no_padding()
    tokenizer.backend_tokenizer.no_truncation()
    tokenizer.model_max_length = max_length
    for key in SOURCE_LIMIT_KEYS:
        tokenizer.init_kwargs.pop(key, None)
    tokenizer.save_pretrained(str(directory))
    saved = json.loads((directory / TOKENIZER_FILE).read_text(encoding="utf-8"))
    if saved.get("padding") is not None or saved.get("truncation") is not None:
        raise ExportError(
            f"{TOKENIZER_FILE} still carries padding or truncation after clearing them; refusing to publish it"
        )
    config = json.loads((directory / TOKENIZER_CONFIG_FILE).read_text(encoding="utf-8"))
    left = sorted(set(config) & set(SOURCE_LIMIT_KEYS))
    if left or config.get("model_max_length") != max_length:
        raise ExportError(
            f"{TOKENIZER_CONFIG_FILE} says model_max_length={config.get('model_max_length')} and carries "
            f"{', '.join(left) or 'no other limit'}; expected {max_length} and none. Refusing to publish it"
        )


_DIR_MODE = 0o777
_FILE_MODE = 0o666


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _first_breach(variant: str, figures: dict[str, float]) -> dict[str, Any]:
    """The first measure of a lossy ``variant``'s thresholds (in their order) that ``figures`` breach, as the
    manifest's ``refused_variants`` records it: ``measure``, ``value``, ``limit``."""
    for measure, limit in gate.LOSSY_THRESHOLDS[variant].items():
        if measure not in figures:
            continue
        value = figures[measure]
        within = value <= limit if measure.endswith("_max_abs") else value >= limit
        if not within:
            return {"measure": measure, "value": value, "limit": limit}
    raise ValueError(f"{variant}: the gate reported a breach but no threshold of {variant} is breached")


def _drop_variant(staging: Path, record: dict[str, Any]) -> None:
    """Remove a refused variant's files (graph and weights) from ``staging`` before anything is hashed."""
    for name in (record["file"], record.get("data_file")):
        if name:
            (staging / name).unlink(missing_ok=True)


def _publish(staging: Path, outdir: Path) -> None:
    """Move the finished ``staging`` directory to ``outdir``, replacing an old export last."""
    if outdir.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.old-", dir=outdir.parent))
        outdir.rename(trash / outdir.name)
        staging.rename(outdir)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        staging.rename(outdir)


def run_export(options: ExportOptions, log: Log = _log_to_stdout) -> dict[str, Any]:
    """Export, gate and publish a model directory.

    Returns:
        The manifest written to ``OUTDIR/bertonnx.json``.

    Raises:
        ExportError: a refusal (bad option, missing model, existing OUTDIR, missing heads, unreachable hub)
            or a failed parity gate (fp32 or optimized, or every variant asked for). Nothing is left in
            ``OUTDIR`` in either case. A lossy variant that alone misses its gate is not an error: it is not
            written, the manifest's ``refused_variants`` says why, and the rest is published.
    """
    outdir = _check_options(options)
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.partial-", dir=outdir.parent))
    staging.chmod(_DIR_MODE & ~_current_umask())  # mkdtemp makes 0700; publish with the usual mode
    try:
        manifest = _build(options, staging, log)
        _publish(staging, outdir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log(f"[export] wrote {outdir}")
    return manifest


def _build(options: ExportOptions, staging: Path, log: Log) -> dict[str, Any]:
    with _step(log, f"load {options.model} ({options.weights} weights)"):
        source = load_source(
            sentence.checkpoint_dir(options.model),
            weights=options.weights,
            seed=options.seed,
            allow_random_heads=options.allow_random_heads,
            revision=options.revision,
            task=options.task,
            labels=label_names(options.labels, options.num_labels),
        )
    row = source.row
    config = source.model.config
    log(f"[export] architecture {row.architecture}: outputs {', '.join(row.outputs)}; heads {source.heads}")
    for line in source.notes:
        log(f"[export] NOTE {line}")
    if row.labelled:
        seeded = source.heads.get("classifier", source.heads.get("token_classifier")) == "seeded"
        why = " (a seeded head: the names say nothing of what it predicts)" if seeded else ""
        log(f"[export] labels {', '.join(str(v) for _, v in sorted(config.id2label.items()))}{why}")
    note = _weights_note(source.weights)
    if note:
        log(f"[export] NOTE {note}")
    st = sentence.prepare(options.model, options.revision, source, staging)
    positions = row.family.usable_positions(config.max_position_embeddings)  # tokens an input may have
    _save_tokenizer(source, staging, positions)
    config.architectures = [row.architecture]  # the graphs: the encoder with this class's heads
    config.save_pretrained(str(staging))

    fp32_path = staging / VARIANT_FILES["fp32"]
    with _step(log, f"export ONNX graph (opset {options.opset})"):
        export_graph(source.model, fp32_path, opset=options.opset)
    mlm_path = staging / MLM_HEAD_FILE if row.has_mlm else None
    mlm_record: dict[str, Any] | None = None
    if mlm_path is not None:
        with _step(log, "export the MLM head graph (run on the [MASK] positions only)"):
            head_parameters = export_mlm_head(source.model, mlm_path, opset=options.opset)
        mlm_record = {
            "file": MLM_HEAD_FILE,
            "input": MLM_HEAD_INPUT,
            "output": MLM_HEAD_OUTPUT,
            "vocab_size": int(config.vocab_size),
            "parameters_without_tied_decoder": head_parameters,
            "variants": "shared: every variant's hidden states go through this fp32 graph on onnxruntime",
        }
    if options.tamper is not None:
        options.tamper(fp32_path)

    records: dict[str, dict[str, Any]] = {v: {"file": VARIANT_FILES[v]} for v in ALL_VARIANTS if v in options.variants}
    unavailable = {"optimized": row.family.no_fusion} if row.family.fusion is None and "optimized" in records else {}
    for variant, why in unavailable.items():
        log(f"[export] NOTE the {variant} variant cannot be built for {row.family.model_type}: {why}")
        del records[variant]
    if "optimized" in records:
        with _step(log, "fuse (onnxruntime transformer optimizer)"):
            fusions = build_optimized(
                fp32_path,
                staging / VARIANT_FILES["optimized"],
                config.num_attention_heads,
                config.hidden_size,
                row.family.fusion or "bert",
            )
        records["optimized"]["fusions"] = fusions
        log(f"[export] fusions: {fusions}")
    if "int8" in records:
        with _step(log, "quantize (per-row int8)"):
            calibration = calibration_feeds(staging / TOKENIZER_FILE, positions)
            records["int8"]["quantization"] = build_int8(fp32_path, staging / VARIANT_FILES["int8"], calibration)

    if "bf16" in records:
        with _step(log, "convert to OpenVINO IR (bf16 variant)"):
            records["bf16"].update(build_bf16(fp32_path, staging / VARIANT_FILES["bf16"]))

    with _step(log, "move weights to external data files"):
        for record in records.values():
            if "data_file" not in record:  # OpenVINO IR already keeps its weights in a .bin
                record["data_file"] = externalize(staging / record["file"], _FILE_MODE & ~_current_umask())
        if mlm_path is not None and mlm_record is not None:
            mlm_record["data_file"] = externalize(mlm_path, _FILE_MODE & ~_current_umask())

    masked = len(gate.MASKED_INPUTS) if row.has_mlm else 0
    inputs_text = f"{len(gate.GATE_INPUTS)} inputs" + (f" + {masked} with [MASK]" if masked else "")
    problem_type = getattr(config, "problem_type", None)
    with _step(log, f"verify against PyTorch {row.architecture} ({inputs_text} + padded batch)"):
        mask = _mask_token(source)
        cases = gate.build_cases(staging / TOKENIZER_FILE, positions, masked=row.has_mlm, mask_token=mask)
        reference = gate.reference_outputs(source.model.eval(), cases)
        failures: list[str] = []
        refused: dict[str, dict[str, Any]] = {}
        for variant, record in records.items():
            outputs = gate.variant_outputs(staging / record["file"], variant, cases, mlm_path)
            figures = {
                **gate.compare(cases, reference, outputs, problem_type=problem_type),
                **gate.padded_batch_figures(cases, outputs),
            }
            problems = gate.breaches(variant, figures)
            record["parity"] = {"passed": not problems, "cases": len(cases), **figures}
            if problems and variant in gate.LOSSY_THRESHOLDS:
                refused[variant] = {**_first_breach(variant, figures), "breaches": problems, "parity": record["parity"]}
            else:
                failures += problems
            log(
                f"[export] {variant}: "
                + ", ".join(f"{k} {format_figure(k, v)}" for k, v in figures.items())
                + (" FAIL" if problems else " ok")
            )
    st_references = sentence.gate_references(
        st, staging / TOKENIZER_FILE, random_weights=source.weights["kind"] == "random"
    )
    if st_references:
        with _step(log, "verify the sentence-transformers pipeline against SentenceTransformer.encode"):
            for variant, record in records.items():
                outputs = [
                    gate.variant_outputs(staging / record["file"], variant, r.cases, mlm_path) for r in st_references
                ]
                figures = sentence.pipeline_figures(st.block or {}, staging, st_references, outputs)
                problems = sentence.pipeline_breaches(variant, figures)
                record["parity"].update(figures, passed=record["parity"]["passed"] and not problems)
                if problems and variant in sentence.PIPELINE_MIN_COSINE:  # a lossy variant: refused, not fatal
                    breach = {"measure": "pipeline_min_cosine", "value": figures["pipeline_min_cosine"]}
                    first = refused.get(variant) or {**breach, "limit": sentence.PIPELINE_MIN_COSINE[variant]}
                    refused[variant] = {**first, "breaches": [*first.get("breaches", []), *problems]}
                    refused[variant]["parity"] = record["parity"]
                else:
                    failures += problems
                log(f"[export] {variant} pipeline: " + ", ".join(f"{k} {v:.3g}" for k, v in figures.items()))
    if failures or len(refused) == len(records):  # an exact variant failed, or no variant is left to write
        lossy = [problem for record in refused.values() for problem in record["breaches"]]
        why = "" if failures else " (no variant passed)"
        raise ExportError(
            f"parity gate failed{why}; nothing was written:\n  " + "\n  ".join(failures + lossy),
            exit_code=ExportError.EXIT_GATE_FAILED,
        )
    for variant, record in refused.items():
        _drop_variant(staging, records.pop(variant))
        note = "" if options.variants_named else "NOTE "
        reason = refusal_text(record)
        log(f"[export] {note}{variant} not written: {reason} (its parity gate); the other variants passed")

    io = describe_io(fp32_path)
    if "fp32" not in records:
        fp32_path.unlink()
    files = sorted(p.name for p in staging.iterdir() if p.is_file())
    with _step(log, "hash files"):
        file_records = {
            name: {"sha256": sha256_file(staging / name), "size": (staging / name).stat().st_size} for name in files
        }
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created_by": f"bertonnx {__version__}",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "source": {"model": source.model_id, "kind": source.kind, "revision": source.revision},
        "weights": {**source.weights, "note": _weights_note(source.weights)},
        "config": _config_numbers(source),
        "parameters": _parameter_counts(source),
        "opset": options.opset,
        "task": {**_task_block(source, mlm_record), **st.task},
        **({sentence.BLOCK: st.block} if st.block is not None else {}),
        **(
            {"nsp": {"is_next_index": NSP_IS_NEXT_INDEX, "labels": ["is_next", "not_next"]}}
            if "nsp" in row.heads
            else {}
        ),
        "graph": io,
        "tokenizer": {"file": TOKENIZER_FILE, "padding": None, "truncation": None},
        "parity_gate": {
            "reference": f"transformers {row.architecture} (PyTorch, fp32)",
            "measures": list(row.gate),
            "inputs": len(gate.GATE_INPUTS),
            "masked_inputs": masked,
            "exact_max_abs": gate.EXACT_MAX_ABS,
            "agreement_tie_probability": gate.TIE_PROBABILITY,
            "int8_thresholds": gate.INT8_THRESHOLDS,
            "bf16_thresholds": gate.BF16_THRESHOLDS,
        },
        "variants": records,
        REFUSED_VARIANTS_KEY: refused,
        **({"unavailable_variants": unavailable} if unavailable else {}),
        "versions": _versions(),
        "files": file_records,
    }
    (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest
