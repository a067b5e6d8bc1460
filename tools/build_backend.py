"""setuptools' build backend, building wheels with a fresh ``build/`` that it removes afterwards.

pip builds a local project in its own directory, and setuptools leaves ``build/lib`` behind: an untracked
folder in the clone, and worse, a stale one, because setuptools copies into it and packs everything it
holds, so a module deleted from the source tree would ship in the next wheel. This wrapper (a documented
setuptools pattern: an in-tree backend named by ``backend-path`` in ``pyproject.toml``) removes
``build/`` before and after each wheel. Editable installs are untouched.
"""

from __future__ import annotations

import shutil
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
