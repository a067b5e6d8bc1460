"""One vocabulary of options: every command's parser holds each shared option as bertonnx.vocabulary declares it.

Every command of ``bertonnx --help`` is built (the lazily loaded ones too: serve, batch, export, parity, bench,
bench-serve, tag, answer, choose) and each shared option it has is compared with the declaration: flag and old
spellings, ``dest``, type, choices, default (the command's own only where the vocabulary records it) and
help text. The old spellings still parse to the same ``dest``; the core's option names reach each edge in
that edge's terms.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx.cli import COMMANDS
from bertonnx.command import ArgumentParser, _load, describe_error
from bertonnx.errors import InputTooLongError, OptionError
from bertonnx.vocabulary import (
    FIELD_NAMES,
    OPTIONS,
    TASK_COMMANDS,
    add_option,
    field_name,
    flag,
    ignore_labels,
)

from .conftest import ROOT

pytestmark = pytest.mark.torch_free


def parsers() -> dict[str, ArgumentParser]:
    return {name: _load(entry).parser(f"bertonnx {name}") for name, entry in COMMANDS.items()}


PARSERS = parsers()


def shared_actions(parser: ArgumentParser) -> dict[str, argparse.Action]:
    """The parser's actions that spell a shared option's flag or store into a shared option's name."""
    found = {}
    for action in parser._actions:
        for option in OPTIONS.values():
            if option.flag in action.option_strings or (action.option_strings and action.dest == option.name):
                assert option.name not in found, f"{parser.prog} declares {option.name} twice"
                found[option.name] = action
    return found


def test_every_command_is_built() -> None:
    assert {"serve", "batch", "export", "parity", "bench", "bench-serve", "tag", "answer", "choose"} <= set(PARSERS)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_shared_options_are_the_vocabulary(command: str) -> None:
    for name, action in shared_actions(PARSERS[command]).items():
        option = OPTIONS[name]
        where = f"bertonnx {command} {option.flag}"
        assert command in option.commands, f"{where}: not declared in OPTIONS[{name!r}].commands"
        assert action.option_strings == list(option.flags(command)), where
        assert action.dest == option.name, where
        assert action.type is option.kind, where
        assert (tuple(action.choices) if action.choices is not None else None) == option.choices, where
        assert action.default == option.default_for(command), where
        assert action.help == option.help_for(command), where


@pytest.mark.parametrize("name", list(OPTIONS))
def test_each_option_is_on_the_commands_it_names(name: str) -> None:
    have = {command for command, parser in PARSERS.items() if name in shared_actions(parser)}
    assert have == set(OPTIONS[name].commands)


def test_every_task_command_takes_batch_size_variant_and_threads() -> None:
    for command in TASK_COMMANDS:
        assert {"batch_size", "variant", "threads"} <= set(shared_actions(PARSERS[command])), command


def test_defaults_differ_only_where_a_convention_says_why() -> None:
    assert PARSERS["serve"].parse_intermixed_args(["DIR"]).max_batch_tokens == 512
    assert "measured: bertonnx/batching.py" in OPTIONS["max_batch_tokens"].help_for("serve")
    batch = PARSERS["batch"].parse_intermixed_args(["DIR", "--input", "a.txt", "--output", "o.parquet"])
    assert batch.max_batch_tokens == 2048
    assert PARSERS["fill-mask"].parse_intermixed_args(["DIR", "t"]).top_k == 5
    assert PARSERS["classify"].parse_intermixed_args(["DIR", "t"]).top_k == 1
    pooling = {PARSERS[c].parse_intermixed_args(["DIR", "--input", "a", "--output", "o"]).pooling for c in ("batch",)}
    pooling.add(PARSERS["embed"].parse_intermixed_args(["DIR", "t"]).pooling)
    pooling.add(PARSERS["serve"].parse_intermixed_args(["DIR"]).pooling)
    assert pooling == {None}  # the export's own: its sentence-transformers pipeline, else pooler


