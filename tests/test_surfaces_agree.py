"""Every surface says the same thing: one ``--json`` envelope on every command, one random-weights banner
(``batch`` and ``serve`` included), the pipelines' field names in the corpus columns, help texts that say what
the code does, and one generated table of every option's default per surface."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
        assert found["results"] == []
        assert found["rows"] == len(TEXTS)
    if command == "inspect":
        assert found["results"] == []
        assert "fp32" in found["variants"]


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


# -- the random-weights banner: the same on every command, batch and serve included ------------------------

BANNER = f"!! {RANDOM_NOTE}"


@pytest.fixture(scope="module")
def random_tiny(tmp_path_factory: pytest.TempPathFactory, tiny_export: Path) -> Path:
    return random_copy(tiny_export, tmp_path_factory.mktemp("random-tiny") / "model")


def test_batch_prints_the_banner_once_not_a_python_warning(random_tiny: Path, tmp_path: Path) -> None:
    texts = tmp_path / "texts.txt"
    texts.write_text("a\nb\n", encoding="utf-8")
    argv = [str(random_tiny), "--input", str(texts), "--output", str(tmp_path / "out.parquet")]
    done = subprocess.run(
        [sys.executable, "-m", "bertonnx.corpus.cli", *argv], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(BANNER) == 1
    assert "RandomWeightsWarning" not in done.stderr
    assert BANNER not in done.stdout  # stdout holds the summary alone


def test_serve_prints_the_banner_once_not_a_python_warning(random_tiny: Path) -> None:
    """The server on port 0 (any free port) until the model is loaded, then SIGTERM: it stops by itself."""
    command = [sys.executable, "-m", "bertonnx.serve.cli", str(random_tiny), "--host", "127.0.0.1", "--port", "0"]
    server = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=ROOT)
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            lines.append(line)
            if "ready: " in line or "failed to load" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(180), "".join(lines)
        time.sleep(0.2)  # anything printed right after loading
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        finally:
            server.kill()
    reader.join(10)
    err = "".join(lines)
    assert err.count(BANNER) == 1, err
    assert "RandomWeightsWarning" not in err
    assert err.index(BANNER) < err.index("ready: ")  # before the port is bound and the model loads
