"""Cold start: a fresh interpreter imports, loads the model and returns one result.

Wall time is measured by the parent from spawn to exit (what a user waits for); the probe itself reports
its import, load and first-result times and its own peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``:
``RUSAGE_CHILDREN`` would give the largest child so far, not this one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

MODULE_PAIR = ("the weather is nice", "i agree with you")
BYTES_PER_MB = 1e6
#: Marker prefixing the probe's JSON line on stdout (libraries may print too).
RESULT_MARKER = "BENCH_COLDSTART "
PROBE_TIMEOUT_S = 900

_PROBE_HEAD = """
import json, resource, sys, time
t0 = time.perf_counter()
"""
_PROBE_TAIL = """
t3 = time.perf_counter()
rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print({marker!r} + json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "first_result_s": t3 - t2,
      "peak_rss_mb": rss_kb * 1024 / 1e6, "check": check}}), flush=True)
"""
_BERTONNX_PROBE = """
from bertonnx import BertOnnx
t1 = time.perf_counter()
model = BertOnnx({directory!r}, {variant!r}, threads={threads})
t2 = time.perf_counter()
out = model([{a!r}], [{b!r}])
check = float(out.nsp_logits[0, 0])
"""
_TORCH_PROBE = """
import torch
torch.set_num_threads({threads})
torch.set_num_interop_threads(1)
from transformers import BertForPreTraining, BertTokenizerFast
t1 = time.perf_counter()
model = BertForPreTraining.from_pretrained({checkpoint!r}).eval()
tokenizer = BertTokenizerFast.from_pretrained({tokenizer_dir!r})
t2 = time.perf_counter()
with torch.inference_mode():
    out = model(**tokenizer([{a!r}], [{b!r}], return_tensors="pt"))
check = float(out.seq_relationship_logits[0, 0])
"""


def _run_probe(body: str, env: dict[str, str]) -> dict[str, Any]:
    code = _PROBE_HEAD + body + _PROBE_TAIL.format(marker=RESULT_MARKER)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=PROBE_TIMEOUT_S
    )
    wall = time.perf_counter() - started
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"cold-start probe failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len(RESULT_MARKER) :])
    result["wall_s"] = wall
    return result


def _with_files(result: dict[str, Any], paths: list[Path]) -> dict[str, Any]:
    """Add the model's size on disk: the sum of ``paths`` (a graph and its weights file, or a checkpoint)."""
    size_mb = sum(path.stat().st_size for path in paths) / BYTES_PER_MB
    result.update(
        file=" + ".join(path.name for path in paths), file_mb=size_mb, rss_per_file_mb=result["peak_rss_mb"] / size_mb
    )
    return result


def probe_bertonnx(
    directory: Path, variant: str, model_files: list[Path], threads: int, env: dict[str, str]
) -> dict[str, Any]:
    """Cold start of ``BertOnnx(directory, variant)`` and one pair through it.

    Args:
        model_files: the variant's files (``Manifest.variant_files``), whose total size RSS is compared with.
    """
    body = _BERTONNX_PROBE.format(
        directory=str(directory), variant=variant, threads=threads, a=MODULE_PAIR[0], b=MODULE_PAIR[1]
    )
    return _with_files(_run_probe(body, env), model_files)


def probe_torch(checkpoint: Path, tokenizer_dir: Path, threads: int, env: dict[str, str]) -> dict[str, Any]:
    """Cold start of torch + transformers: ``BertForPreTraining.from_pretrained`` and one pair."""
    body = _TORCH_PROBE.format(
        checkpoint=str(checkpoint),
        tokenizer_dir=str(tokenizer_dir),
        threads=threads,
        a=MODULE_PAIR[0],
        b=MODULE_PAIR[1],
    )
    weights = next(
        (checkpoint / name for name in ("model.safetensors", "pytorch_model.bin") if (checkpoint / name).is_file()),
        None,
    )
    if weights is None:
        raise ValueError(
            f"{checkpoint} holds no model.safetensors or pytorch_model.bin; expected a checkpoint directory"
        )
    return _with_files(_run_probe(body, env), [weights])


def thread_env(threads: int) -> dict[str, str]:
    """The environment of every child: the thread budget for OpenMP, MKL and OpenBLAS pools."""
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[name] = str(threads)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env
