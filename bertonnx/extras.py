"""The optional extras, which modules each brings, and the one-line install hint for a missing one.

The runtime needs only onnxruntime, tokenizers and numpy. The commands that need more (``export``,
``parity``, ``bench``, and the ``bf16`` variant) check their extra with :func:`require_extra` before they
start, so a runtime-only install gets one line naming what is missing and the commands that install it,
instead of a traceback from deep inside (or from a worker process).

PyTorch is installed first and from PyTorch's own CPU wheel index: on Linux, PyPI's wheel of the same
version is the CUDA build (several GB with its ``nvidia-*`` dependencies), which a resolver would pick if
it met ``torch`` first as an extra's dependency.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys

__all__ = [
    "EXTRA_MODULES",
    "OPTIONAL_MODULES",
    "TORCH_CPU_INDEX",
    "TORCH_PIN",
    "extra_of_module",
    "install_hint",
    "missing_modules",
    "require_extra",
]

#: The PyTorch release the project is tested with (the Makefile's ``TORCH_PIN`` says the same).
TORCH_PIN = "torch==2.13.0"
#: PyTorch's own index of CPU-only wheels (``torch==2.13.0`` there is ``2.13.0+cpu``).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: Top-level modules each extra brings that its commands cannot run without (a test keeps this in step
#: with ``pyproject.toml``, together with :data:`OPTIONAL_MODULES`).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "export": ("torch", "transformers", "optimum", "onnx", "huggingface_hub"),
    "openvino": ("openvino",),
    "bench": (
        "torch",
        "transformers",
        "optimum",
        "onnx",
        "huggingface_hub",
        "matplotlib",
        "psutil",
        "sentence_transformers",
        "fastapi",
        "uvicorn",
        "httptools",
        "pydantic",
        "prometheus_client",
        "aiohttp",
        "httpx",
    ),
    "serve": ("fastapi", "uvicorn", "httptools", "pydantic", "prometheus_client"),
    "batch": ("pyarrow", "tqdm"),
    "ray": ("ray", "pyarrow", "tqdm", "fastapi", "uvicorn", "httptools", "pydantic", "prometheus_client"),
}
#: Modules an extra also installs that its commands can do without: OpenVINO runs only the ``bf16``
#: variant, and whatever needs it checks for it there (export refuses ``bf16``, bench skips its peak);
#: sentence-transformers only a sentence-transformers folder's export (which names it when missing).
OPTIONAL_MODULES: dict[str, tuple[str, ...]] = {
    "export": ("openvino", "sentence_transformers"),
    "bench": ("openvino",),
}
#: Extras that pull in torch, so their hint installs the CPU build first.
_TORCH_EXTRAS = ("export", "bench")


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (found without importing them).

    Raises:
        ValueError: ``extra`` is not one of :data:`EXTRA_MODULES`.
    """
    if extra not in EXTRA_MODULES:
        raise ValueError(f"unknown extra {extra!r}; expected one of {', '.join(EXTRA_MODULES)}")
    return [name for name in EXTRA_MODULES[extra] if not _importable(name)]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a finder refused it, or a half-imported module without a spec
        return False


def install_hint(extra: str) -> str:
    """The commands that install ``extra`` into the running Python: from a clone first (bertonnx is not on
    a public index), then from an index that has it.

    Example: ``python -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu, then
    python -m pip install -e '.[export]' in the clone of bertonnx (or python -m pip install 'bertonnx[export]'
    from an index that has it)`` where ``python`` is this interpreter's path, so the commands install where
    the command runs.
    """
    pip = f"{shlex.quote(sys.executable)} -m pip install"
    steps = f"{pip} {TORCH_PIN} --index-url {TORCH_CPU_INDEX}, then " if extra in _TORCH_EXTRAS else ""
    clone, index = f"{pip} -e '.[{extra}]'", f"{pip} 'bertonnx[{extra}]'"
    return f"{steps}{clone} in the clone of bertonnx (or {index} from an index that has it)"


def require_extra(extra: str, what: str) -> None:
    """Raise one line naming the missing modules and the install commands when ``extra`` is incomplete.

    Args:
        extra: a key of :data:`EXTRA_MODULES`.
        what: what needs it, for the message (e.g. "`bertonnx bench`").

    Raises:
        ImportError: a module of the extra is missing; the message names it and the fix.
    """
    missing = missing_modules(extra)
    if missing:
        raise ImportError(
            f"{what} needs the {extra} extra, and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} "
            f"not installed. Install it: {install_hint(extra)}"
        )


def extra_of_module(name: str) -> str | None:
    """The smallest extra that brings the top-level module ``name``, or ``None``."""
    top = name.split(".")[0]
    holders = [extra for extra, modules in EXTRA_MODULES.items() if top in modules + OPTIONAL_MODULES.get(extra, ())]
    return min(holders, key=lambda extra: len(EXTRA_MODULES[extra]), default=None)
