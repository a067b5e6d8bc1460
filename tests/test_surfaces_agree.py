"""Every surface says the same thing: one ``--json`` envelope on every command, one random-weights banner
(``batch`` and ``serve`` included), the pipelines' field names in the corpus columns, help texts that say what
the code does, and one generated table of every option's default per surface."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bertonnx import BertOnnx
from bertonnx.cli import main
from bertonnx.manifest import MANIFEST_FILE
from bertonnx.surface import ENVELOPE_KEYS, envelope
from bertonnx.vocabulary import OPTIONS

from .conftest import ROOT

RANDOM_NOTE = "RANDOM WEIGHTS: outputs are meaningless; use for latency and parity checks only."
TEXTS = ["the weather is nice", "i agree with you"]
MASKED = ["the capital of france is [MASK].", "[MASK] and [MASK] ."]
CONTEXT = "My name is Clara and I live in Berkeley, California."


def random_copy(export: Path, target: Path) -> Path:
    """A copy of ``export`` whose manifest says its weights are random (the manifest itself is not hashed)."""
    shutil.copytree(export, target)
    manifest = json.loads((target / MANIFEST_FILE).read_text(encoding="utf-8"))
    manifest["weights"] = {"kind": "random", "seed": 0, "random_heads": [], "note": RANDOM_NOTE}
    (target / MANIFEST_FILE).write_text(json.dumps(manifest), encoding="utf-8")
    return target


@pytest.fixture(scope="module")
def exports(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_export: Path,
    pipeline_heads: dict[str, tuple[Path, Path]],
    tiny_ner_export: Path,
    tiny_qa_export: Path,
) -> dict[str, Path]:
    """Per head, a random-weights copy of an export the other test modules build anyway (choose: fp32 only)."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    from .heads import build_tiny_checkpoint

    root = tmp_path_factory.mktemp("surfaces")
    checkpoint = build_tiny_checkpoint("BertForMultipleChoice", root / "choose-checkpoint")
    choose = root / "choose-export"
    run_export(ExportOptions(outdir=choose, model=str(checkpoint), variants=("fp32",)), log=lambda m: None)
    sources = {
        "pretraining": tiny_export,
        "classify": pipeline_heads["single"][1],
        "rerank": pipeline_heads["rerank"][1],
        "tag": tiny_ner_export,
        "answer": tiny_qa_export,
        "choose": choose,
    }
    return {name: random_copy(path, root / name) for name, path in sources.items()}


def _quiet(directory: Path) -> BertOnnx:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return BertOnnx(directory)


def _close(got: Any, want: Any) -> None:
    """Equal, floats within 1e-5 (JSON round-trips them)."""
    if isinstance(want, float):
        assert got == pytest.approx(want, abs=1e-5)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for key in want:
            _close(got[key], want[key])
    elif isinstance(want, list):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _close(g, w)
    else:
        assert got == want


#: command -> (the export it runs on, its argv after DIR, the Python answer its results must equal)
CASES: dict[str, tuple[str, list[str], Callable[[BertOnnx], list[Any]] | None]] = {
    "tokenize": ("pretraining", TEXTS, lambda m: [m.tokenize(*TEXTS).__dict__]),
    "nsp": ("pretraining", TEXTS, lambda m: [m.nsp(*TEXTS)]),
    "embed": ("pretraining", TEXTS, lambda m: m.embed(TEXTS).tolist()),
    "embed-output": ("pretraining", [*TEXTS, "--output", "{tmp}/vectors.npy"], lambda m: []),
    "classify": ("classify", TEXTS, lambda m: m.classify(TEXTS)),
    "rerank": (
        "rerank",
        ["a query", *TEXTS],
        lambda m: [{**r, "text": TEXTS[r["index"]]} for r in m.rerank("a query", TEXTS)],
    ),
    "fill-mask": ("pretraining", MASKED, lambda m: m.fill_mask(MASKED)),
    "tag": ("tag", [CONTEXT], lambda m: m.tag([CONTEXT])),
    "answer": ("answer", ["--question", "where?", "--context", CONTEXT], lambda m: m.answer(["where?"], CONTEXT)),
    "choose": (
        "choose",
        ["--context", "a cat sat on the", "mat", "moon"],
        lambda m: [m.choose("a cat sat on the", ["mat", "moon"])],
    ),
    "walkthrough": ("pretraining", [], lambda m: []),
    "inspect": ("pretraining", [], None),
    "batch": ("pretraining", ["--input", "{tmp}/texts.txt", "--output", "{tmp}/out.parquet"], None),
}


def test_every_json_command_is_checked() -> None:
    exported = {"export", "parity"}  # the export extra's commands: tests/test_random_weights.py
    assert set(OPTIONS["json"].commands) - exported <= {name.split("-output")[0] for name in CASES}


@pytest.mark.parametrize("command", list(CASES))
def test_every_command_json_has_one_envelope(
    command: str, exports: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export, argv, python = CASES[command]
    directory = exports[export]
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    name = command.removesuffix("-output")
    assert main([name, str(directory), *(a.format(tmp=tmp_path) for a in argv), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert list(found)[: len(ENVELOPE_KEYS)] == list(ENVELOPE_KEYS)
    assert found["model"] == str(directory)
    assert found["random_weights"] is True
    assert found["variant"] == (None if command == "inspect" else "fp32")
    assert isinstance(found["results"], list)
    if python is not None:
        _close(found["results"], python(_quiet(directory)))
    if command == "batch":
        assert found["results"] == [] and found["rows"] == len(TEXTS)
    if command == "inspect":
        assert found["results"] == [] and "fp32" in found["variants"]


def test_the_envelope_refuses_to_be_overwritten() -> None:
    assert envelope("m", "fp32", False, [1], pooling="cls") == {
        "model": "m",
        "variant": "fp32",
        "random_weights": False,
        "results": [1],
        "pooling": "cls",
    }
    with pytest.raises(ValueError, match="results is an envelope key"):
        envelope("m", "fp32", False, [], results=[2])
