"""The local corpus job (`bertonnx batch`) on the tiny export: rows, ids, numbers, bad rows, bad files, atomicity."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bertonnx import BertOnnx
from bertonnx.cli import main
from bertonnx.corpus import BertOnnxPredictor, TaskOptions, read_output
from bertonnx.corpus.readers import open_input, plan_splits, read_split, whole_file

ATOL = 1e-5
TEXTS = [
    "the weather is nice",
    "",
    "i agree with you",
    "tokenization of unbelievable hyperparameters in paris",
    "a",
    "the quick brown fox jumps over the lazy dog " * 5,
]
PAIRS = ["i agree with you", "so do i", "the river bank", "", "b", "nothing follows"]
LONG = "word " * 600  # > 512 tokens


@pytest.fixture(scope="module")
def model(tiny_export: Path) -> BertOnnx:
    return BertOnnx(tiny_export, threads=1)


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main(["batch", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def vectors(table: pa.Table, column: str) -> np.ndarray:
    return np.array(table.column(column).to_pylist(), dtype=np.float32)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".partial" in p.name)


def test_txt_embed_keeps_blank_lines_as_rows_and_matches_embed(
    tiny_export: Path, model: BertOnnx, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "texts.txt"
    source.write_bytes(("\n".join(TEXTS[:-1]) + "\r\n" + TEXTS[-1]).encode())  # a CRLF line, no final newline
    output = tmp_path / "out.parquet"
    # options before and after DIR
    code, out, err = run(capsys, "--input", source, tiny_export, "--pooling", "mean", "--output", output)
    assert code == 0, err
    assert err == ""  # no progress bar when stderr is not a terminal
    assert f"wrote {len(TEXTS)} rows" in out
    assert "rejected no row" in out
    table = pq.read_table(output)
    assert table.column_names == ["id", "n_tokens", "embedding"]
    assert table.schema.field("embedding").type == pa.list_(pa.float32(), model.hidden_size)
    assert table.column("id").to_pylist() == list(range(len(TEXTS)))
    assert table.column("n_tokens").to_pylist() == [len(model.tokenize(t)) for t in TEXTS]
    np.testing.assert_allclose(vectors(table, "embedding"), model.embed(TEXTS, "mean"), atol=ATOL, rtol=0)
    assert not (tmp_path / "out.rejects.jsonl").exists()  # nothing rejected: no rejects file
    assert leftovers(tmp_path) == []
    code, out, err = run(capsys, "--input", source, tiny_export, "--output", output, "--json")
    assert code == 0, err
    assert json.loads(out)["rejects"] is None  # and the summary names none


def test_the_output_says_what_computed_it(
    tiny_export: Path, model: BertOnnx, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Parquet key-value metadata: bertonnx version, model, variant, precision, task and its settings, weights."""
    from bertonnx import __version__
    from bertonnx.corpus import read_metadata

    source = tmp_path / "texts.txt"
    source.write_text("one\ntwo\n", encoding="utf-8")
    embedded, scored = tmp_path / "embed.parquet", tmp_path / "nsp.parquet"
    code, _, err = run(capsys, tiny_export, "--input", source, "--output", embedded, "--pooling", "mean", "--normalize")
    assert code == 0, err
    expected = {
        "version": __version__,
        "model_id": str(model.manifest.data["source"]["model"]),
        "model_dir": str(tiny_export.absolute()),
        "variant": "fp32",
        "precision": "f32",
        "task": "embed",
        "pooling": "mean",
        "normalize": "true",
        "prompt_name": "",
        "dimensions": "",
        "truncation": "false",
        "max_length": str(model.max_length),
        "weights": "pretrained",  # the tiny checkpoint's weights were saved, not seeded by the export
    }
    assert read_metadata(embedded) == expected
    raw = pq.read_schema(embedded).metadata  # what any Parquet reader sees
    assert (raw[b"bertonnx.variant"], raw[b"bertonnx.version"]) == (b"fp32", __version__.encode())
    pairs = write_jsonl(tmp_path / "pairs.jsonl", [{"text": "a", "pair": "b"}])
    argv = ["--input", pairs, "--pair-column", "pair", "--output", scored, "--task", "nsp", "--variant", "int8"]
    code, _, err = run(capsys, tiny_export, *argv, "--truncate")
    assert code == 0, err
    got = read_metadata(scored)
    assert {k: got[k] for k in ("variant", "precision", "task", "pooling", "normalize", "truncation")} == {
        "variant": "int8", "precision": "int8", "task": "nsp", "pooling": "", "normalize": "", "truncation": "true",
    }  # fmt: skip


