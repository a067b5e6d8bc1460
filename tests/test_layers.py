"""The layers stay apart: the serving core (scheduler, engine) imports nothing of the HTTP layer.

The scheduler and the engine raise the core's typed errors (:mod:`bertonnx.errors`); the server maps them to
statuses in one place (:func:`bertonnx.serve.errors.from_core`). A static walk of every import the scheduler
can reach (module level, functions and the packages it lives in) keeps it so, and a fresh interpreter checks
that importing it loads no web framework.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import bertonnx

pytestmark = pytest.mark.torch_free

PACKAGE = Path(bertonnx.__file__).parent
#: The HTTP layer: the server's modules and the libraries only it uses.
HTTP_MODULES = {
    f"bertonnx.serve.{name}"
    for name in ("app", "errors", "middleware", "server", "protocol", "kserve", "cli", "arguments", "ray_serve")
}
HTTP_LIBRARIES = {"fastapi", "starlette", "uvicorn", "pydantic", "httptools"}


def _source(module: str) -> Path | None:
    """The file of a ``bertonnx`` module (a package's ``__init__.py``), or ``None`` outside bertonnx."""
    parts = module.split(".")
    if parts[0] != "bertonnx":
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for the type checker never run)."""
    nodes: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        nodes.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _imports(module: str, path: Path) -> set[str]:
    """Every module ``module`` imports anywhere in its file (relative imports resolved), with its parents."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names if _source(f"{target}.{alias.name}"))
    return found


def reachable(start: str) -> set[str]:
    """The modules importing ``start`` may load: its imports and their parent packages, transitively."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        module = stack.pop()
        parts = module.split(".")
        for name in (".".join(parts[: i + 1]) for i in range(len(parts))):  # a module's packages run first
            if name in seen:
                continue
            seen.add(name)
            path = _source(name)
            if path is not None:
                stack.extend(_imports(name, path))
    return seen


@pytest.mark.parametrize("module", ["bertonnx.serve.scheduler", "bertonnx.serve.engine"])
def test_the_serving_core_imports_nothing_of_the_http_layer(module: str) -> None:
    modules = reachable(module)
    assert "bertonnx.errors" in modules or module.endswith("engine")  # the walk does see the core
    assert not modules & HTTP_MODULES, sorted(modules & HTTP_MODULES)
    assert not {name.split(".")[0] for name in modules} & HTTP_LIBRARIES


def test_the_walk_finds_the_http_layer_where_it_is() -> None:
    """The walk is not blind: the app does reach the HTTP layer and its libraries."""
    modules = reachable("bertonnx.serve.app")
    assert {"bertonnx.serve.errors", "bertonnx.serve.middleware", "bertonnx.errors"} <= modules
    assert {"fastapi", "starlette"} <= {name.split(".")[0] for name in modules}


def test_importing_the_scheduler_loads_no_web_framework() -> None:
    pytest.importorskip("prometheus_client")  # the scheduler records metrics (the serve extra)
    code = (
        "import sys, bertonnx.serve.scheduler\n"
        f"loaded = sorted(name for name in sys.modules if name.split('.')[0] in {sorted(HTTP_LIBRARIES)!r} "
        f"or name in {sorted(HTTP_MODULES)!r})\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
