"""Shared fixtures: a tiny BERT checkpoint built locally, its export, and (slow) the full-size export.

Expensive artifacts are session-scoped and built once. Nothing here touches the network: the tiny model
uses bert-base-uncased's shipped vocabulary, the full-size one seeded random weights.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VOCAB = ROOT / "export" / "assets" / "bert-base-uncased" / "vocab.txt"
TINY_CONFIG = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
}
TINY_SEED = 1234

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def save_tiny_checkpoint(directory: Path, *, with_heads: bool = True, seed: int = TINY_SEED) -> Path:
    """Write a tiny BERT checkpoint (weights ~ N(0, 0.05), real uncased vocab) with ``save_pretrained``."""
    import torch
    from transformers import BertConfig, BertForPreTraining, BertModel, BertTokenizerFast

    config = BertConfig(**TINY_CONFIG)
    torch.manual_seed(seed)
    model = BertForPreTraining(config) if with_heads else BertModel(config)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.05)
    model.save_pretrained(directory)
    BertTokenizerFast(vocab_file=str(VOCAB), do_lower_case=True).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "checkpoint")


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint: Path) -> Path:
    from export.pipeline import ExportOptions, run_export

    outdir = tmp_path_factory.mktemp("tiny-export") / "model"
    run_export(ExportOptions(outdir=outdir, model=str(tiny_checkpoint)), log=lambda message: None)
    return outdir


@pytest.fixture(scope="session")
def bert_base_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full-size bert-base-uncased export with seeded RANDOM weights, through the real CLI."""
    outdir = tmp_path_factory.mktemp("bert-base") / "bert-base-uncased"
    subprocess.run(
        [sys.executable, "-m", "export", "bert-base-uncased", str(outdir), "--weights", "random", "--seed", "0"],
        check=True,
        cwd=ROOT,
    )
    return outdir


#: Run in a subprocess: blocks torch/transformers/optimum, then imports every bertonnx module.
BLOCK_TORCH = """
import importlib.abc, sys
BANNED = ("torch", "transformers", "optimum")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BANNED:
            raise ImportError(f"blocked import of {name}")
        return None
sys.meta_path.insert(0, Block())
import importlib, pkgutil, bertonnx
for info in pkgutil.walk_packages(bertonnx.__path__, "bertonnx."):
    importlib.import_module(info.name)
"""


def run_torch_free(code: str) -> str:
    """Run ``code`` after BLOCK_TORCH in a fresh interpreter; return stdout (fails on any error)."""
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH + code], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
