"""setuptools' build backend, building wheels with a fresh ``build/`` that it removes afterwards, and editable
installs whose ``bertonnx`` no folder named ``bertonnx`` can shadow.

pip builds a local project in its own directory, and setuptools leaves ``build/lib`` behind: an untracked
folder in the clone, and worse, a stale one, because setuptools copies into it and packs everything it
holds, so a module deleted from the source tree would ship in the next wheel. This wrapper (a documented
setuptools pattern: an in-tree backend named by ``backend-path`` in ``pyproject.toml``) removes
``build/`` before and after each wheel.

Editable installs (``pip install -e .``): setuptools maps our three top-level names to the clone's folders
with a finder it *appends* to ``sys.meta_path``, after Python's own path finder. A script or REPL started in
the folder that holds the clone has that folder first on ``sys.path``, where the clone's own folder
``bertonnx/`` (no ``__init__.py``) is a namespace package; the path finder returns it before setuptools'
finder is asked, and ``from bertonnx import BertOnnx`` fails (``unknown location``). The editable wheel
therefore also carries :data:`FINDER_FIRST_PTH`, run after setuptools' own ``.pth``, which moves that finder
to the front. Only the mapped names (``bertonnx``, ``bertonnx_export``, ``bertonnx_benchmarks``) are
affected; the path-based alternative (``editable_mode=compat``) would instead make the clone's ``export``,
``benchmarks`` and ``tests`` folders importable under those generic names.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every hook this wrapper does not change

BUILD_DIR = Path("build")


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    """setuptools' ``build_wheel`` between two removals of ``build/``."""
    shutil.rmtree(BUILD_DIR, ignore_errors=True)
    try:
        return str(_setuptools.build_wheel(wheel_directory, config_settings, metadata_directory))
    finally:
        shutil.rmtree(BUILD_DIR, ignore_errors=True)


#: Sorts after setuptools' ``__editable__.bertonnx-<version>.pth`` (``.pth`` files run in name order).
FINDER_FIRST_PTH = "__editable__.bertonnx-zz-finder-first.pth"
FINDER_FIRST_LINE = (
    "import sys; sys.meta_path.sort(key=lambda finder: "
    'not getattr(finder, "__module__", "").startswith("__editable___bertonnx_"))\n'
)


def build_editable(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    """setuptools' ``build_editable``, plus :data:`FINDER_FIRST_PTH` (see the module docstring)."""
    name = str(_setuptools.build_editable(wheel_directory, config_settings, metadata_directory))
    add_to_wheel(Path(wheel_directory) / name, FINDER_FIRST_PTH, FINDER_FIRST_LINE.encode())
    return name


def add_to_wheel(wheel: Path, member: str, data: bytes) -> None:
    """Add a top-level file to ``wheel`` and to its ``RECORD``, rewriting the archive in place."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    staged = wheel.with_name(wheel.name + ".partial")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            content = source.read(item.filename)
            if item.filename.endswith(".dist-info/RECORD"):
                content = content.rstrip(b"\n") + f"\n{member},sha256={digest},{len(data)}\n".encode()
            target.writestr(item, content)
        target.writestr(member, data)
    staged.replace(wheel)
