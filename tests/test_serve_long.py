"""An 8,192-token request to ``bertonnx serve`` on a tiny ModernBERT export: answered as offline ``BertOnnx``
answers it, while ``/health`` keeps answering (the engine runs off the event loop), and the server's memory
stays within docs/serving.md's bound for one long input (at most one ``[heads, t, t]`` float32 score tensor
over the loaded server).

One server (127.0.0.1, one intra-op thread) on a tiny seeded ModernBertModel; every wait is bounded.
"""

from __future__ import annotations

import json
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from bertonnx import BertOnnx

from .families import build_family_checkpoint
from .test_serve import Server

pytest.importorskip("torch")

#: Far more than 8,192 tokens with the tiny ModernBERT tokenizer; the request asks to truncate.
LONG = "The history of natural language processing generally started in the 1950s. " * 700
HEALTH_LIMIT_S = 1.0
EMBED_TIMEOUT_S = 120
#: docs/serving.md's bound: one input of t tokens costs at most heads x t x t float32 scores over the loaded server.
FLOAT32_BYTES = 4


def _status_kb(pid: int, field: str) -> int:
    """``VmRSS`` / ``VmHWM`` of a process, in kB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/{pid}/status")


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import torch

    from bertonnx_export.pipeline import ExportOptions, run_export

    root = tmp_path_factory.mktemp("serve-modernbert")
    checkpoint = build_family_checkpoint("ModernBertModel", root / "checkpoint")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_export(ExportOptions(outdir=root / "model", model=str(checkpoint)), log=lambda _: None)
    finally:
        torch.set_num_threads(threads)
    return root / "model"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, modernbert: Path) -> Iterator[Server]:
    found = Server(modernbert, tmp_path_factory.mktemp("serve-long") / "server.log", "--max-batch-tokens", "512")
    try:
        yield found
    finally:
        found.stop()


def test_an_8192_token_embed_is_answered_while_health_stays_responsive(server: Server, modernbert: Path) -> None:
    model = BertOnnx(modernbert, threads=1)
    assert len(model.encode([LONG], truncation=True)[0].ids) == 8192
    expected = model.embed([LONG], "mean", truncation=True, normalize=True)
    answer: dict[str, Any] = {}

    def embed() -> None:
        with httpx.Client(base_url=server.url, timeout=EMBED_TIMEOUT_S) as client:
            response = client.post("/embed", json={"inputs": LONG, "pooling": "mean", "truncate": True})
            answer["status"], answer["body"] = response.status_code, response.text
            answer["json"] = response.json() if response.status_code == 200 else None

    pid = server.process.pid
    loaded_kb = _status_kb(pid, "VmRSS")
    worker = threading.Thread(target=embed, daemon=True)
    worker.start()
    waits = []
    with httpx.Client(base_url=server.url, timeout=HEALTH_LIMIT_S * 5) as client:
        while worker.is_alive() and len(waits) < 2000:
            start = time.monotonic()
            assert client.get("/health").status_code == 200
            waits.append(time.monotonic() - start)
            time.sleep(0.05)
    worker.join(EMBED_TIMEOUT_S)
    assert not worker.is_alive(), "the 8,192-token request was not answered in time"
    assert answer["status"] == 200, answer["body"]
    np.testing.assert_allclose(np.asarray(answer["json"]), expected, atol=1e-5, rtol=0)
    assert len(waits) >= 3, "the request was answered before /health could be asked during it"
    assert max(waits) < HEALTH_LIMIT_S, f"/health took {max(waits):.2f} s while the long request ran"
    heads = json.loads((modernbert / "config.json").read_text(encoding="utf-8"))["num_attention_heads"]
    bound = heads * 8192 * 8192 * FLOAT32_BYTES
    grown = (_status_kb(pid, "VmHWM") - loaded_kb) * 1024
    assert 0 < grown <= bound, f"the server's peak grew {grown / 2**20:.0f} MiB, over the {bound / 2**20:.0f} MiB bound"
