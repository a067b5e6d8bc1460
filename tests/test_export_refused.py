"""A lossy variant that misses its parity gate is left out, recorded and explained; the rest is published.

Issue 29, item 5. The gate's int8 limit on hidden-state cosines is raised to an impossible 2.0 (a cosine is at
most 1), so int8 always misses it while fp32 and optimized pass as usual.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest

from bertonnx import BertOnnx, VariantMissingError
from bertonnx.cli import main as cli_main
from bertonnx.command import describe_error
from bertonnx.exit_codes import EXIT_GATE_FAILED, EXIT_OK, EXIT_USAGE, EXIT_VARIANT_REFUSED
from bertonnx.manifest import MANIFEST_FILE, VARIANT_FILES, Manifest, read_manifest
from bertonnx.serve.errors import from_core
from bertonnx_export import gate
from bertonnx_export.cli import main as export_main
from bertonnx_export.errors import ExportError
from bertonnx_export.pipeline import ExportOptions, run_export

from .test_export import _leftovers, _swap_pooler_activation

IMPOSSIBLE = ("last_hidden_state_min_cosine", 2.0)
#: The one line the export logs for the refused int8 (after an optional ``NOTE``).
NOT_WRITTEN = (
    r"int8 not written: last_hidden_state_min_cosine = (?:0\.9\d+|1\.0+) < 2 \(its parity gate\); "
    r"the other variants passed"
)
REASON = r"it failed its parity gate at export: last_hidden_state_min_cosine = (?:0\.9\d+|1\.0+) < 2"


@pytest.fixture
def int8_cannot_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(gate.INT8_THRESHOLDS, *IMPOSSIBLE)


@pytest.fixture(scope="module")
def refused(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """An fp32 + int8 export of the tiny checkpoint whose int8 missed its gate, and the export's log."""
    outdir = tmp_path_factory.mktemp("refused") / "model"
    log: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(gate.INT8_THRESHOLDS, *IMPOSSIBLE)
        run_export(ExportOptions(outdir=outdir, model=str(tiny_checkpoint), variants=("fp32", "int8")), log.append)
    return outdir, log


def test_refused_variant_is_left_out_and_recorded(refused: tuple[Path, list[str]]) -> None:
    outdir, log = refused
    assert not (outdir / VARIANT_FILES["int8"]).exists()
    assert not (outdir / (VARIANT_FILES["int8"] + ".data")).exists()
    manifest = json.loads((outdir / MANIFEST_FILE).read_text(encoding="utf-8"))
    assert list(manifest["variants"]) == ["fp32"]
    assert not [name for name in manifest["files"] if "int8" in name]
    record = manifest["refused_variants"]["int8"]
    assert set(record) == {"measure", "value", "limit", "breaches", "parity"}
    assert record["measure"] == "last_hidden_state_min_cosine"
    assert record["limit"] == 2.0
    assert 0.9 < record["value"] <= 1.0
    assert record["value"] == record["parity"]["last_hidden_state_min_cosine"]
    assert record["parity"]["passed"] is False
    assert record["breaches"] == [f"int8: last_hidden_state_min_cosine = {record['value']:.6f} < 2.0"]
    lines = [line for line in log if "not written" in line]
    assert len(lines) == 1
    assert re.fullmatch(rf"\[export\] NOTE {NOT_WRITTEN}", lines[0])  # ExportOptions.variants_named is off
    assert pytest.approx(record["value"], abs=1e-5) == float(lines[0].split(" = ")[1].split()[0])
    model = BertOnnx(outdir, verify="sha256")  # what passed is written whole and loads
    assert model.embed(["the weather is nice"], pooling="mean").shape == (1, 32)


def test_asking_for_the_refused_variant_says_why(refused: tuple[Path, list[str]]) -> None:
    outdir, _ = refused
    with pytest.raises(VariantMissingError, match=rf"has no 'int8' variant \({REASON}\); it holds fp32\. Pick one"):
        BertOnnx(outdir, "int8")
    with pytest.raises(VariantMissingError) as caught:
        read_manifest(outdir).require_variant("int8")
    error = caught.value
    assert error.reason is not None
    assert error.available == ("fp32",)
    again = pickle.loads(pickle.dumps(error))
    assert (again.reason, str(again), again.available) == (error.reason, str(error), error.available)
    assert "e.g. variant='fp32'" in str(error)
    assert "re-export" not in str(error)  # the same checkpoint would miss the same gate
    cli_line = describe_error(error)
    assert "--variant fp32" in cli_line
    assert error.reason in cli_line
    served = from_core(error)
    assert served.status == 404
    assert error.reason in served.message
    assert "the export holds fp32" in served.message


