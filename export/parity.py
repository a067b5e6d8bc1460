"""``bertonnx parity DIR``: every variant of an export, through the runtime, against PyTorch.

The export gate checks the ONNX graphs with the export's own token ids. This command checks what users
run: each variant is loaded with the torch-free :class:`bertonnx.BertOnnx`, so the runtime's tokenizer,
truncation, length-sorted batching and padding are all part of what is compared. The reference is
transformers' ``BertForPreTraining`` rebuilt the way the export built it (the manifest's source and seed
for random weights; ``--reference`` or the manifest's source for pretrained ones, with recorded random
heads seeded the same way), fed ids from the checkpoint's transformers fast tokenizer (what its pipelines run,
and whose rules the runtime follows: pair truncation ``longest_first`` with the odd token to the longer side;
a text it cannot take, a lone surrogate, from the Python ``BertTokenizer``), one input at a time. Inputs: the
gate's built-in inputs (``export.gate.GATE_INPUTS``) plus user pairs from ``--pairs FILE.tsv``. Figures,
comparison and tolerances are the gate's own.

One process, in sequence: all PyTorch work finishes first, then each variant's onnxruntime session is
built with thread spinning disabled and dropped before the next. onnxruntime's spinning intra-op threads
steal cores from PyTorch in the same process (on 2 cores that slows the reference several-fold); with the
reference done first and spinning off, neither pool competes, and we avoid a second process and shipping
every hidden state between processes.

Exit codes: 0 every variant within tolerance, 1 a breach (an output out of tolerance or a tokenization
difference), 2 bad usage (missing directory, not an export, unknown variant, unreadable pairs file,
reference missing or not the exported model).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertonnx import BertOnnx, ModelDirectoryError, RandomWeightsWarning, RuntimeOptions
from bertonnx.command import CommandError, run_command
from bertonnx.exit_codes import EXIT_BREACH, EXIT_OK, EXIT_USAGE  # noqa: F401 - parity.EXIT_USAGE, for callers
from bertonnx.files import check_output_file, read_lines, write_atomic
from bertonnx.info import source_text, weights_text
from bertonnx.manifest import MANIFEST_FILE, OUTPUT_NAMES, Manifest, read_manifest
from bertonnx.surface import envelope

from . import gate
from .errors import ExportError

#: Inputs per runtime call; the built-in inputs then run as length-sorted, padded batches.
RUNTIME_BATCH_SIZE = 8
#: Characters of an input shown in a tokenization breach (the rest elided).
SHOWN_CHARS = 80
_CONFIG_KEYS = ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size")


class UsageError(CommandError):
    """Bad usage: the message says what was expected and how to fix it (exit 2)."""


@dataclass
class Input:
    """One parity input: a text or pair, as the reference tokenizer encodes it."""

    text: str
    pair: str | None
    ids: list[int] = field(default_factory=list)
    type_ids: list[int] = field(default_factory=list)


@dataclass
class VariantResult:
    """One variant's verdict: gate figures, per-output breaches and tokenization differences."""

    variant: str
    figures: dict[str, float]
    breaches: dict[str, list[str]]
    token_mismatches: list[int]

    @property
    def passed(self) -> bool:
        return not self.token_mismatches and not any(self.breaches.values())


def read_pairs(path: Path) -> list[tuple[str, str | None]]:
    """Inputs from a TSV file: ``text_a<TAB>text_b`` per line; a line without a tab is a single text.

    Blank lines are skipped (they would only repeat the built-in empty-ish inputs).

    Raises:
        CommandError: the file is missing, a directory, unreadable or not UTF-8 (the message names it).
    """
    inputs: list[tuple[str, str | None]] = []
    for line in read_lines(str(path), "--pairs"):
        if not line.strip():
            continue
        text, tab, pair = line.partition("\t")
        inputs.append((text, pair if tab else None))
    return inputs


def _check_export(model_dir: str) -> Manifest:
    try:
        return read_manifest(model_dir)
    except ModelDirectoryError as exc:
        raise UsageError(str(exc)) from None


