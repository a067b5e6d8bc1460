"""Every command: options anywhere, one line per expected failure (exit 2), tracebacks only with --debug.

The runtime-only cases (a missing extra, OpenVINO missing for bf16, ``--help`` of the extras' commands)
run in a fresh interpreter that refuses to import the extras' modules, so they hold in any venv; CI also
runs them in a venv where those modules are truly absent.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bertonnx.cli import COMMANDS, main
from bertonnx.command import EXIT_INTERNAL, EXIT_USAGE, Command, _load, run_command
from bertonnx.extras import EXTRA_MODULES, TORCH_CPU_INDEX, TORCH_PIN, install_hint

from .conftest import ROOT

pytestmark = pytest.mark.torch_free

EXTRA_COMMANDS = ("export", "parity", "bench")
TORCH_STACK = ("torch", "transformers", "optimum", "onnx", "matplotlib", "psutil")
#: Every extra's modules: what a runtime-only install lacks.
EXTRAS_STACK = (
    *TORCH_STACK,
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic",
    "prometheus_client",
    "pyarrow",
    "tqdm",
    "ray",
)


def run_cli(*args: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """``bertonnx ARGS`` in a fresh interpreter in which the top-level modules ``blocked`` cannot be imported."""
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {blocked!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None
        sys.meta_path.insert(0, Block())
        from bertonnx.cli import main
        raise SystemExit(main(sys.argv[1:]))
        """
    )
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# -- options anywhere --------------------------------------------------------------------------------


def _stdout(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    "orders",
    [
        [
            ["embed", "{dir}", "--pooling", "mean", "some text", "more text"],
            ["embed", "{dir}", "some text", "--pooling", "mean", "more text"],
            ["embed", "--pooling", "mean", "{dir}", "some text", "more text"],
            ["--json", "embed", "{dir}", "some text", "more text", "--pooling", "mean"],
        ],
        [
            ["nsp", "{dir}", "--truncation", "the weather is nice", "--json", "i agree with you"],
            ["nsp", "--json", "{dir}", "the weather is nice", "i agree with you", "--truncation"],
        ],
        [
            ["tokenize", "{dir}", "the weather", "--max-length", "8", "--truncation", "is nice", "--json"],
            ["tokenize", "--truncation", "{dir}", "--json", "the weather", "is nice", "--max-length", "8"],
        ],
        [["inspect", "{dir}", "--json"], ["inspect", "--json", "{dir}"], ["--json", "inspect", "{dir}"]],
        [
            ["walkthrough", "{dir}", "--variant", "int8", "--json"],
            ["walkthrough", "--variant", "int8", "{dir}", "--json"],
        ],
    ],
    ids=["embed", "nsp", "tokenize", "inspect", "walkthrough"],
)
def test_options_go_anywhere(capsys: pytest.CaptureFixture[str], tiny_export: Path, orders: list[list[str]]) -> None:
    outputs = [_stdout(capsys, [a.format(dir=tiny_export) for a in argv]) for argv in orders]
    payloads = [json.loads(out) if out.lstrip().startswith("{\n") else out for out in outputs]
    if orders[0][0] == "embed":  # JSON lines without --json, one object with it: compare the vectors
        first = [json.loads(line)["embedding"] for line in outputs[0].splitlines()]
        assert len(first) == 2
        for out in outputs[1:]:
            rows = out.splitlines()
            vectors = [json.loads(r)["embedding"] for r in rows] if len(rows) == 2 else json.loads(out)["results"]
            assert vectors == first
        return
    assert all(p == payloads[0] for p in payloads[1:])
    if orders[0][0] == "tokenize":
        assert payloads[0]["results"][0]["tokens"] == ["[CLS]", "the", "weather", "[SEP]", "is", "nice", "[SEP]"]


def test_text_that_looks_like_an_option_follows_a_double_dash(
    capsys: pytest.CaptureFixture[str], tiny_export: Path
) -> None:
    out = _stdout(capsys, ["tokenize", str(tiny_export), "--json", "--", "--debug is a word here"])
    assert json.loads(out)["results"][0]["tokens"][-5:] == ["is", "a", "word", "here", "[SEP]"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bert-base-uncased", "--weights", "random", "OUT"], (["bert-base-uncased", "OUT"], "random", False)),
        (["--force", "bert-base-uncased", "OUT", "--weights", "auto"], (["bert-base-uncased", "OUT"], "auto", True)),
        (["OUT", "--weights", "random"], (["OUT"], "random", False)),
    ],
)
def test_export_takes_options_between_its_paths(argv: list[str], expected: tuple[list[str], str, bool]) -> None:
    args = _load(COMMANDS["export"]).parser().parse_intermixed_args(argv)
    assert (args.paths, args.weights, args.force) == expected