@pytest.mark.parametrize("command", [["embed", "{dir}", "hello"], ["serve", "{dir}", "--port", "0"]])
def test_command_with_the_refused_variant_fails_naming_why(
    command: list[str], refused: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    outdir, _ = refused
    assert cli_main([arg.format(dir=outdir) for arg in command] + ["--variant", "int8"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"bertonnx {command[0]}: error: ")
    assert "has no 'int8' variant" in err
    assert re.search(r"last_hidden_state_min_cosine = (?:0\.9|1\.0)", err)
    assert "< 2" in err
    assert "--variant fp32" in err


def test_inspect_lists_the_refused_variant(refused: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    outdir, _ = refused
    assert cli_main(["inspect", str(outdir)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    refusals = [line for line in lines if "not written" in line]
    assert len(refusals) == 1
    assert refusals[0].split()[0] == "int8"
    assert re.search(r" its parity gate at export found last_hidden_state_min_cosine = (?:0\.9|1\.0)", refusals[0])
    assert cli_main(["inspect", str(outdir), "--json"]) == EXIT_OK
    facts = json.loads(capsys.readouterr().out)
    assert list(facts["variants"]) == ["fp32"]
    assert re.match(r"last_hidden_state_min_cosine = (?:0\.9|1\.0)", facts["refused_variants"]["int8"]["reason"])


def test_manifest_without_the_block_reads_as_before(refused: tuple[Path, list[str]]) -> None:
    outdir, _ = refused
    manifest = read_manifest(outdir)
    data = {k: v for k, v in manifest.data.items() if k != "refused_variants"}
    old = Manifest(directory=manifest.directory, data=data, files=manifest.files)
    assert old.refused_variants == {}
    with pytest.raises(VariantMissingError, match=r"has no 'int8' variant; it holds fp32\. .* --variants int8") as e:
        old.require_variant("int8")
    assert e.value.reason is None
    assert "--variants int8" in describe_error(e.value)
    assert from_core(e.value).message == "'int8' is not served here; the export holds fp32"


def test_named_refused_variant_publishes_the_rest_and_exits_variant_refused(
    int8_cannot_pass: None, tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outdir = tmp_path / "named"
    code = export_main([str(tiny_checkpoint), str(outdir), "--variants", "fp32,int8", "--json"])
    out, err = capsys.readouterr()
    assert code == EXIT_VARIANT_REFUSED
    assert list(json.loads(out)["refused_variants"]) == ["int8"]
    log = err.strip().splitlines()
    (not_written,) = [line for line in log if " not written: " in line]
    assert re.fullmatch(rf"\[export\] {NOT_WRITTEN}", not_written)  # named: not a NOTE
    assert log[-1] == (
        f"[export] int8, named by --variants, missed its parity gate and was not written; {outdir} holds fp32 "
        f"(exit {EXIT_VARIANT_REFUSED}: variant refused)"
    )
    assert list(read_manifest(outdir).variants) == ["fp32"]
    assert BertOnnx(outdir).embed(["hi"]).shape[0] == 1


def test_without_variants_a_refusal_is_a_note_and_exit_0(
    int8_cannot_pass: None, tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outdir = tmp_path / "default"
    assert export_main([str(tiny_checkpoint), str(outdir)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    notes = [line for line in lines if "not written" in line]
    assert len(notes) == 1
    assert re.fullmatch(rf"\[export\] NOTE {NOT_WRITTEN}", notes[0])
    assert lines[-1] == f"[export] wrote {outdir.absolute()}"
    manifest = read_manifest(outdir)
    assert list(manifest.variants) == ["fp32", "optimized", "bf16"]
    assert list(manifest.refused_variants) == ["int8"]


def test_exact_variant_breach_still_writes_nothing(
    int8_cannot_pass: None, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    outdir = tmp_path / "broken"
    options = ExportOptions(
        outdir=outdir, model=str(tiny_checkpoint), variants=("fp32", "int8"), tamper=_swap_pooler_activation
    )
    with pytest.raises(
        ExportError, match=r"(?s)^parity gate failed; nothing was written:.*fp32: pooler_output max abs diff"
    ) as caught:
        run_export(options, log=lambda message: None)
    assert caught.value.exit_code == EXIT_GATE_FAILED
    assert not outdir.exists()
    assert _leftovers(tmp_path) == []


def test_no_variant_left_writes_nothing(
    int8_cannot_pass: None, tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outdir = tmp_path / "only-int8"
    assert export_main([str(tiny_checkpoint), str(outdir), "--variants", "int8"]) == EXIT_GATE_FAILED
    err = capsys.readouterr().err
    assert "parity gate failed (no variant passed); nothing was written" in err
    assert "int8: last_hidden_state_min_cosine" in err
    assert not outdir.exists()
    assert _leftovers(tmp_path) == []