def _variants(manifest: Manifest, requested: str | None) -> list[str]:
    present = list(manifest.variants)
    if requested is None:
        return present
    chosen = [v.strip() for v in requested.split(",") if v.strip()]
    unknown = [v for v in chosen if v not in present]
    if unknown or not chosen:
        raise UsageError(
            f"--variants must name variants present in {manifest.directory} ({', '.join(present)}), "
            f"got {', '.join(unknown) or 'none'}"
        )
    return chosen


def load_reference(manifest: Manifest, reference: str | None) -> Any:
    """Rebuild the PyTorch model the export was made from (``export.source.Source``).

    Raises:
        UsageError: the reference cannot be loaded, or it is not the exported architecture.
    """
    from .heads import seeded_labels
    from .source import load_source

    weights = manifest.weights
    source = manifest.data.get("source") or {}
    model = reference or source.get("model")
    if not model:
        raise UsageError(f"{manifest.directory / MANIFEST_FILE} names no source model; pass --reference MODEL_OR_DIR")
    random = weights.get("kind") == "random"
    seed = int(weights.get("seed") or 0)
    revision = source.get("revision") if reference is None and source.get("kind") == "hub" else None
    try:
        loaded = load_source(
            model,
            weights="random" if random else "pretrained",
            seed=seed,
            allow_random_heads=bool(weights.get("random_heads")),
            revision=revision,
            task=manifest.architecture,
            labels=seeded_labels(manifest),
        )
    except ExportError as exc:
        raise UsageError(
            f"cannot load the PyTorch reference {model!r}: {exc}\nPass --reference with the checkpoint "
            "directory (or hub id) the export was made from."
        ) from None
    config = loaded.model.config
    differs = [
        f"{key} {getattr(config, key)} != {manifest.config[key]}"
        for key in _CONFIG_KEYS
        if getattr(config, key) != manifest.config[key]
    ]
    if differs:
        raise UsageError(f"the reference {model!r} is not the exported model: {'; '.join(differs)}")
    seeded = [h for h in loaded.weights.get("random_heads", []) if h in manifest.heads]  # legacy: no MLM head
    if sorted(seeded) != sorted(weights.get("random_heads") or []):
        raise UsageError(
            f"the reference {model!r} has random heads {loaded.weights.get('random_heads')} but the export "
            f"recorded {weights.get('random_heads')}; pass the checkpoint the export was made from"
        )
    return loaded


def _reference_tokenizer(source: Any) -> Any:
    """The reference checkpoint's transformers fast tokenizer (the pipelines' tokenizer). The Python
    ``BertTokenizer`` is not the reference: on a pair of equal lengths it cuts the other side first
    (docs/tasks.md lists the deliberate differences)."""
    return source.tokenizer


def _python_tokenizer(source: Any) -> Any:
    """transformers' Python ``BertTokenizer`` with the reference's vocabulary and casing: the reference for a
    text the fast tokenizer cannot take at all (a lone surrogate, which its Rust core refuses)."""
    from transformers import BertTokenizer

    fast = source.tokenizer
    with tempfile.TemporaryDirectory() as tmp:
        (vocab_file,) = fast.save_vocabulary(tmp)
        return BertTokenizer(vocab_file=vocab_file, do_lower_case=bool(getattr(fast, "do_lower_case", True)))


def reference_run(
    source: Any, inputs: list[tuple[str, str | None]], max_length: int
) -> tuple[list[Input], list[gate.Case], list[dict[str, np.ndarray]]]:
    """Tokenize with the reference tokenizer and run PyTorch on each input alone."""
    from transformers.utils import logging as hf_logging

    from .graph import BertWithHeads

    hf_logging.set_verbosity_error()  # transformers warns on every truncated pair
    tokenizer = _reference_tokenizer(source)
    python_tokenizer = None
    encoded = []
    for text, pair in inputs:
        options = {"truncation": "longest_first", "max_length": max_length, "return_token_type_ids": True}
        try:
            enc = tokenizer(text, pair, **options)
        except TypeError:  # a lone surrogate: the fast tokenizer refuses the string itself
            python_tokenizer = python_tokenizer or _python_tokenizer(source)
            enc = python_tokenizer(text, pair, **options)
        encoded.append(Input(text, pair, list(enc["input_ids"]), list(enc["token_type_ids"])))
    cases = [
        gate.make_case(f"input {i} ({len(item.ids)} tokens{', pair' if item.pair is not None else ''})", [item])
        for i, item in enumerate(encoded)
    ]
    reference = gate.reference_outputs(BertWithHeads(source.model).eval(), cases)
    return encoded, cases, reference