def test_old_spellings_parse_to_the_same_dest() -> None:
    batch = ["DIR", "--input", "a.txt", "--output", "o.parquet"]
    assert PARSERS["batch"].parse_intermixed_args([*batch, "--truncate"]).truncation is True
    assert PARSERS["batch"].parse_intermixed_args([*batch, "--truncation"]).truncation is True
    assert PARSERS["serve"].parse_intermixed_args(["DIR", "--auto-truncate"]).truncation is True
    assert PARSERS["serve"].parse_intermixed_args(["DIR", "--truncation"]).truncation is True
    assert "--auto-truncate: the old spelling, deprecated" in " ".join(PARSERS["serve"].format_help().split())
    # batch's old way to keep every label, beside --keep-all
    assert ignore_labels(PARSERS["batch"].parse_intermixed_args([*batch, "--ignore-label", ""])) == ()
    assert ignore_labels(PARSERS["batch"].parse_intermixed_args([*batch, "--keep-all"])) == ()
    assert ignore_labels(PARSERS["tag"].parse_intermixed_args(["DIR", "t"])) == ("O",)
    with pytest.raises(ValueError, match="--keep-all and --ignore-label contradict"):
        ignore_labels(PARSERS["tag"].parse_intermixed_args(["DIR", "t", "--keep-all", "--ignore-label", "O"]))
    # an old spelling stays on the command that had it only
    with pytest.raises(Exception, match="unrecognized arguments: --auto-truncate"):
        PARSERS["embed"].parse_intermixed_args(["DIR", "t", "--auto-truncate"])


def test_serve_options_take_truncation() -> None:
    pytest.importorskip("pydantic")
    from bertonnx.serve.arguments import serve_options

    assert serve_options(PARSERS["serve"].parse_intermixed_args(["DIR", "--auto-truncate"])).truncation is True
    assert serve_options(PARSERS["serve"].parse_intermixed_args(["DIR"])).truncation is False


def test_stride_is_one_type_everywhere() -> None:
    for command in ("tag", "batch"):
        words = ["DIR", "t"] if command == "tag" else ["DIR", "--input", "a", "--output", "o"]
        with pytest.raises(Exception, match="argument --stride: expected a whole number >= 0, got -1"):
            PARSERS[command].parse_intermixed_args([*words, "--stride", "-1"])


def test_errors_name_the_option_in_each_edge_terms() -> None:
    assert describe_error(OptionError("doc_stride", -3, ">= 0")) == "--doc-stride must be >= 0, got -3"
    assert describe_error(OptionError("max_seq_len", 9, ">= 32", "e.g. 384")).startswith("--max-seq-len must be")
    assert "pass --truncation" in describe_error(InputTooLongError(0, 600, 512))
    assert "pass --stride" in describe_error(InputTooLongError(0, 600, 512, option="stride"))
    assert flag("an_unknown_option") == "--an-unknown-option"
    assert FIELD_NAMES == {"truncation": "truncate"}
    assert field_name("stride") == "stride"
    pytest.importorskip("pydantic")
    from bertonnx.serve import errors

    assert errors.FIELD_NAMES is FIELD_NAMES
    assert errors.from_core(OptionError("truncation", 1, "a bool")).message == "truncate must be a bool, got 1"
    assert '"truncate": true' in errors.from_core(InputTooLongError(0, 600, 512)).message


def test_add_option_refuses_what_the_vocabulary_does_not_say() -> None:
    parser = ArgumentParser()
    with pytest.raises(ValueError, match="'embed' is not declared to take 'stride'"):
        add_option(parser, "stride", "embed")
    with pytest.raises(ValueError, match="'spelling' is not a shared option"):
        add_option(parser, "spelling", "embed")


def test_docs_table_is_the_vocabulary() -> None:
    from bertonnx.surface_defaults import markdown_table

    assert markdown_table() in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")


def test_docs_spell_old_flags_only_as_old_spellings() -> None:
    old = re.compile("|".join(re.escape(alias) + r"\b" for o in OPTIONS.values() for alias in o.aliases))
    for doc in ("README.md", "docs/cli.md", "docs/serving.md", "docs/corpus.md"):
        for number, line in enumerate((ROOT / doc).read_text(encoding="utf-8").splitlines(), 1):
            if old.search(line):
                assert "old" in line, f"{doc}:{number} spells an old flag as the current one: {line}"


