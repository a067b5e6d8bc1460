"""Files the commands read and write: one line naming the file and the fix, rows aligned with lines, atomic.

A blank line of ``--input`` is the empty text and keeps its row (``bertonnx.files``), so row i of every
output belongs to line i of the input.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bertonnx import BertOnnx
from bertonnx.cli import main
from bertonnx.command import EXIT_USAGE

from .conftest import HAVE_TORCH

pytestmark = pytest.mark.torch_free

FIVE_LINES = ["the weather is nice", "i agree with you", "", "a fourth line", "and the fifth"]


@pytest.fixture(scope="module")
def model(tiny_export: Path) -> BertOnnx:
    return BertOnnx(tiny_export)


def error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """Make ``folder`` refuse new files, for root too (which ignores permission bits): chmod, else chattr +i."""
    folder.chmod(0o555)
    immutable = False
    try:
        probe = folder / ".probe"
        try:
            probe.touch()
        except PermissionError:
            pass
        else:  # root: permission bits do not stop it
            probe.unlink()
            done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
            if done.returncode != 0:
                pytest.skip(f"cannot make {folder} read-only here (root, and chattr failed: {done.stderr!r})")
            immutable = True
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


# -- rows and lines ----------------------------------------------------------------------------------


def test_a_blank_line_keeps_its_row(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path, model: BertOnnx
) -> None:
    """The issue's example: a 5-line file whose third line is empty gives 5 rows, row i from line i."""
    source = tmp_path / "five.txt"
    source.write_text("\n".join(FIVE_LINES) + "\n", encoding="utf-8")
    target = tmp_path / "vectors.npy"
    argv = ["embed", str(tiny_export), "--input", str(source), "--output", str(target), "--pooling", "mean"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"note: {source} line 3 blank: each is embedded as the empty text" in err
    vectors = np.load(target)
    assert vectors.shape == (5, 32)
    one_by_one = np.stack([model.embed([line], "mean")[0] for line in FIVE_LINES])
    np.testing.assert_allclose(vectors, one_by_one, atol=1e-5)
    np.testing.assert_allclose(vectors[2], model.embed([""], "mean")[0], atol=1e-5)
    distances = np.abs(one_by_one[:, None] - one_by_one[None]).max(axis=-1)
    assert distances[~np.eye(5, dtype=bool)].min() > 1e-3  # 100x the tolerance: a shifted row would show


@pytest.mark.parametrize(
    ("data", "texts"),
    [
        (b"one\n\n  \nfour", ["one", "", "  ", "four"]),  # whitespace-only is a text too; no final newline
        (b"one\r\ntwo\r\n\r\n", ["one", "two", ""]),  # Windows line ends; the last line is empty
        (b"\xef\xbb\xbfone\ntwo\n", ["one", "two"]),  # a byte-order mark is not part of the first text
        ("one\u2028still one\x0cand still\ntwo\n".encode(), ["one\u2028still one\x0cand still", "two"]),
        (b"\n\n", ["", ""]),
        (b"", []),
    ],
    ids=["whitespace-no-final-newline", "crlf", "bom", "unicode-separators", "only-blank", "empty-file"],
)
def test_lines_are_split_at_newlines_only(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path, data: bytes, texts: list[str]
) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(data)
    target = tmp_path / "out.jsonl"
    assert main(["embed", str(tiny_export), "--input", str(source), "--output", str(target), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["shape"] == [len(texts), 32]
    rows = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()] if texts else []
    assert [row["text"] for row in rows] == texts


def test_standard_input_is_read_the_same_way(tiny_export: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bertonnx.cli", "embed", str(tiny_export), "--input", "-", "--pooling", "cls"],
        input=b"first\n\nthird\n",
        capture_output=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["text"] for line in result.stdout.splitlines()] == ["first", "", "third"]
    assert b"note: standard input line 2 blank" in result.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "bertonnx.cli", "embed", str(tiny_export), "--input", "-"],
        input=b"caf\xe9\n",
        capture_output=True,
        timeout=300,
    )
    assert bad.returncode == EXIT_USAGE
    assert (
        bad.stderr.decode()
        .strip()
        .endswith(
            "standard input is not UTF-8 text (byte 0xe9 on line 1); convert it to UTF-8, "
            "e.g. `iconv -f latin1 -t utf-8 FILE > FILE.utf8`"
        )
    )


# -- files that cannot be read ---------------------------------------------------------------------


