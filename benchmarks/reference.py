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


def load_reference(manifest: Manifest, reference: str | None) -> Any:
    """Rebuild the PyTorch model behind ``manifest`` as ``export.graph.BertWithHeads`` in eval mode.

    Random-weights exports are rebuilt from the manifest's source and seed (bit-identical weights);
    pretrained ones load ``reference`` (a hub id or checkpoint directory) or the manifest's source.
    Heads the export seeded (``--allow-random-heads``) are seeded the same way.

    Raises:
        ValueError: no reference is given and the manifest's source cannot be loaded.
    """
    from export.errors import ExportError
    from export.graph import BertWithHeads
    from export.source import load_source

    weights = manifest.weights
    model_id = reference or str(manifest.data["source"]["model"])
    seed = int(weights.get("seed") or 0)
    try:
        if weights.get("kind") == "random":
            source = load_source(model_id, weights="random", seed=seed)
        else:
            source = load_source(
                model_id, weights="pretrained", seed=seed, allow_random_heads=bool(weights.get("random_heads"))
            )
    except ExportError as exc:
        raise ValueError(
            f"cannot load the PyTorch reference {model_id!r}: {exc}. Pass --reference MODEL_OR_DIR (the "
            "checkpoint the export was made from)."
        ) from None
    return BertWithHeads(source.model).eval(), source


def check_cases(manifest: Manifest) -> list[Any]:
    """The gate's cases for the module pair and its padded batch, tokenized with the export's tokenizer."""
    from export.gate import build_cases

    cases = build_cases(manifest.directory / "tokenizer.json", manifest.max_position_embeddings)
    return [cases[0], cases[-1]]


def torch_outputs(model: Any, cases: list[Any]) -> list[dict[str, np.ndarray]]:
    """The reference outputs of ``cases`` (fp32, no grad)."""
    from export.gate import reference_outputs

    return list(reference_outputs(model, cases))


def verdict(
    variant: str, cases: list[Any], reference: list[dict[str, np.ndarray]], candidate: list[dict[str, np.ndarray]]
) -> dict[str, Any]:
    """Compare ``candidate`` with ``reference`` with the gate's figures and thresholds.

    Returns:
        ``{"correct": bool, "figures": {...}, "breaches": [...]}``; int8 is judged by the gate's cosine
        thresholds, every other variant (and torch) by its max abs difference.
    """
    from export.gate import breaches, compare

    try:
        figures = compare(cases, reference, candidate)
    except ValueError as exc:  # a shape mismatch is a wrong result, not a crash
        return {"correct": False, "figures": {}, "breaches": [str(exc)]}
    # The gate judges variants named int8 by cosine and everything else by max abs difference.
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