def runtime_run(model: BertOnnx, inputs: list[Input]) -> tuple[list[list[int]], list[dict[str, np.ndarray]]]:
    """Run singles and pairs through the runtime in padded batches; per-input ids and outputs."""
    ids: list[list[int]] = [[] for _ in inputs]
    outputs: list[dict[str, np.ndarray]] = [{} for _ in inputs]
    max_length = model.max_length
    for is_pair in (False, True):
        rows = [i for i, item in enumerate(inputs) if (item.pair is not None) == is_pair]
        if not rows:
            continue
        texts = [inputs[i].text for i in rows]
        pairs = [inputs[i].pair or "" for i in rows] if is_pair else None
        out = model(texts, pairs, batch_size=RUNTIME_BATCH_SIZE, truncation=True, max_length=max_length)
        assert out.last_hidden_state is not None  # hidden_states=True is the default
        for k, row in enumerate(rows):
            item = inputs[row]
            ids[row] = model.tokenize(item.text, item.pair, truncation=True, max_length=max_length).ids
            n = int(out.lengths[k])
            outputs[row] = {"last_hidden_state": out.last_hidden_state[k : k + 1, :n]}
            for name in ("pooler_output", "nsp_logits"):  # those the export has (zero columns otherwise)
                value = getattr(out, name)
                if value.shape[1]:
                    outputs[row][name] = value[k : k + 1]
    return ids, outputs


def check_variant(
    manifest: Manifest,
    variant: str,
    inputs: list[Input],
    cases: list[gate.Case],
    reference: list[dict[str, np.ndarray]],
) -> VariantResult:
    """Run one variant through the runtime (spinning off) and compare it with the reference outputs."""
    with warnings.catch_warnings():  # the report's header says whether the weights are random
        warnings.simplefilter("ignore", RandomWeightsWarning)
        model = BertOnnx(manifest.directory, variant, options=RuntimeOptions(allow_spinning=False))
    ids, candidate = runtime_run(model, inputs)
    del model
    mismatches = [i for i, item in enumerate(inputs) if ids[i] != item.ids]
    keep = [i for i in range(len(inputs)) if i not in mismatches]
    # the outputs BertOnnx gives (a classifier's logits are judged by the export gate)
    compared = [{k: v for k, v in reference[i].items() if k in candidate[i]} for i in keep]
    figures = gate.compare([cases[i] for i in keep], compared, [candidate[i] for i in keep])
    return VariantResult(variant, figures, gate.breaches_by_output(variant, figures), mismatches)


def _limit(variant: str, name: str) -> str:
    if variant not in gate.LOSSY_THRESHOLDS:
        return f"max abs <= {gate.EXACT_MAX_ABS:g}"
    limits = gate.LOSSY_THRESHOLDS[variant]
    if name == "nsp_logits":
        return f"P(is next) abs <= {limits['nsp_probability_max_abs']}, agree >= {limits['nsp_argmax_agreement']}"
    return f"cos >= {limits[f'{name}_min_cosine']}"


