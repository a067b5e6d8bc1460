"""The house's shape (issue 29): no import circle anywhere in ``bertonnx``, no module over 600 lines, and the
layers the design names: the task layer knows no caller, the server's request steps no route, a route no other
route's private names, and the core no HTTP.

The walk reads every module's imports (module level and inside functions; ``TYPE_CHECKING`` blocks aside, as
they never run) with :mod:`ast`, so it needs nothing installed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bertonnx

pytestmark = pytest.mark.torch_free

PACKAGE = Path(bertonnx.__file__).parent
MAX_MODULE_LINES = 600


def _name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_imports(path: Path, base: str, files: set[str]) -> set[str]:
    """The ``bertonnx`` modules one file imports; ``base``: the package relative imports start from."""
    names: set[str] = set()
    pending: list[ast.AST] = [ast.parse(path.read_text(encoding="utf-8"))]
    while pending:
        for child in ast.iter_child_nodes(pending.pop()):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                names.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                target = child.module or ""
                if child.level:
                    anchor = base.split(".")[: len(base.split(".")) - (child.level - 1)]
                    target = ".".join(anchor + ([target] if target else []))
                for alias in child.names:
                    full = f"{target}.{alias.name}"
                    names.add(full if full in files else target)
            pending.append(child)
    return {name for name in names if name in files}


def _imports() -> dict[str, set[str]]:
    """Module -> the ``bertonnx`` modules it imports (a package's ``__init__`` stands for its name)."""
    files = {_name(p): p for p in PACKAGE.rglob("*.py")}
    found: dict[str, set[str]] = {}
    for module, path in files.items():
        base = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        found[module] = _module_imports(path, base, set(files)) - {module}
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle among modules (packages' ``__init__`` left out: they re-export lazily), or ``None``."""
    nodes = {m for m in graph if not (PACKAGE.parent / m.replace(".", "/") / "__init__.py").is_file()}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node] & nodes):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(nodes):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circle_in_bertonnx() -> None:
    cycle = _cycle(_imports())
    assert cycle is None, " -> ".join(cycle or [])


def test_no_module_over_600_lines() -> None:
    long = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_the_layers_the_design_names() -> None:
    graph = _imports()
    callers = ("bertonnx.model", "bertonnx.serve", "bertonnx.corpus", "bertonnx.cli", "bertonnx.command")
    for module, imported in graph.items():
        if module.startswith("bertonnx.tasks"):  # the task layer knows none of its callers
            assert not {i for i in imported if i.startswith(callers)}, (module, imported)
        if module == "bertonnx.serve.pipeline":  # the request steps know no route and no app
            assert not {i for i in imported if i.startswith("bertonnx.serve.routes") or i == "bertonnx.serve.app"}
        if module.startswith("bertonnx.serve.routes."):  # a route reaches the steps, never the app
            assert "bertonnx.serve.app" not in imported, module
        if not module.startswith(("bertonnx.serve", "bertonnx.corpus")):  # the core knows no edge
            assert not {i for i in imported if i.startswith(("bertonnx.serve", "bertonnx.corpus"))}, (module, imported)


def test_routes_use_no_private_name_of_another_module() -> None:
    for path in (PACKAGE / "serve").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.endswith("__")]
                assert not private, f"{path.relative_to(PACKAGE)} imports private names {private}"
