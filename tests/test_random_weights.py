"""Random weights are never silent: a warning on load from Python, a ``random_weights`` field in every
``--json`` output that carries model numbers, a banner in text output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import bertonnx
from bertonnx import BertOnnx, RandomWeightsWarning
from bertonnx.cli import main
from bertonnx.manifest import MANIFEST_FILE
from bertonnx.surface import ENVELOPE_KEYS

from .conftest import HAVE_TORCH, ROOT

pytestmark = pytest.mark.torch_free


def _with_weights(tiny_export: Path, target: Path, weights: dict[str, object]) -> Path:
    """A copy of the tiny export whose manifest records ``weights`` (the manifest itself is not hashed)."""
    shutil.copytree(tiny_export, target)
    manifest = json.loads((target / MANIFEST_FILE).read_text())
    manifest["weights"] = weights
    (target / MANIFEST_FILE).write_text(json.dumps(manifest))
    return target


@pytest.fixture(scope="module")
def random_export(tiny_export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    note = "RANDOM WEIGHTS: outputs are meaningless; use for latency and parity checks only."
    weights = {"kind": "random", "seed": 0, "random_heads": [], "note": note}
    return _with_weights(tiny_export, tmp_path_factory.mktemp("random") / "model", weights)


@pytest.fixture(scope="module")
def random_heads_export(tiny_export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    note = "RANDOM HEADS: the nsp head was seeded (seed 0), not trained; its outputs are meaningless."
    weights = {"kind": "pretrained", "seed": 0, "random_heads": ["nsp"], "note": note}
    return _with_weights(tiny_export, tmp_path_factory.mktemp("heads") / "model", weights)


def test_loading_random_weights_warns(random_export: Path, random_heads_export: Path) -> None:
    with pytest.warns(RandomWeightsWarning, match="holds random weights: RANDOM WEIGHTS: outputs are meaningless"):
        BertOnnx(random_export)
    with pytest.warns(RandomWeightsWarning, match="the nsp head was seeded") as caught:
        BertOnnx(random_heads_export, "int8")
    assert caught[0].filename == __file__  # points at the caller's line, not at bertonnx


def test_pretrained_weights_load_quietly_and_the_warning_can_be_filtered(
    tiny_export: Path, random_export: Path
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BertOnnx(tiny_export)
        warnings.simplefilter("ignore", bertonnx.RandomWeightsWarning)
        BertOnnx(random_export)
    assert issubclass(RandomWeightsWarning, UserWarning)
    assert "RandomWeightsWarning" in bertonnx.__all__


@pytest.mark.parametrize(
    "argv",
    [
        ["nsp", "{dir}", "the weather is nice", "i agree with you", "--json"],
        ["embed", "{dir}", "a text", "--json"],
        ["embed", "{dir}", "a text", "--json", "--output", "{tmp}/vectors.npy"],
        ["walkthrough", "{dir}", "--json"],
        ["inspect", "{dir}", "--json"],
    ],
    ids=["nsp", "embed", "embed-output", "walkthrough", "inspect"],
)
def test_every_json_output_says_whether_weights_are_random(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, random_export: Path, tmp_path: Path, argv: list[str]
) -> None:
    for directory, expected in ((tiny_export, False), (random_export, True)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RandomWeightsWarning)  # the CLI says it in the output instead
            assert main([a.format(dir=directory, tmp=tmp_path) for a in argv]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["random_weights"] is expected
        assert "RandomWeightsWarning" not in err


def test_inspect_says_where_the_weights_come_from_in_words(
    capsys: pytest.CaptureFixture[str], tiny_export: Path, random_export: Path, random_heads_export: Path
) -> None:
    for directory, expected in (
        (tiny_export, "weights           pretrained\n"),
        (random_export, "weights           random (seed 0)\n"),
        (random_heads_export, "weights           pretrained; nsp head random (seed 0)\n"),
    ):
        assert main(["inspect", str(directory)]) == 0
        out = capsys.readouterr().out
        assert expected in out
        assert "source            " in out
        assert "{" not in out  # words, not Python dicts


def test_text_outputs_show_a_banner(capsys: pytest.CaptureFixture[str], random_export: Path) -> None:
    """Reports about the model (walkthrough, inspect) open with the banner; commands whose stdout is answers
    print it on stderr, so `bertonnx nsp ... > out.txt` holds the answer alone."""
    for argv in (["walkthrough", str(random_export)], ["inspect", str(random_export)]):
        assert main(argv) == 0
        assert "!! RANDOM WEIGHTS: outputs are meaningless" in capsys.readouterr().out
    assert main(["nsp", str(random_export), "a", "b"]) == 0
    out, err = capsys.readouterr()
    assert "!! RANDOM WEIGHTS: outputs are meaningless" in err
    assert out.startswith("P(B follows A) = ")
    assert main(["embed", str(random_export), "a"]) == 0  # JSON lines on stdout: the banner goes to stderr
    out, err = capsys.readouterr()
    assert "!! RANDOM WEIGHTS" in err
    assert json.loads(out)["text"] == "a"


@pytest.mark.skipif(not HAVE_TORCH, reason="export and parity need the export extra")
def test_export_and_parity_json_say_it_too(tiny_checkpoint: Path, tiny_export: Path, tmp_path: Path) -> None:
    out = tmp_path / "random"
    command = [sys.executable, "-m", "bertonnx_export", str(tiny_checkpoint), "--weights", "random", "--json"]
    exported = subprocess.run(
        [*command, str(out), "--variants", "fp32"], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert exported.returncode == 0, exported.stderr
    exported_json = json.loads(exported.stdout)
    assert list(exported_json)[: len(ENVELOPE_KEYS)] == list(ENVELOPE_KEYS)  # the envelope of every command
    assert (exported_json["random_weights"], exported_json["results"]) == (True, [])
    for directory, expected in ((out, True), (tiny_export, False)):
        parity = subprocess.run(
            [sys.executable, "-m", "bertonnx.cli", "parity", str(directory), "--variants", "fp32", "--json"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=600,
        )
        assert parity.returncode == 0, parity.stderr
        found = json.loads(parity.stdout)
        assert list(found)[: len(ENVELOPE_KEYS)] == list(ENVELOPE_KEYS)
        assert found["random_weights"] is expected