def table_rows(results: list[VariantResult]) -> list[list[str]]:
    """Header and one row per variant and output (plus a tokenization row per variant)."""
    rows = [["variant", "output", "max abs diff", "min cosine", "NSP argmax agreement", "limit", "result"]]
    for result in results:
        for name in [n for n in OUTPUT_NAMES if f"{n}_max_abs" in result.figures]:
            agreement = f"{result.figures['nsp_argmax_agreement']:.3f}" if name == "nsp_logits" else ""
            rows.append(
                [
                    result.variant,
                    name,
                    f"{result.figures[f'{name}_max_abs']:.3g}",
                    f"{result.figures[f'{name}_min_cosine']:.6f}",
                    agreement,
                    _limit(result.variant, name),
                    "FAIL" if result.breaches[name] else "pass",
                ]
            )
        rows.append(
            [
                result.variant,
                "tokenization",
                "",
                "",
                "",
                "ids equal",
                f"FAIL ({len(result.token_mismatches)} inputs)" if result.token_mismatches else "pass",
            ]
        )
    return rows


def _plain_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _markdown_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def _problems(results: list[VariantResult], inputs: list[Input]) -> list[str]:
    found = []
    for result in results:
        found += [p for problems in result.breaches.values() for p in problems]
        for i in result.token_mismatches:
            text = inputs[i].text if len(inputs[i].text) <= SHOWN_CHARS else inputs[i].text[:SHOWN_CHARS] + "…"
            found.append(f"{result.variant}: tokenization of input {i} differs from transformers' tokenizer: {text!r}")
    return found


def write_report(path: Path, header: list[str], rows: list[list[str]], problems: list[str]) -> None:
    """Write the markdown report atomically: a temporary file beside ``path``, then a rename.

    Raises:
        CommandError: the report's folder is missing or not writable.
    """
    text = "\n".join(["# bertonnx parity", "", *header, "", _markdown_table(rows), ""])
    text += "\n## Breaches\n\n" + ("\n".join(f"- {p}" for p in problems) if problems else "None.") + "\n"
    target = check_output_file(str(path), "--report")
    write_atomic(target, lambda handle: handle.write(text.encode("utf-8")), "--report")


def run(args: argparse.Namespace) -> int:
    """Run the comparison for parsed ``args``; return the exit code."""
    manifest = _check_export(args.model_dir)
    variants = _variants(manifest, args.variants)
    if args.report:
        check_output_file(args.report, "--report")  # before the reference and every variant have run
    inputs: list[tuple[str, str | None]] = list(gate.GATE_INPUTS)
    user_inputs = read_pairs(Path(args.pairs)) if args.pairs else []
    inputs += user_inputs
    source = load_reference(manifest, args.reference)
    encoded, cases, reference = reference_run(source, inputs, manifest.max_position_embeddings)
    del source
    results = [check_variant(manifest, variant, encoded, cases, reference) for variant in variants]
    rows = table_rows(results)
    problems = _problems(results, encoded)
    origin = args.reference or source_text(manifest.data["source"])
    header = [
        f"- directory: `{manifest.directory}`",
        f"- reference: transformers {manifest.architecture} (PyTorch, fp32) from `{origin}`",
        f"- weights: {weights_text(manifest.weights)}",
        f"- inputs: {len(gate.GATE_INPUTS)} built-in + {len(user_inputs)} from --pairs, through BertOnnx "
        f"(batches of {RUNTIME_BATCH_SIZE}, truncation at {manifest.max_position_embeddings} tokens)",
        f"- verdict: {'FAIL' if problems else 'pass'}",
    ]
    if args.report:
        write_report(Path(args.report), header, rows, problems)
    if args.json:
        payload = envelope(  # the envelope of every command; parity has no per-input results
            manifest.directory,
            None,
            manifest.random_weights,
            [],
            directory=str(manifest.directory),
            inputs=len(encoded),
            passed=not problems,
            variants={
                r.variant: {"passed": r.passed, "figures": r.figures, "token_mismatches": r.token_mismatches}
                for r in results
            },
            breaches=problems,
        )
        print(json.dumps(payload, indent=2))
    else:
        print("\n".join(line.removeprefix("- ") for line in header))
        print(_plain_table(rows))
        for problem in problems:
            print(f"FAIL {problem}")
    return EXIT_BREACH if problems else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bertonnx parity`` (options anywhere; one line per failure, see bertonnx.command)."""
    from .cli import PARITY_COMMAND

    return run_command(PARITY_COMMAND, argv)