def test_nsp_on_jsonl_pairs_matches_nsp(
    tiny_export: Path, model: BertOnnx, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(
        tmp_path / "pairs.jsonl", [{"a": t, "b": p, "x": 1} for t, p in zip(TEXTS, PAIRS, strict=True)]
    )
    output = tmp_path / "nsp.parquet"
    code, out, err = run(
        capsys, tiny_export, "--input", source, "--output", output, "--task", "nsp",
        "--text-column", "a", "--pair-column", "b", "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert (summary["rows"], summary["outputs"], summary["rejected"]) == (6, 6, 0)
    table = read_output(output)
    assert table.column_names == ["id", "n_tokens", "is_next_probability"]
    expected = model.nsp(TEXTS, PAIRS)
    np.testing.assert_allclose(table.column("is_next_probability").to_numpy(), expected, atol=ATOL, rtol=0)
    assert table.column("n_tokens").to_pylist() == [
        len(model.tokenize(t, p)) for t, p in zip(TEXTS, PAIRS, strict=True)
    ]


def test_encode_on_parquet_gives_the_three_outputs_valid_tokens_only(
    tiny_export: Path, model: BertOnnx, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": TEXTS, "pair": PAIRS}), source, row_group_size=2)
    output = tmp_path / "enc.parquet"
    code, _, err = run(
        capsys, tiny_export, "--input", source, "--output", output, "--task", "encode", "--pair-column", "pair"
    )
    assert code == 0, err
    table = read_output(output)
    assert table.column_names == ["id", "n_tokens", "last_hidden_state", "pooler_output", "nsp_logits"]
    reference = model(TEXTS, PAIRS)
    states = table.column("last_hidden_state").to_pylist()
    for i in range(len(TEXTS)):
        expected = reference.token_states(i)
        assert len(states[i]) == table.column("n_tokens")[i].as_py() == len(expected)
        np.testing.assert_allclose(np.array(states[i]), expected, atol=ATOL, rtol=0)
    np.testing.assert_allclose(vectors(table, "pooler_output"), reference.pooler_output, atol=ATOL, rtol=0)
    np.testing.assert_allclose(vectors(table, "nsp_logits"), reference.nsp_logits, atol=ATOL, rtol=0)


def test_csv_with_a_named_column_and_a_quoted_newline(
    tiny_export: Path, model: BertOnnx, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "in.csv"
    texts = ["first, with a comma", "two\nlines", 'a "quoted" word']
    with open(source, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["key", "body"])
        writer.writerows([[i, t] for i, t in enumerate(texts)])
    output = tmp_path / "out.parquet"
    code, _, err = run(capsys, tiny_export, "--input", source, "--output", output, "--text-column", "body")
    assert code == 0, err
    np.testing.assert_allclose(vectors(read_output(output), "embedding"), model.embed(texts), atol=ATOL, rtol=0)


BAD_ROWS = [
    {"text": "fine"},
    {"text": None},
    {"text": 7},
    "not json",
    {"other": "no text field"},
    {"text": LONG},
    "",
    ["a", "list"],
    {"text": "also fine"},
]
BAD_REASONS = {
    1: "'text' is null",
    2: "'text' is int, not a string",
    3: "not valid JSON",
    4: "no 'text' field",
    5: "more than the model's 512",
    6: "blank line",
    7: "a JSON list, expected an object",
}


def test_bad_row_stops_the_job_naming_the_row_and_writes_nothing(
    tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(tmp_path / "bad.jsonl", BAD_ROWS)
    output = tmp_path / "out.parquet"
    code, _, err = run(capsys, tiny_export, "--input", source, "--output", output)
    assert code == 2
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert "row 1: 'text' is null" in err
    assert "--on-error skip" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]


def test_skip_writes_bad_rows_to_rejects_and_counts_add_up(
    tiny_export: Path, model: BertOnnx, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_jsonl(tmp_path / "bad.jsonl", BAD_ROWS)
    output = tmp_path / "out.parquet"
    code, out, err = run(capsys, tiny_export, "--input", source, "--output", output, "--on-error", "skip", "--json")
    assert code == 0, err
    rejects = [json.loads(line) for line in (tmp_path / "out.rejects.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rejects] == sorted(BAD_REASONS)
    for reject in rejects:
        assert BAD_REASONS[reject["id"]] in reject["reason"]
    table = read_output(output)
    assert table.column("id").to_pylist() == [0, 8]
    assert table.num_rows + len(rejects) == len(BAD_ROWS) == json.loads(out)["rows"]
    assert json.loads(out)["rejects"].endswith("out.rejects.jsonl")
    np.testing.assert_allclose(vectors(table, "embedding"), model.embed(["fine", "also fine"]), atol=ATOL, rtol=0)
    # --truncate turns the over-long row into an output row, cut to the model's 512 positions
    code, _, err = run(capsys, tiny_export, "--input", source, "--output", output, "--on-error", "skip", "--truncate")
    assert code == 0, err
    table = read_output(output)
    assert table.column("id").to_pylist() == [0, 5, 8]
    assert table.column("n_tokens").to_pylist()[1] == 512
    np.testing.assert_allclose(vectors(table, "embedding")[1], model.embed(LONG, truncation=True)[0], atol=ATOL, rtol=0)


def _bad_file_cases(tmp: Path) -> list[tuple[list[str], str]]:
    (tmp / "latin1.txt").write_bytes("ok\ncaf\xe9\n".encode("latin-1"))
    write_jsonl(tmp / "good.jsonl", [{"text": "a"}])
    (tmp / "good.csv").write_text("body\nx\n", encoding="utf-8")
    pq.write_table(pa.table({"body": ["x"]}), tmp / "good.parquet")
    (tmp / "notes.md").write_text("x\n", encoding="utf-8")
    (tmp / "a.txt").write_text("x\n", encoding="utf-8")
    (tmp / "outdir").mkdir()
    out = str(tmp / "out.parquet")
    return [
        (["--input", str(tmp / "missing.txt"), "--output", out], "does not exist"),
        (["--input", str(tmp), "--output", out], "is a directory; pass one file"),
        (["--input", str(tmp / "latin1.txt"), "--output", out], "line 2 is not UTF-8.*iconv"),
        (
            ["--input", str(tmp / "good.jsonl"), "--output", out, "--text-column", "body"],
            "no column 'body'.*columns: text",
        ),
        (["--input", str(tmp / "good.csv"), "--output", out], "no column 'text'.*columns: body"),
        (["--input", str(tmp / "good.parquet"), "--output", out, "--pair-column", "p"], "no column 'text'"),
        (["--input", str(tmp / "notes.md"), "--output", out], "unknown extension '.md'"),
        (["--input", str(tmp / "a.txt"), "--output", str(tmp / "no" / "x.parquet")], "is not a directory; create it"),
        (["--input", str(tmp / "a.txt"), "--output", str(tmp / "outdir")], "is a directory"),
        (["--input", str(tmp / "a.txt"), "--output", out, "--text-column", "t"], "a .txt file"),
        (["--input", str(tmp / "good.jsonl"), "--output", out, "--task", "nsp"], "nsp scores sentence pairs"),
    ]


def test_bad_files_exit_2_with_one_line_naming_problem_and_fix(
    tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    for argv, message in _bad_file_cases(tmp_path):
        code, out, err = run(capsys, tiny_export, *argv)
        assert code == 2, (argv, out, err)
        assert err.count("\n") == 1, err
        assert "Traceback" not in err
        assert re.search(message, err), (message, err)
        assert not (tmp_path / "out.parquet").exists()
        assert leftovers(tmp_path) == []


def test_interrupted_job_leaves_the_old_output_whole(
    tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "texts.txt"
    source.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    output = tmp_path / "out.parquet"
    assert run(capsys, tiny_export, "--input", source, "--output", output)[0] == 0
    before = output.read_bytes()
    import bertonnx.corpus.job as job

    calls = []
    real = job.compute_rows

    def interrupted(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(job, "compute_rows", interrupted)
    code, _, err = run(
        capsys, tiny_export, "--input", source, "--output", output, "--chunk-size", "2", "--pooling", "cls"
    )
    assert code == 130
    assert "no output written" in err
    assert len(calls) == 2  # it stopped after writing the first chunk to the temp file
    assert output.read_bytes() == before
    assert leftovers(tmp_path) == []


def test_splits_read_the_same_rows_as_the_whole_file(tmp_path: Path) -> None:
    lines = [f"text number {i} " + "x" * (i % 7) for i in range(200)] + ["", "last"]
    (tmp_path / "t.txt").write_text("\n".join(lines), encoding="utf-8")  # no final newline
    write_jsonl(tmp_path / "t.jsonl", [{"text": t} for t in lines])
    pq.write_table(pa.table({"text": lines}), tmp_path / "t.parquet", row_group_size=16)
    for name in ("t.txt", "t.jsonl", "t.parquet"):
        source = open_input(tmp_path / name)
        whole = pa.concat_tables(read_split(source, whole_file(source), 17))
        splits = plan_splits(source, 300)
        assert len(splits) > 5
        parts = pa.concat_tables(t for s in splits for t in read_split(source, s, 17))
        assert parts.equals(whole), name
        assert whole.column("id").to_pylist() == list(range(len(lines)))
        assert whole.column("text").to_pylist() == lines
        assert [s.first_id for s in splits] == np.cumsum([0] + [s.num_rows for s in splits[:-1]]).tolist()


def test_predictor_without_ray_keeps_rows_and_marks_rejects(tiny_export: Path, model: BertOnnx) -> None:
    predictor = BertOnnxPredictor(str(tiny_export), threads=1, on_error="skip", pooling="cls")
    batch = pa.table({"id": [10, 11, 12], "text": ["hello there", None, "general kenobi"]})
    out = predictor(batch)
    assert out.column_names == ["id", "n_tokens", "embedding", "error"]
    assert out.column("id").to_pylist() == [10, 11, 12]
    assert out.column("error").to_pylist() == [None, "'text' is null", None]
    embedding = out.column("embedding").to_pylist()
    assert embedding[1] is None
    np.testing.assert_allclose(
        np.array([embedding[0], embedding[2]]), model.embed(["hello there", "general kenobi"], "cls"), atol=ATOL
    )
    # a dict of numpy arrays (Ray's default batch format), no id column
    numpy_batch = {"text": np.array(["hello there", "general kenobi"], dtype=object)}
    out = BertOnnxPredictor(str(tiny_export), threads=1, pooling="cls")(numpy_batch)
    assert out.column_names == ["n_tokens", "embedding"]
    with pytest.raises(ValueError, match="no column 'body'"):
        BertOnnxPredictor(str(tiny_export), text_column="body")(batch)
    with pytest.raises(ValueError, match="on_error must be one of stop, skip"):
        TaskOptions(on_error="ignore")


def test_core_package_imports_no_extra_and_batch_names_the_install(tiny_export: Path, tmp_path: Path) -> None:
    code = """
import sys
import bertonnx, bertonnx.cli
assert not {"pyarrow", "tqdm", "ray"} & set(sys.modules), sorted({"pyarrow", "tqdm", "ray"} & set(sys.modules))
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pyarrow":
            raise ImportError("no pyarrow here")
sys.meta_path.insert(0, Block())
try:
    from bertonnx.corpus import TaskOptions
except ImportError as exc:
    print("IMPORT:", exc)
sys.exit(bertonnx.cli.main(["batch", sys.argv[1], "--input", "x.txt", "--output", "y.parquet"]))
"""
    result = subprocess.run(
        [sys.executable, "-c", code, str(tiny_export)], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert result.returncode == 2, result.stderr
    assert "IMPORT: bertonnx.corpus (`bertonnx batch`) needs the batch extra, and pyarrow is not installed" in (
        result.stdout
    )
    assert "pip install 'bertonnx[batch]'" in result.stderr
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--candidate-labels", "a,b"],
            "--candidate-labels is read by --task zero-shot only, and this job is --task embed",
        ),
        (
            ["--task", "classify", "--stride", "64"],
            "--stride is read by --task tag only, and this job is --task classify",
        ),
        (["--task", "nsp", "--pooling", "mean"], "--pooling is read by --task embed only, and this job is --task nsp"),
        (
            ["--task", "tag", "--prompt-name", "query"],
            "--prompt-name is read by --task embed or --task sparse only, and this job is --task tag",
        ),
    ],
)
def test_an_option_of_another_task_is_refused_not_ignored(
    tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    source = tmp_path / "texts.txt"
    source.write_text("a\nb\n", encoding="utf-8")
    code, out, err = run(capsys, tiny_export, "--input", source, "--output", tmp_path / "out.parquet", *argv)
    assert code == 2, out
    assert said in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize("task", ["tag", "sparse", "embed", "zero-shot"])
def test_a_task_of_single_texts_refuses_a_pair_column(
    tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], task: str
) -> None:
    """Tasks of one text a row never take ``--pair-column`` silently (tag and sparse ignored it)."""
    source = tmp_path / "pairs.jsonl"
    source.write_text('{"text": "a", "other": "b"}\n', encoding="utf-8")
    code, out, err = run(
        capsys,
        tiny_export,
        "--input",
        source,
        "--output",
        tmp_path / "out.parquet",
        "--task",
        task,
        "--pair-column",
        "other",
        *(["--candidate-labels", "x,y"] if task == "zero-shot" else []),
    )
    assert code == 2, out
    assert "single texts" in err
    assert "drop --pair-column" in err
    assert not (tmp_path / "out.parquet").exists()
