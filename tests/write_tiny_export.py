"""``python -m tests.write_tiny_export OUTDIR``: the tests' tiny export, for runs in a venv without torch.

Writes the tiny checkpoint to ``OUTDIR/checkpoint`` and its export (every variant) to ``OUTDIR/model``, the
same files the ``tiny_export`` fixture builds; point ``BERTONNX_TEST_TINY_EXPORT`` at ``OUTDIR/model``.
Run it with a venv that has the export extra (``.ci/run`` uses the ``make test`` venv).
"""

from __future__ import annotations

import sys
from pathlib import Path

from .conftest import save_tiny_checkpoint, write_tiny_export


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.write_tiny_export OUTDIR", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    model = write_tiny_export(outdir / "model", save_tiny_checkpoint(outdir / "checkpoint"))
    print(model)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
