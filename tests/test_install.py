"""What an install gets: only this project's top-level names, no build/ left in the clone, torch's CPU build.

The wheel is built from a copy of the working tree made into its own git repository, so the check that
nothing is left behind sees exactly what ``pip install .`` leaves in a clone.
"""

from __future__ import annotations

import http.server
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

import bertonnx
from bertonnx.extras import EXTRA_MODULES, OPTIONAL_MODULES, TORCH_CPU_INDEX, TORCH_PIN

from .conftest import ROOT

OUR_PACKAGES = {"bertonnx", "bertonnx_export", "bertonnx_benchmarks"}
INSTALLED_ENV = "BERTONNX_TEST_INSTALLED"
INSTALL_TORCH = ROOT / "tools" / "install_torch.py"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tracked files of this working tree, as they are now, committed in a fresh repository."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    target = tmp_path_factory.mktemp("clone") / "bertonnx"
    for name in _git(ROOT, "ls-files", "-z").split("\0"):
        if name and (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    _git(target, "init", "-q")
    _git(target, "add", "-A")
    _git(target, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "snapshot")
    return target


def test_the_wheel_holds_only_our_names_and_leaves_the_clone_clean(clone: Path, tmp_path: Path) -> None:
    """...and building it prints no setuptools warning (`make demo` showed one for the assets folder; pip shows
    the backend's output without -q)."""
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path)]
    result = subprocess.run([*command, str(clone)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    warned = [line.strip() for line in (result.stdout + result.stderr).splitlines() if "Warning" in line]
    assert not warned, "building the wheel warned:\n" + "\n".join(warned)
    (wheel,) = tmp_path.glob("bertonnx-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == OUR_PACKAGES
    assert "bertonnx/py.typed" in names
    assert "bertonnx_export/assets/bert-base-uncased/vocab.txt" in names
    assert "bertonnx_export/assets/bert-base-uncased/config.json" in names
    assert "bertonnx_export/assets/bert_uncased_L-2_H-128_A-2/config.json" in names
    assert not [n for n in names if n.split("/")[0] in ("export", "benchmarks", "tests", "tools")]
    assert _git(clone, "status", "--porcelain", "--untracked-files=all") == ""  # no build/ left behind
    assert not (clone / "build").exists()


def test_a_stale_build_folder_does_not_leak_into_the_wheel(clone: Path, tmp_path: Path) -> None:
    """setuptools packs whatever build/lib holds; the project's backend starts from an empty build/."""
    stale = clone / "build" / "lib" / "bertonnx" / "deleted_module.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("x = 1\n")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path)]
    assert subprocess.run([*command, str(clone)], capture_output=True, timeout=600).returncode == 0
    (wheel,) = tmp_path.glob("bertonnx-*.whl")
    assert "bertonnx/deleted_module.py" not in zipfile.ZipFile(wheel).namelist()
    assert not (clone / "build").exists()


def test_an_editable_install_is_not_shadowed_by_the_clone_folder(clone: Path, tmp_path: Path) -> None:
    """From the folder holding the clone (named ``bertonnx``), ``import bertonnx`` is the package, not that folder.

    The probe runs without the venv's site-packages and PYTHONPATH (``-S -E``): they may hold another bertonnx.
    """
    wheels, site_dir = tmp_path / "wheels", tmp_path / "site"
    wheels.mkdir()
    build = "import sys; sys.path.insert(0, 'tools'); from build_backend import build_editable; "
    build += "print(build_editable(sys.argv[1]))"
    result = subprocess.run([sys.executable, "-c", build, str(wheels)], cwd=clone, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    zipfile.ZipFile(wheels / result.stdout.strip().splitlines()[-1]).extractall(site_dir)  # what pip installs
    probe = (
        "import importlib.util, site, sys; site.addsitedir(sys.argv[1]); "
        "print([str(importlib.util.find_spec(name).origin) for name in ('bertonnx', 'bertonnx_export')])"
    )

    def found() -> str:
        run = subprocess.run(
            [sys.executable, "-S", "-E", "-c", probe, str(site_dir)], cwd=clone.parent, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    assert clone.name == "bertonnx"
    assert found() == str([str(clone / "bertonnx" / "__init__.py"), str(clone / "export" / "__init__.py")])
    (site_dir / "__editable__.bertonnx-zz-finder-first.pth").unlink()  # setuptools' editable wheel alone:
    assert found().startswith("['None'")  # the clone's folder wins, as a namespace package without BertOnnx


@pytest.mark.torch_free
def test_generic_names_are_not_importable_outside_the_repository(tmp_path: Path) -> None:
    code = (
        "import importlib.util as u; "
        "print([n for n in ('export', 'benchmarks') if u.find_spec(n)], "
        "[n for n in ('bertonnx_export', 'bertonnx_benchmarks') if not u.find_spec(n)])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert result.stdout.strip() == "[] []", result.stderr


@pytest.mark.torch_free
def test_a_runtime_only_run_tests_the_installed_package() -> None:
    if not os.environ.get(INSTALLED_ENV):
        pytest.skip(f"{INSTALLED_ENV} is set only by the runtime-only CI job (make test-runtime-only)")
    assert "site-packages" in Path(bertonnx.__file__).parts, bertonnx.__file__
    assert importlib.util.find_spec("torch") is None
    for extra in ("export", "bench"):
        assert importlib.util.find_spec(EXTRA_MODULES[extra][0]) is None


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _distributions(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions an extra lists, with ``bertonnx[other]`` expanded."""
    found: set[str] = set()
    for requirement in extras[extra]:
        name = re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0]
        if _normalized(name) == "bertonnx":
            for included in re.findall(r"\[(.*?)\]", requirement)[0].split(","):
                found |= _distributions(extras, included.strip())
        else:
            found.add(_normalized(name))
    return found


def test_extra_modules_follow_pyproject() -> None:
    """``bertonnx.extras`` names, per extra, modules that cover exactly the distributions pyproject lists."""
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    owners = packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        covered = {
            _normalized(dist) for module in (*modules, *OPTIONAL_MODULES.get(extra, ())) for dist in owners[module]
        }
        assert covered == _distributions(extras, extra), extra


def test_the_torch_pin_is_the_same_everywhere() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert f"TORCH_PIN ?= {TORCH_PIN}\n" in makefile
    assert f"TORCH_CPU_INDEX ?= {TORCH_CPU_INDEX}\n" in makefile
    script = INSTALL_TORCH.read_text()
    assert f'DEFAULT_PIN = "{TORCH_PIN}"' in script
    assert f'DEFAULT_INDEX = "{TORCH_CPU_INDEX}"' in script


class _Index(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        found = self.path == "/whl/cpu/torch/"
        self.send_response(200 if found else 404)
        self.end_headers()
        self.wfile.write(b"<a href='torch-2.13.0+cpu.whl'>torch</a>" if found else b"")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def cpu_index() -> Iterator[str]:
    """A stand-in for PyTorch's CPU index on 127.0.0.1, serving only ``/whl/cpu/torch/``."""
    server = http.server.HTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()
    server.server_close()


def _install_torch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(INSTALL_TORCH), "--dry-run", *args], capture_output=True, text=True, timeout=60
    )


def test_torch_comes_from_the_cpu_index_when_it_answers(cpu_index: str) -> None:
    result = _install_torch("--index", cpu_index)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].endswith(f"-m pip install --quiet {TORCH_PIN} --index-url {cpu_index}")


def test_torch_falls_back_to_the_pin_when_the_index_does_not_answer(cpu_index: str) -> None:
    with socket.socket() as silent:  # accepts connections (backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        cases = [
            f"http://127.0.0.1:{silent.getsockname()[1]}/whl/cpu",  # times out
            cpu_index.replace("/whl/cpu", "/elsewhere"),  # answers 404
            "",  # skipped
        ]
        for index in cases:
            start = time.perf_counter()
            result = _install_torch("--index", index, "--timeout", "1")
            assert result.returncode == 0, result.stderr
            assert "is not reachable" in result.stdout
            assert result.stdout.splitlines()[-1].endswith(f"-m pip install --quiet {TORCH_PIN}")
            assert time.perf_counter() - start < 30


def test_every_subpackage_is_in_the_distribution() -> None:
    """A subpackage missing from pyproject's package list installs nowhere: `pip install .` then fails at
    `import bertonnx` (the editable install used by the tests would hide it)."""
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    found = {".".join(path.parent.relative_to(ROOT).parts) for path in (ROOT / "bertonnx").rglob("__init__.py")}
    assert found - listed == set(), f"add these to [tool.setuptools] packages in pyproject.toml: {found - listed}"
