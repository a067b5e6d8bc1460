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
    # need exports of their own heads; their tests check the envelope: tests/test_sentence.py, test_zero_shot.py
    own = {"embed-sparse", "zero-shot", "detect-replaced"}  # and tests/test_detect_replaced.py
    assert set(OPTIONS["json"].commands) - exported - own <= {name.split("-output")[0] for name in CASES}


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


# -- the corpus job's columns: the Python method's (the pipeline's) field names ------------------------------


@pytest.mark.parametrize(
    ("task", "export", "options"),
    [
        ("tag", "tag", ["--aggregation-strategy", "simple"]),
        ("tag", "tag", ["--aggregation-strategy", "none", "--keep-all"]),
        ("classify", "classify", []),
    ],
)
def test_corpus_columns_use_the_pipeline_names(
    task: str, export: str, options: list[str], exports: dict[str, Path], tmp_path: Path
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from bertonnx.corpus.cli import main as batch

    texts = [CONTEXT, "Angela Merkel met Emmanuel Macron in Paris."]
    source = tmp_path / "rows.txt"
    source.write_text("\n".join(texts) + "\n", encoding="utf-8")
    output = tmp_path / "out.parquet"
    argv = [str(exports[export]), "--input", str(source), "--output", str(output), "--task", task, *options]
    assert batch(argv) == 0
    table = pq.read_table(output)
    model = _quiet(exports[export])
    if task == "classify":
        best = [labels[0] for labels in model.classify(texts)]
        assert table.column_names[2:] == list(best[0])  # label, score: the pipeline's keys
        columns = table.column("label").to_pylist(), table.column("score").to_pylist()
        _close([{"label": label, "score": score} for label, score in zip(*columns, strict=True)], best)
        return
    strategy = options[1]
    found = model.tag(texts, strategy, () if "--keep-all" in options else ("O",))
    assert any(found)
    rows = table.column("entities").to_pylist()
    for ours, theirs in zip(rows, found, strict=True):
        assert [list(e) for e in ours] == [list(e) for e in theirs]  # the same names, in the pipeline's order
        for a, b in zip(ours, theirs, strict=True):
            assert {k: v for k, v in a.items() if k != "score"} == {k: v for k, v in b.items() if k != "score"}
            assert a["score"] == pytest.approx(b["score"], abs=1e-5)


# -- help texts and shapes: what the code does --------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Duplicate Operation ID")  # the KServe and server routes' aliases
def test_help_names_every_task_command_and_route(tiny_export: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import re

    from bertonnx.serve import create_app
    from bertonnx.vocabulary import TASK_COMMANDS

    assert main(["--help"]) == 0
    description = capsys.readouterr().out.split("commands:")[0]
    assert [c for c in TASK_COMMANDS if c != "batch" and c not in description] == []
    assert main(["serve", "--help"]) == 0
    serve_help = capsys.readouterr().out
    paths = create_app(tiny_export, threads=1).openapi()["paths"]  # the app's routes (no model loaded)
    missing = [p for p in paths if not p.startswith("/v2") and not re.search(re.escape(p) + r"(?![\w/])", serve_help)]
    assert missing == []
    assert "/v2/" in serve_help
    assert main(["fill-mask", "--help"]) == 0
    top_k = " ".join(capsys.readouterr().out.split("--top-k TOP_K")[-1].split()[:14])
    assert "candidates per [MASK], not per input" in top_k
    assert "answers per input" not in top_k


@pytest.mark.filterwarnings("ignore::bertonnx.RandomWeightsWarning")  # the server loads the random copy
def test_fill_mask_has_one_shape_on_every_surface(exports: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A one-mask string: per [MASK] a list of candidates, from Python, the command and HTTP alike (the pipeline
    unwraps one mask; bertonnx keeps the call's shape, as docs/tasks.md says)."""
    from fastapi.testclient import TestClient

    from bertonnx.serve import create_app

    directory = exports["pretraining"]
    python = _quiet(directory).fill_mask(MASKED[0])
    assert len(python) == 1
    assert isinstance(python[0], list)
    assert main(["fill-mask", str(directory), MASKED[0], "--json"]) == 0
    _close(json.loads(capsys.readouterr().out)["results"], [python])
    with TestClient(create_app(directory, threads=1)) as client:
        deadline = time.monotonic() + 60
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        _close(client.post("/fill_mask", json={"inputs": MASKED[0]}).json(), python)
        _close(client.post("/fill_mask", json={"inputs": [MASKED[0]]}).json(), [python])


# -- one table of every option's default per surface ----------------------------------------------------------

#: Python and command-line defaults that differ in spelling only (the same behaviour).
SAME_BEHAVIOUR = {
    ("normalize", None, False): "None and False: no scaling",
    ("ignore_labels", ("O",), None): "the flag's None is the default list, ('O',)",
}


def test_the_defaults_table_is_in_the_docs() -> None:
    from bertonnx.surface_defaults import defaults_table

    table = defaults_table()
    assert table in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    normalize = next(line for line in table.splitlines() if line.startswith("| `normalize`"))
    assert "**protocol convention**" in normalize.split(" | ")[3]  # TEI's true, marked as the protocol's


def test_python_defaults_are_the_commands() -> None:
    from bertonnx.surface_defaults import python_defaults

    differ = []
    for option in OPTIONS.values():
        for command, python in python_defaults(option).items():
            if command not in option.commands:
                continue  # a keyword the command does not take
            cli = option.default_for(command)
            if python != cli and (option.name, python, cli) not in SAME_BEHAVIOUR:
                differ.append(f"{option.name} on {command}: Python {python!r}, command line {cli!r}")
    assert differ == []
