"""The PyTorch reference: the ``BertForPreTraining`` an export came from, and the correctness check.

Imported only by processes that run torch (the check and the torch runner). The comparison figures and
thresholds are the export gate's (``export/gate.py``), not a copy of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bertonnx.manifest import OUTPUT_NAMES, Manifest

#: Correctness inputs: the module's pair and the gate's padded batch (pairs, an empty text, 1–60 tokens).
CHECK_CASE_NAMES = ("module pair", "padded batch")
#: Denominator floor of a cosine (an all-zero vector gives cosine 0, not a division by zero).
COSINE_FLOOR = 1e-30


def load_reference(manifest: Manifest, reference: str | None) -> Any:
    """Rebuild the PyTorch model behind ``manifest`` as ``export.graph.BertWithHeads`` in eval mode.

    Random-weights exports are rebuilt from the manifest's source and seed (bit-identical weights);
    pretrained ones load ``reference`` (a hub id or checkpoint directory) or the manifest's source.
    Heads the export seeded (``--allow-random-heads``) are seeded the same way.

    Raises:
        ValueError: no reference is given and the manifest's source cannot be loaded.
    """
    from bertonnx_export.errors import ExportError
    from bertonnx_export.graph import BertWithHeads
    from bertonnx_export.heads import seeded_labels
    from bertonnx_export.source import load_source

    weights = manifest.weights
    model_id = reference or str(manifest.data["source"]["model"])
    seed = int(weights.get("seed") or 0)
    try:
        if weights.get("kind") == "random":
            source = load_source(
                model_id, weights="random", seed=seed, task=manifest.architecture, labels=seeded_labels(manifest)
            )
        else:
            source = load_source(
                model_id,
                weights="pretrained",
                seed=seed,
                allow_random_heads=bool(weights.get("random_heads")),
                task=manifest.architecture,
                labels=seeded_labels(manifest),
            )
    except ExportError as exc:
        raise ValueError(
            f"cannot load the PyTorch reference {model_id!r}: {exc}. Pass --reference MODEL_OR_DIR (the "
            "checkpoint the export was made from)."
        ) from None
    return BertWithHeads(source.model).eval(), source


def check_cases(manifest: Manifest) -> list[Any]:
    """The gate's cases for the module pair and its padded batch, tokenized with the export's tokenizer."""
    from bertonnx_export.gate import build_cases

    cases = build_cases(manifest.directory / "tokenizer.json", manifest.max_position_embeddings)
    return [cases[0], cases[-1]]


def gate_cases(manifest: Manifest) -> list[Any]:
    """All the export gate's cases: 18 singles and pairs (2 to 512 tokens) and the padded batch of 6."""
    from bertonnx_export.gate import build_cases

    return list(build_cases(manifest.directory / "tokenizer.json", manifest.max_position_embeddings))


def torch_outputs(model: Any, cases: list[Any]) -> list[dict[str, np.ndarray]]:
    """The reference outputs of ``cases`` (fp32, no grad)."""
    from bertonnx_export.gate import reference_outputs

    return list(reference_outputs(model, cases))


def mean_pooled_min_cosine(
    cases: list[Any], reference: list[dict[str, np.ndarray]], candidate: list[dict[str, np.ndarray]]
) -> float:
    """The smallest cosine, over every sequence of ``cases``, between the two mean-pooled embeddings.

    A sequence's mean-pooled embedding is the mean of its ``last_hidden_state`` over its valid tokens
    (padding excluded), as sentence-embedding users pool it; computed in float64.
    """
    worst = 1.0
    for case, ref, got in zip(cases, reference, candidate, strict=True):
        for row, length in enumerate(case.lengths):
            a = ref["last_hidden_state"][row, :length].astype(np.float64).mean(axis=0)
            b = got["last_hidden_state"][row, :length].astype(np.float64).mean(axis=0)
            if not np.isfinite(b).all():
                return -1.0
            cosine = float(a @ b / max(float(np.linalg.norm(a) * np.linalg.norm(b)), COSINE_FLOOR))
            worst = min(worst, cosine)
    return worst


def accuracy_figures(
    cases: list[Any], reference: list[dict[str, np.ndarray]], candidate: list[dict[str, np.ndarray]]
) -> dict[str, float]:
    """The gate's figures (``export.gate.compare``) plus the mean-pooled minimum cosine.

    Raises:
        ValueError: an output's shape differs from the reference's.
    """
    from bertonnx_export.gate import compare

    figures = compare(cases, reference, candidate)
    figures["mean_pooled_min_cosine"] = mean_pooled_min_cosine(cases, reference, candidate)
    return figures


def verdict(
    variant: str, cases: list[Any], reference: list[dict[str, np.ndarray]], candidate: list[dict[str, np.ndarray]]
) -> dict[str, Any]:
    """Compare ``candidate`` with ``reference`` with the gate's figures and thresholds.

    Returns:
        ``{"correct": bool, "figures": {...}, "breaches": [...]}``; lossy variants (int8, bf16) are judged
        by the gate's cosine thresholds, every other variant (and torch) by its max abs difference.
    """
    from bertonnx_export.gate import breaches

    try:
        figures = accuracy_figures(cases, reference, candidate)
    except ValueError as exc:  # a shape mismatch is a wrong result, not a crash
        return {"correct": False, "figures": {}, "breaches": [str(exc)]}
    # The gate judges its lossy variants (int8, bf16) by cosines and NSP probabilities, the rest by max abs.
    found = breaches("int8" if "int8" in variant else variant, figures)
    return {"correct": not found, "figures": figures, "breaches": found}


def save_cases(path: Path, cases: list[Any], outputs: dict[str, list[dict[str, np.ndarray]]]) -> None:
    """Write the cases' feeds and each runner's outputs to one ``.npz`` the torch-free workers can read."""
    arrays: dict[str, np.ndarray] = {}
    for i, case in enumerate(cases):
        for key, value in case.feeds.items():
            arrays[f"case{i}/{key}"] = value
        arrays[f"case{i}/lengths"] = np.asarray(case.lengths, dtype=np.int64)
        for runner, results in outputs.items():
            for name in OUTPUT_NAMES:
                arrays[f"case{i}/{runner}/{name}"] = results[i][name]
    np.savez(path, **arrays)
