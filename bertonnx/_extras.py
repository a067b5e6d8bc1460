"""Optional dependencies: import them where used, or fail with the one line that installs them."""

from __future__ import annotations

import importlib

__all__ = ["install_hint", "require"]


def install_hint(extra: str) -> str:
    """The pip command that installs ``bertonnx[extra]``."""
    return f"pip install 'bertonnx[{extra}]'"


def require(module: str, extra: str) -> None:
    """Import ``module`` or raise ``ImportError`` naming the command that installs it.

    Raises:
        ImportError: ``module`` is not installed.
    """
    try:
        importlib.import_module(module)
    except ImportError:
        raise ImportError(f"this needs {module}, from the bertonnx {extra} extra: {install_hint(extra)}") from None
