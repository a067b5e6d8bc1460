"""One table of every shared option's default on each surface: Python, the command line, HTTP, the corpus job.

Generated from the vocabulary (:data:`bertonnx.vocabulary.OPTIONS`) and from :class:`bertonnx.BertOnnx`'s own
signatures, so the table in docs/cli.md cannot drift from the code (a test compares them, and compares each
Python default with the command's). An HTTP default that a protocol sets rather than bertonnx (TEI's
``normalize: true`` on ``/embed``) is marked as such.
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable, Mapping

from .model import BertOnnx
from .vocabulary import OPTIONS, Option, field_name

__all__ = ["METHODS", "NONE_MEANS", "PROTOCOL_CONVENTIONS", "defaults_table", "markdown_table", "python_defaults"]

#: The :class:`~bertonnx.BertOnnx` method behind each command that runs one (``BertOnnx()``: the constructor).
METHODS: Mapping[str, str] = {
    "BertOnnx()": "__init__",
    "tokenize": "tokenize",
    "nsp": "nsp",
    "embed": "embed",
    "classify": "classify",
    "rerank": "rerank",
    "fill-mask": "fill_mask",
    "tag": "tag",
    "answer": "answer",
    "choose": "choose",
}
#: HTTP defaults a protocol sets, not bertonnx: why they differ from offline.
PROTOCOL_CONVENTIONS: Mapping[str, str] = {
    "normalize": "TEI's `/embed`; offline nothing is scaled unless asked",
    "top_k": "TEI's `/predict`",
}
#: What a ``None`` default means, where the option declares no ``default_text`` (the methods' docstrings agree).
NONE_MEANS: Mapping[str, str] = {
    "truncation": "off (a sentence-transformers export: on, at its max_seq_length)",
    "normalize": "off",
    "max_length": "the export's max_seq_length, else its positions",
}


def python_defaults(option: Option) -> dict[str, object]:
    """``command -> default`` of ``option``'s keyword in each method that takes it (named by its command)."""
    found: dict[str, object] = {}
    if option.python is not None:
        return found
    for command, method in METHODS.items():
        parameter = inspect.signature(getattr(BertOnnx, method)).parameters.get(option.name)
        if parameter is not None and parameter.default is not inspect.Parameter.empty:
            found[command] = parameter.default
    return found


def _shown(option: Option, value: object, python: bool) -> str:
    if value is None:
        return NONE_MEANS.get(option.name) or option.default_text or "none"
    if python:
        return f"`{value!r}`"
    if option.action == "store_true":
        return "on" if value else "off"
    return f"`{value}`"


def _per_command(option: Option, defaults: Mapping[str, object], show: Callable[[object], str]) -> str:
    """One default for all, or the most common one first, then the others with the commands they hold for."""
    if not defaults:
        return "–"
    groups: dict[str, list[str]] = {}
    for command, value in defaults.items():
        groups.setdefault(show(value), []).append(command)
    common = max(groups, key=lambda cell: len(groups[cell]))
    return "; ".join([common, *(f"{', '.join(groups[cell])}: {cell}" for cell in groups if cell != common)])


def defaults_table() -> str:
    """The markdown table of docs/cli.md: every shared option's default per surface."""
    lines = [
        "| option | Python (`BertOnnx`) | command line | HTTP | corpus job (`batch`) |",
        "|---|---|---|---|---|",
    ]
    for option in OPTIONS.values():
        if option.python == "":
            python = "–"
        elif option.python is not None:
            python = f"`{option.python}`"
        else:
            python = _per_command(option, python_defaults(option), functools.partial(_shown, option, python=True))
        commands = [c for c in option.commands if c not in ("batch", "serve")]
        cli = _per_command(
            option, {c: option.default_for(c) for c in commands}, functools.partial(_shown, option, python=False)
        )
        http = []
        if "serve" in option.commands:
            http.append(f"`bertonnx serve {option.flag}`: {_shown(option, option.default_for('serve'), False)}")
        if option.http_field != "":
            http.append(f"`{field_name(option.name)}`: {option.http_default or json.dumps(option.default)}")
            if option.name in PROTOCOL_CONVENTIONS:
                http[-1] += f" — **protocol convention** ({PROTOCOL_CONVENTIONS[option.name]})"
        corpus = _shown(option, option.default_for("batch"), False) if "batch" in option.commands else "–"
        row = [f"`{option.name}` ({option.flag})", python, cli, "; ".join(http) or "–", corpus]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _default(option: Option, value: object) -> str:
    if option.action == "store_true":
        return "on" if value else "off"
    return option.default_text or "–" if value is None else f"`{value}`"


def markdown_table() -> str:
    """The table of docs/cli.md: every shared option, its names and its default per surface."""
    lines = [
        "| Python | flag | commands | default | HTTP field: default |",
        "|---|---|---|---|---|",
    ]
    for option in OPTIONS.values():
        python = f"`{option.name}`" if option.python is None else f"`{option.python}`" if option.python else "–"
        flags = f"`{option.flag}`" + "".join(
            f" (old: `{alias}` on {', '.join(commands)})" for alias, commands in option.aliases.items()
        )
        default = _default(option, option.default) + "".join(
            f"; {command}: {_default(option, c.default)}" for command, c in option.conventions.items() if c.sets_default
        )
        http = "–"
        if option.http_field != "":
            shown = option.http_default or json.dumps(option.default)
            if option.default is None and option.default_text and not option.http_default:
                shown += f" ({option.default_text})"
            http = f"`{field_name(option.name)}`: {shown}"
        lines.append(f"| {python} | {flags} | {', '.join(option.commands)} | {default} | {http} |")
    return "\n".join(lines)