def test_parity_and_bench_take_options_anywhere() -> None:
    parity = _load(COMMANDS["parity"]).parser().parse_intermixed_args(["--variants", "fp32", "DIR", "--json"])
    assert (parity.model_dir, parity.variants, parity.json) == ("DIR", "fp32", True)
    bench = _load(COMMANDS["bench"]).parser().parse_intermixed_args(["--quick", "DIR", "--out", "X", "--seq", "16"])
    assert (bench.model_dir, bench.quick, str(bench.out), bench.seq) == ("DIR", True, "X", "16")


# -- one line per failure ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "advice"),
    [
        # a hub id given where an export is expected: export that id (not bert-base-uncased into a folder so named)
        ("dslim/bert-base-NER", "`bertonnx export dslim/bert-base-NER models/bert-base-NER`"),
        # a bare name: a hub id without an owner (exported into models/, not into a folder of the same name)
        ("bert-base-uncased", "`bertonnx export bert-base-uncased models/bert-base-uncased`"),
        # a folder not made yet (the hub keeps "models/" for its own pages, so it is no model id)
        ("models/sentiment", "`bertonnx export bert-base-uncased models/sentiment`"),
        # a transformers checkpoint (config.json, no bertonnx.json): export it
        ("checkpoint", "is a checkpoint, not a bertonnx export: it has no bertonnx.json. Export it first"),
    ],
)
def test_a_missing_model_folder_gets_advice_that_fits_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, advice: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "config.json").write_text("{}", encoding="utf-8")
    code = main(["tag", given, "Angela Merkel met Emmanuel Macron."])
    line = one_line(capsys.readouterr().err)
    assert code == EXIT_USAGE, line
    assert advice in line
    if given == "dslim/bert-base-NER":
        assert "bert-base-uncased" not in line
    if given == "checkpoint":
        assert "`bertonnx export checkpoint models/checkpoint`" in line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["embed", "{dir}", "some text", "--pooling", "max"], "argument --pooling: invalid choice: 'max'"),
        (["embed", "{dir}", "x", "--batch-size", "0"], "argument --batch-size: expected a whole number >= 1, got 0"),
        (["nsp", "{dir}", "a", "b", "--threads", "two"], "argument --threads: expected a whole number >= 1, got 'two'"),
        (["nsp", "{dir}", "a", "b", "--threads", "99999999999999999999"], "argument --threads: expected 1 to 1024"),
        (["nsp", "{dir}", "only one text"], "the following arguments are required: TEXT_B"),
        (["nsp", "{dir}", "a", "b", "c"], "unrecognized arguments: c"),
        (["inspect", "{dir}", "--verbose"], "unrecognized arguments: --verbose"),
        (["tokenize", "{dir}", "a", "--max-length", "1"], "max_length must be between 2 and the model's 512"),
        (["inspect", "{missing}"], "does not exist"),
        (["walkthrough", "{not_export}"], "is not a bertonnx export"),
        (["embed", "{dir}"], "give TEXT arguments or --input FILE"),
        (["export", "a", "b", "c", "--variants", "fp32"], "expected [MODEL] OUTDIR, got 3 paths"),
        (["bench", "{dir}", "--runners", "fp16"], "expected a comma-separated subset of torch, fp32"),
        (["parity", "{dir}", "--variants", "fp16"], "--variants must name variants present in"),
    ],
)
def test_expected_failures_are_one_line_with_exit_2(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path, argv: list[str], message: str
) -> None:
    if argv[0] in EXTRA_COMMANDS and _missing("torch"):
        pytest.skip(f"`bertonnx {argv[0]}` refuses earlier here: its extra is not installed (tested below)")
    (tmp_path / "plain").mkdir()
    paths = {"dir": tiny_export, "missing": tmp_path / "nope", "not_export": tmp_path / "plain"}
    code = main([a.format(**paths) for a in argv])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    line = one_line(err)
    assert line.startswith(f"bertonnx {argv[0]}: error: "), line
    assert message in line
    assert "Traceback" not in err


