"""Memory of a long-running process fed many batch shapes: the arena-shrinkage and release options that the
server turns on by default. Default onnxruntime keeps its arena and the allocator keeps freed fragments, so
resident memory grows with every new shape; with both options it follows the batch being computed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertonnx import BertOnnx, RuntimeOptions
from bertonnx.batching import make_batch
from bertonnx.session import release_freed_memory, run_options

from .conftest import ROOT

#: Runs a seeded stream of mixed batch shapes (lengths 8-512, batches up to the 16384-token budget) through
#: ``BertOnnx.run_batch`` and prints RSS after the first tenth of the runs and at the end.
SHAPES_SCRIPT = """
import json, sys
import numpy as np, psutil
from bertonnx import BertOnnx, RuntimeOptions
from bertonnx.batching import make_batch
model_dir, runs, release = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "release"
options = RuntimeOptions(threads=1, allow_spinning=False, arena_shrinkage=release, release_memory=release)
model = BertOnnx(model_dir, options=options)
rng = np.random.default_rng(0)
rss = []
class Input:
    def __init__(self, n):
        self.ids, self.type_ids = [101] + [2000] * (n - 2) + [102], [0] * n
for _ in range(runs):
    length = int(np.exp(rng.uniform(np.log(8), np.log(512))))
    count = int(rng.integers(1, max(2, min(64, 16384 // length)) + 1))
    model.run_batch(make_batch([Input(length)] * count, np.arange(count)), ["pooler_output"])
    rss.append(psutil.Process().memory_info().rss)
print(json.dumps({"after_warmup": rss[runs // 10], "end": rss[-1]}))
"""
RUNS = 80


def test_runtime_memory_options_are_validated_and_build_run_options() -> None:
    assert run_options(RuntimeOptions()) is None
    shrinking = run_options(RuntimeOptions(arena_shrinkage=True))
    assert shrinking is not None
    assert shrinking.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    with pytest.raises(TypeError, match="release_memory must be a bool, got int"):
        RuntimeOptions(release_memory=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="arena_shrinkage must be a bool"):
        RuntimeOptions(arena_shrinkage="yes")  # type: ignore[arg-type]
    assert release_freed_memory() is (sys.platform == "linux")


def test_shrinking_and_releasing_memory_change_no_result(tiny_export: Path) -> None:
    texts = ["short", "a somewhat longer text with more words in it " * 20, "mid length text here"]
    plain = BertOnnx(tiny_export, threads=1)
    lean = BertOnnx(tiny_export, threads=1, options=RuntimeOptions(arena_shrinkage=True, release_memory=True))
    for model in (plain, lean):
        model.embed(texts)  # both warm
    np.testing.assert_array_equal(lean.embed(texts, "mean"), plain.embed(texts, "mean"))
    out_plain, out_lean = plain(texts, texts), lean(texts, texts)
    np.testing.assert_array_equal(out_lean.nsp_logits, out_plain.nsp_logits)
    batch = make_batch(lean.encode(texts), np.arange(3))
    np.testing.assert_array_equal(lean.run_batch(batch)["pooler_output"], plain.run_batch(batch)["pooler_output"])


@pytest.mark.skipif(sys.platform != "linux", reason="malloc_trim is glibc's")
def test_rss_follows_the_batch_with_the_servers_memory_options(tiny_export: Path) -> None:
    def rss(mode: str) -> dict[str, int]:
        command = [sys.executable, "-c", SHAPES_SCRIPT, str(tiny_export), str(RUNS), mode]
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert result.returncode == 0, result.stderr[-3000:]
        found: dict[str, int] = json.loads(result.stdout)
        return found

    kept, released = rss("keep"), rss("release")
    kept_growth = kept["end"] / kept["after_warmup"] - 1
    released_growth = released["end"] / released["after_warmup"] - 1
    assert released_growth < 0.05, (released, kept)
    assert released["end"] < kept["end"], (released, kept)
    assert released_growth < kept_growth, (released, kept)
