"""What every command says about the model it ran, said the same way: the ``--json`` envelope and the
random-weights banner.

Every command's ``--json`` prints one object, built by :func:`envelope`::

    {"model": DIR, "variant": "fp32", "random_weights": false, "results": [...], ...}

``results`` holds one entry per input, in input order, each exactly what the Python method returns for that
input (transformers' pipeline shape where there is one); ``rerank`` lists its texts best first, ``choose``
has one entry per context. A command whose answers went to a file (``embed --output``, ``batch``) or that
takes no input (``inspect``, ``walkthrough``, ``export``, ``parity``) has ``results: []`` and says what it did
in keys beside (documented in docs/cli.md). ``variant`` is ``null`` where no single variant ran.

A model whose weights are (partly) random says so in the JSON (``random_weights``) or, in text output, in
one banner (:func:`random_banner`); ``batch`` and ``serve`` print that banner once on stderr instead of
Python's warning line. This module imports the standard library only.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

__all__ = ["ENVELOPE_KEYS", "RULE", "envelope", "print_random_banner", "random_banner"]

#: The keys every ``--json`` output starts with, in this order.
ENVELOPE_KEYS = ("model", "variant", "random_weights", "results")
RULE = "=" * 72


def envelope(
    model: str | Path, variant: str | None, random_weights: bool, results: Sequence[Any], /, **beside: Any
) -> dict[str, Any]:
    """The ``--json`` object of every command.

    Args:
        model: the model directory the command ran.
        variant: the variant that ran (``None``: none, or every one, e.g. ``inspect``).
        random_weights: whether the export holds seeded, not trained, weights (the manifest's flag).
        results: one answer per input, in input order (empty when the answers went to a file).
        beside: the command's own keys (``pooling``, ``output`` ...); they may not reuse the envelope's.

    Raises:
        ValueError: a key of ``beside`` is one of the envelope's.
    """
    clash = sorted(set(beside) & set(ENVELOPE_KEYS))
    if clash:
        raise ValueError(f"{', '.join(clash)} is an envelope key; give the command's own keys other names")
    return {
        "model": str(model),
        "variant": variant,
        "random_weights": bool(random_weights),
        "results": list(results),
        **beside,
    }


def random_banner(random_weights: bool, weights: Mapping[str, Any]) -> str:
    """The banner text output shows above a random-weights model's answers ("" for a trained model)."""
    if not random_weights:
        return ""
    note = weights.get("note") or "some weights are random"
    return f"{RULE}\n!! {note}\n{RULE}\n"


def print_random_banner(random_weights: bool, weights: Mapping[str, Any], stream: TextIO | None = None) -> None:
    """Print :func:`random_banner` on ``stream`` (default stderr), nothing for a trained model."""
    banner = random_banner(random_weights, weights)
    if banner:
        print(banner.rstrip("\n"), file=stream or sys.stderr, flush=True)