def test_http_fields_take_the_vocabulary_defaults() -> None:
    """Every request body field that is a shared option has its default, unless the vocabulary records the
    protocol's own (TEI's ``normalize: true``, ``truncate`` absent: the server's default)."""
    pytest.importorskip("pydantic")
    from pydantic import BaseModel

    from bertonnx.serve import protocol

    by_field = {field_name(o.name): o for o in OPTIONS.values() if o.http_field != ""}
    checked = set()
    for model in vars(protocol).values():
        if not (isinstance(model, type) and issubclass(model, BaseModel) and model.__name__.endswith("Request")):
            continue
        for name, info in model.model_fields.items():
            option = by_field.get(name)
            if option is None:
                continue
            checked.add(option.name)
            default = list(info.default) if isinstance(info.default, tuple) else info.default
            if option.http_default is None:
                assert default == option.default, (model.__name__, name)
            elif option.http_default.startswith(("[", "null")):
                assert default == json.loads(option.http_default), (model.__name__, name)
    assert {"truncation", "pooling", "normalize", "top_k", "stride", "ignore_labels", "doc_stride"} <= checked


@pytest.mark.parametrize(
    ("argv", "answer"),
    [
        (["embed", "one", "two words", "three more words"], lambda out: out["results"]),
        (
            ["fill-mask", "the [MASK] is nice", "i [MASK] with you", "a [MASK]"],
            lambda out: [[c["score"] for c in masks[0]] for masks in out["results"]],
        ),
    ],
    ids=["embed", "fill-mask"],
)
def test_batch_size_reaches_the_model(
    argv: list[str],
    answer: Any,
    tiny_export: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--batch-size N`` on a task command caps the inputs of each onnxruntime run; the answers stay."""
    from bertonnx.cli import main
    from bertonnx.model import BertOnnx

    sizes: list[int] = []
    run_batch = BertOnnx.run_batch

    def counted(self: BertOnnx, batch: Any, outputs: Any = None) -> Any:
        sizes.append(len(batch))
        return run_batch(self, batch, outputs)

    monkeypatch.setattr(BertOnnx, "run_batch", counted)
    command, *words = argv
    found = {}
    for batch_size in ("256", "1"):
        sizes.clear()
        assert main([command, str(tiny_export), *words, "--batch-size", batch_size, "--json"]) == 0
        found[batch_size] = np.asarray(answer(json.loads(capsys.readouterr().out)))
        assert max(sizes) == min(len(words), int(batch_size)), sizes
    np.testing.assert_allclose(found["1"], found["256"], atol=1e-5)


def test_python_surfaces_use_the_vocabulary_names() -> None:
    """BertOnnx's methods, the corpus job's options and predictor, and the server's options name an option as
    the vocabulary does: no old spelling (``truncate``, ``auto_truncate``) as a keyword or field."""
    pytest.importorskip("pyarrow")
    pytest.importorskip("pydantic")
    import dataclasses
    import inspect

    from bertonnx.corpus.compute import TaskOptions
    from bertonnx.corpus.predictor import BertOnnxPredictor
    from bertonnx.model import BertOnnx
    from bertonnx.serve.options import ServeOptions

    old = {alias.lstrip("-").replace("-", "_") for o in OPTIONS.values() for alias in o.aliases}
    assert old == {"truncate", "auto_truncate"}
    names = {
        "TaskOptions": {f.name for f in dataclasses.fields(TaskOptions)},
        "ServeOptions": {f.name for f in dataclasses.fields(ServeOptions)},
        "BertOnnxPredictor": set(inspect.signature(BertOnnxPredictor.__init__).parameters),
    }
    for method in ("__call__", "nsp", "embed", "classify", "rerank", "fill_mask", "tag", "answer", "choose"):
        names[f"BertOnnx.{method}"] = set(inspect.signature(getattr(BertOnnx, method)).parameters)
    for where, have in names.items():
        assert not have & old, where
    for where in ("TaskOptions", "ServeOptions", "BertOnnxPredictor", "BertOnnx.embed", "BertOnnx.classify"):
        assert "truncation" in names[where], where
    for method in ("nsp", "embed", "rerank", "tag", "answer", "choose"):  # classify, fill_mask: not yet (model.py)
        assert "batch_size" in names[f"BertOnnx.{method}"], method