def test_a_mistyped_option_comes_first_with_the_closest_one(capsys: pytest.CaptureFixture[str]) -> None:
    """``batch --ouput``: one line naming the typo and the option meant, not the required options it misses."""
    assert main(["batch", "DIR", "--ouput", "x.parquet"]) == EXIT_USAGE
    assert one_line(capsys.readouterr().err) == (
        "bertonnx batch: error: unrecognized arguments: --ouput (did you mean --output?); see `bertonnx batch --help`"
    )
    # a prefix is not taken for the option it begins (argparse's abbreviations are off): named, with the option
    assert main(["serve", "DIR", "--max-queue-wai", "0", "--port", "99999"]) == EXIT_USAGE
    assert "unrecognized arguments: --max-queue-wai (did you mean --max-queue-wait?)" in one_line(
        capsys.readouterr().err
    )
    assert main(["serve", "DIR", "--port", "99999"]) == EXIT_USAGE
    assert "argument --port: expected a port number 0-65535, got 99999" in one_line(capsys.readouterr().err)
    # an option of one value given twice is refused (argparse keeps the last one silently)
    assert main(["choose", "DIR", "--context", "a", "--context", "b", "mat", "moon"]) == EXIT_USAGE
    assert "--context is given twice, and it keeps one value; pass it once" in one_line(capsys.readouterr().err)
    assert main(["embed", "DIR", "--pooling", "mean", "--pooling=cls", "a"]) == EXIT_USAGE
    assert "--pooling is given twice, and it keeps one value" in one_line(capsys.readouterr().err)
    assert main(["serve", "DIR", "--truncation", "--auto-truncate"]) == EXIT_USAGE  # an old spelling is the same option
    assert "--truncation is given twice (as --truncation and --auto-truncate)" in one_line(capsys.readouterr().err)


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def test_debug_adds_the_traceback(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["inspect", str(tmp_path / "nope"), "--debug"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "ModelDirectoryError" in err
    assert err.rstrip().splitlines()[-1].startswith("bertonnx inspect: error: ")
    assert main(["--debug", "inspect", str(tmp_path / "nope")]) == EXIT_USAGE  # before the command name too
    assert "Traceback" in capsys.readouterr().err


def test_an_unexpected_exception_is_reported_as_a_bug(capsys: pytest.CaptureFixture[str]) -> None:
    def crash(args: argparse.Namespace) -> int:
        raise RuntimeError("something inside broke")

    command = Command("crash", "raises", lambda parser: None, crash)
    assert run_command(command, []) == EXIT_INTERNAL
    line = one_line(capsys.readouterr().err)
    assert line == (
        "bertonnx crash: error: unexpected RuntimeError: something inside broke. This is a bug in bertonnx; "
        "rerun with --debug for the traceback and report it"
    )
    assert run_command(command, ["--debug"]) == EXIT_INTERNAL
    assert 'raise RuntimeError("something inside broke")' in capsys.readouterr().err


def test_unknown_and_missing_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emebd", "DIR"]) == EXIT_USAGE
    assert "unknown command 'emebd'; did you mean `embed`?" in one_line(capsys.readouterr().err)
    assert main([]) == EXIT_USAGE
    assert "no command given; expected one of inspect, tokenize" in one_line(capsys.readouterr().err)
    assert main(["--help"]) == 0
    overview = capsys.readouterr().out
    for name in COMMANDS:
        assert f"\n  {name} " in overview


def test_every_command_prints_its_usage_without_the_extras() -> None:
    """``--help`` of every command, export, serve and batch included, with every extra's modules unimportable."""
    for name in COMMANDS:
        result = run_cli(name, "--help", blocked=EXTRAS_STACK)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"usage: bertonnx {name} "), result.stdout
        assert "--debug" in result.stdout
    overview = run_cli("--help", blocked=EXTRAS_STACK)
    assert re.search(r"\n  export +export a checkpoint \(BERT, RoBERTa", overview.stdout), overview.stdout
    assert re.search(r"\n  serve +serve DIR over HTTP", overview.stdout), overview.stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_command_takes_debug_and_a_parse_error_is_one_line_in_one_style(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """The same first line for every command's parse errors, and ``--debug`` (anywhere) adds the traceback."""
    for argv in ([name, "--no-such-option"], [name, "DIR", "--no-such-option", "x", "y", "z", "w"]):
        assert main(argv) == EXIT_USAGE
        line = one_line(capsys.readouterr().err)
        assert line.startswith(f"bertonnx {name}: error: "), line
        assert line.endswith(f"; see `bertonnx {name} --help`"), line
        assert "--no-such-option" in line or "required" in line, line
        assert main(["--debug", *argv]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert err.startswith("Traceback (most recent call last):"), err
        assert err.rstrip().splitlines()[-1] == line


@pytest.mark.parametrize(
    ("argv", "extra"),
    [
        (["export", "bert-base-uncased", "--weights", "random", "{out}"], "export"),
        (["parity", "{dir}"], "export"),
        (["bench", "{dir}", "--quick", "--out", "{out}"], "bench"),
    ],
)
def test_a_missing_extra_is_one_line_with_the_install_commands(
    tiny_export: Path, tmp_path: Path, argv: list[str], extra: str
) -> None:
    paths = {"dir": tiny_export, "out": tmp_path / "out"}
    result = run_cli(*[a.format(**paths) for a in argv], blocked=TORCH_STACK)
    assert result.returncode == EXIT_USAGE, result.stderr
    line = one_line(result.stderr)
    assert f"`bertonnx {argv[0]}` needs the {extra} extra, and torch, " in line
    assert install_hint(extra) in line
    assert not (tmp_path / "out").exists()


def test_bf16_without_openvino_is_one_line(tiny_export: Path) -> None:
    result = run_cli("nsp", str(tiny_export), "a", "b", "--variant", "bf16", blocked=("openvino",))
    assert result.returncode == EXIT_USAGE
    line = one_line(result.stderr)
    assert "The 'bf16' variant runs on OpenVINO, which is not installed." in line
    assert install_hint("openvino") in line


def test_install_hints_work_from_an_index_and_from_a_clone() -> None:
    for extra in EXTRA_MODULES:
        hint = install_hint(extra)
        assert f"-m pip install 'bertonnx[{extra}]'" in hint  # from an index
        assert f"-m pip install -e '.[{extra}]'" in hint  # from a clone
        assert hint.index("-e '.[") < hint.index("'bertonnx["), hint  # the clone's first: it is not on an index
        assert hint.startswith(sys.executable)  # into the environment the command runs in
        if "torch" in EXTRA_MODULES[extra]:
            assert f"pip install {TORCH_PIN} --index-url {TORCH_CPU_INDEX}, then " in hint  # CPU build first
            assert hint.index(TORCH_PIN) < hint.index("bertonnx[")


def test_bench_writes_to_the_current_directory_by_default(tmp_path: Path) -> None:
    """Not inside the installed package (site-packages): ``./bertonnx-bench`` unless ``--out`` says otherwise."""
    out = _load(COMMANDS["bench"]).parser().parse_intermixed_args(["DIR"]).out
    assert not out.is_absolute()
    assert out == Path("bertonnx-bench")


def test_the_extras_entry_points_behave_the_same(tmp_path: Path) -> None:
    """``python -m bertonnx_export`` and ``python -m bertonnx_benchmarks`` share the parsing and the errors."""
    for module in ("bertonnx_export", "bertonnx_benchmarks"):
        result = subprocess.run(
            [sys.executable, "-m", module, "--help"], capture_output=True, text=True, cwd=tmp_path, timeout=300
        )
        assert result.returncode == 0, result.stderr
        assert "--debug" in result.stdout
        result = subprocess.run(
            [sys.executable, "-m", module, "--no-such-option", "x"], capture_output=True, text=True, timeout=300
        )
        assert result.returncode == EXIT_USAGE
        assert "unrecognized arguments: --no-such-option" in one_line(result.stderr)


def test_the_bertonnx_script_is_a_thin_entry_point() -> None:
    """The console script in the venv runs the same dispatcher (what users call after activating)."""
    script = Path(sys.executable).parent / "bertonnx"
    result = subprocess.run([str(script), "emebd"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == EXIT_USAGE
    assert "did you mean `embed`?" in one_line(result.stderr)


def test_a_warning_is_one_line_naming_the_command(capsys: pytest.CaptureFixture[str], tiny_export: Path) -> None:
    """A fill-mask target that is no token warns (as the pipeline) in one line, not Python's source path and
    code line."""
    assert main(["fill-mask", str(tiny_export), "a [MASK] b", "--target", "zzzzqqq", "--json"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "zzzzqqq" in line]
    assert len(err) == 1, err
    assert err[0].startswith("bertonnx fill-mask: warning: "), err
    assert ".py:" not in err[0]


def test_a_host_not_of_this_machine_names_the_host_not_the_port() -> None:
    """Binding fails locally (EADDRNOTAVAIL); no packet leaves the machine. 192.0.2.1 is a documentation address."""
    pytest.importorskip("uvicorn")
    from bertonnx.serve.cli import check_listen_address

    with pytest.raises(ValueError, match=r"--host 192\.0\.2\.1 is not an address of this machine; use one") as caught:
        check_listen_address("192.0.2.1", 8123)
    assert "--port" not in str(caught.value)