def test_input_files_that_cannot_be_read(capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path) -> None:
    embed = ["embed", str(tiny_export), "--input"]
    missing = tmp_path / "missing.txt"
    assert error_line(capsys, [*embed, str(missing)]).endswith(f"--input {missing} does not exist; check the path")
    assert error_line(capsys, [*embed, str(tmp_path)]).endswith(
        f"--input {tmp_path} is a directory; expected a text file with one text per line"
    )
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("ligne un\nligne deux\ncafé\n".encode("latin-1"))
    assert f"--input {latin1} is not UTF-8 text (byte 0xe9 on line 3); convert it to UTF-8" in error_line(
        capsys, [*embed, str(latin1)]
    )
    # an unreadable file (EIO for any user, root included)
    assert "cannot read --input /proc/self/mem" in error_line(capsys, [*embed, "/proc/self/mem"])


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permission bits")
def test_an_input_without_read_permission(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("text\n")
    secret.chmod(0)
    assert f"--input {secret} is not readable; check its permissions" in error_line(
        capsys, ["embed", str(tiny_export), "--input", str(secret)]
    )


def test_parity_pairs_file_errors_name_the_file(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path
) -> None:
    if not HAVE_TORCH:
        pytest.skip("parity refuses earlier without its extra (tested in test_commands)")
    latin1 = tmp_path / "pairs.tsv"
    latin1.write_bytes(b"caf\xe9\tau lait\n")
    line = error_line(capsys, ["parity", str(tiny_export), "--pairs", str(latin1)])
    assert f"--pairs {latin1} is not UTF-8 text (byte 0xe9 on line 1)" in line
    line = error_line(capsys, ["parity", str(tiny_export), "--pairs", str(tmp_path)])
    assert f"--pairs {tmp_path} is a directory" in line


# -- files that cannot be written ------------------------------------------------------------------


def test_outputs_that_cannot_be_written(capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path) -> None:
    embed = ["embed", str(tiny_export), "some text", "--output"]
    missing = tmp_path / "no-such-folder" / "vectors.npy"
    assert error_line(capsys, [*embed, str(missing)]).endswith(
        f"--output {missing}: the folder {missing.parent} does not exist; create it (`mkdir -p {missing.parent}`) first"
    )
    assert f"--output {tmp_path} is a directory; give a file name" in error_line(capsys, [*embed, str(tmp_path)])
    locked = tmp_path / "locked"
    locked.mkdir()
    with read_only(locked):
        line = error_line(capsys, [*embed, str(locked / "vectors.npy")])
    assert f"--output {locked / 'vectors.npy'}: cannot write in {locked}" in line
    assert line.endswith("choose a folder you can write to")
    assert list(locked.iterdir()) == []
    for name in ("out.parquet", "out.csv", "out"):  # a format embed does not write: refused, nothing written
        line = error_line(capsys, [*embed, str(tmp_path / name)])
        assert "embed writes .npy (a float32 array) or .jsonl (JSON lines), not " in line
        assert not (tmp_path / name).exists()
    assert main([*embed, str(tmp_path / "upper.NPY")]) == 0  # extensions in any case
    assert np.load(tmp_path / "upper.NPY").dtype == np.float32
    # options are never abbreviated: --prompt-nam is no --prompt-name
    assert "unrecognized arguments: --prompt-nam (did you mean --prompt-name?)" in error_line(
        capsys, ["embed", str(tiny_export), "--prompt-nam", "query", "a"]
    )


def test_extras_outputs_are_checked_before_any_work(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path
) -> None:
    if not HAVE_TORCH:
        pytest.skip("these commands refuse earlier without their extra (tested in test_commands)")
    report = tmp_path / "missing" / "parity.md"
    assert f"--report {report}: the folder {report.parent} does not exist" in error_line(
        capsys, ["parity", str(tiny_export), "--report", str(report)]
    )
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    assert f"--out {a_file} is a file; expected a folder" in error_line(
        capsys, ["bench", str(tiny_export), "--out", str(a_file)]
    )
    results_md = tmp_path / "missing" / "RESULTS.md"
    assert f"--results-md {results_md}: the folder {results_md.parent} does not exist" in error_line(
        capsys, ["bench", str(tiny_export), "--out", str(tmp_path / "out"), "--results-md", str(results_md)]
    )
    locked = tmp_path / "locked"
    locked.mkdir()
    with read_only(locked):
        line = error_line(capsys, ["export", "bert-base-uncased", "--weights", "random", str(locked / "model")])
    assert f"OUTDIR {locked / 'model'}: cannot write in {locked}" in line


def test_a_failed_run_leaves_the_previous_output_untouched(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path
) -> None:
    target = tmp_path / "vectors.npy"
    assert main(["embed", str(tiny_export), "first", "--output", str(target)]) == 0
    before = target.read_bytes()
    too_long = " ".join(["word"] * 600)
    line = error_line(capsys, ["embed", str(tiny_export), "first", too_long, "--output", str(target)])
    assert "input 1 has 602 tokens" in line
    assert "--truncation" in line  # the command's option, not the Python keyword
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vectors.npy"]  # no partial file left


def test_an_error_about_an_input_names_its_line(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, tmp_path: Path
) -> None:
    source = tmp_path / "in.txt"
    source.write_text("short\nshort too\n" + " ".join(["word"] * 600) + "\n")
    line = error_line(capsys, ["embed", str(tiny_export), "--input", str(source)])
    assert "input 2 has 602 tokens" in line
    assert line.endswith(f"(input 2 is line 3 of {source})")  # the typed error says which input


def test_embed_json_without_output_is_one_object(capsys: pytest.CaptureFixture[str], tiny_export: Path) -> None:
    assert main(["embed", str(tiny_export), "one", "", "three", "--json", "--pooling", "cls"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["shape"] == [3, 32]
    assert np.asarray(payload["results"]).shape == (3, 32)  # one vector per text, in order
    assert (payload["pooling"], payload["variant"], payload["random_weights"]) == ("cls", "fp32", False)


def test_written_files_get_the_usual_permissions(tiny_export: Path, tmp_path: Path) -> None:
    target = tmp_path / "vectors.jsonl"
    assert main(["embed", str(tiny_export), "a", "b", "--output", str(target)]) == 0
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask
    assert [json.loads(line)["text"] for line in target.read_text().splitlines()] == ["a", "b"]
