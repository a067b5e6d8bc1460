"""Corpus throughput: bertonnx at each precision against sentence-transformers on one mixed-length corpus.

Most texts people embed arrive as corpora of mixed lengths, so this section times whole corpora, not one
shape: ``benchmarks.corpus.build_mixed_corpus`` (seeded, 3–400 words, 70 % under 30 words), mean pooling
(sentence-transformers' convention), truncation at the model's 512 positions, the same thread budget.

Runners, each in its own fresh process, one after another:
- ``sentence-transformers`` (torch backend): the peer. It loads the export's own PyTorch weights
  (``BertModel`` saved with the export's tokenizer files; sentence-transformers adds mean pooling),
  ``max_seq_length`` 512, its default batch size 32, its own length sorting.
- every bertonnx variant: ``BertOnnx(dir, variant).embed(texts, "mean", truncation=True)`` with the
  runtime's defaults (token-budget batching).

Per runner: texts/s of each pass (the median is compared), tokens/s (tokens after truncation, special
tokens included), and, against the peer's vectors, the max abs difference and the min and mean cosine.
Timed and compared vectors are the same call's, so what was timed is what was checked.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PEER_RUNNER = "sentence-transformers"
#: sentence-transformers' default ``encode`` batch size.
PEER_BATCH_SIZE = 32
POOLING = "mean"
#: Texts and timed passes per export: the real-weights (small) model gets the full corpus; bert-base,
#: about 8× the work per token, a quarter of it and one pass so a full bench run stays within an hour.
REAL_WEIGHTS_TEXTS, REAL_WEIGHTS_PASSES = 4000, 3
MAIN_TEXTS, MAIN_PASSES = 1000, 1
QUICK_TEXTS, QUICK_PASSES = 100, 1
#: Texts embedded once before timing (loads kernels, grows memory arenas).
WARMUP_TEXTS = 64
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
COSINE_FLOOR = 1e-30


def corpus_texts(spec: dict[str, Any]) -> list[str]:
    from .corpus import build_mixed_corpus

    return build_mixed_corpus(int(spec["size"]), int(spec["seed"]))


def _timed_passes(embed: Any, texts: list[str], passes: int) -> tuple[np.ndarray, list[float]]:
    embed(texts[:WARMUP_TEXTS])
    seconds = []
    vectors = np.zeros((0,), dtype=np.float32)
    for _ in range(passes):
        started = time.perf_counter()
        vectors = embed(texts)
        seconds.append(time.perf_counter() - started)
    return np.asarray(vectors, dtype=np.float32), seconds


def peer_checkpoint(manifest: Any, target: Path) -> Path:
    """Save the export's PyTorch ``BertModel`` with the export's tokenizer files for sentence-transformers.

    Random-weights exports are rebuilt from their seed, pretrained ones from their source (as the
    correctness check does), so the peer computes with exactly the weights the export holds.
    """
    import shutil

    from .reference import load_reference

    _, source = load_reference(manifest, None)
    getattr(source.model, "bert", source.model).save_pretrained(target)  # a BertModel export is the base model
    for name in TOKENIZER_FILES:
        if (manifest.directory / name).exists():
            shutil.copy2(manifest.directory / name, target / name)
    return target


def task_peer(spec: dict[str, Any]) -> dict[str, Any]:
    """The peer in this process: sentence-transformers on torch, mean pooling, batches of 32."""
    import torch

    torch.set_num_threads(int(spec["threads"]))
    torch.set_num_interop_threads(1)
    from sentence_transformers import SentenceTransformer, models

    from bertonnx.manifest import read_manifest

    manifest = read_manifest(spec["dir"])
    checkpoint = peer_checkpoint(manifest, Path(spec["workdir"]) / f"peer-{manifest.directory.name}")
    transformer = models.Transformer(str(checkpoint), max_seq_length=manifest.max_position_embeddings)
    # sentence-transformers 5.x renamed get_word_embedding_dimension (the old name warns)
    dimension = getattr(transformer, "get_embedding_dimension", None) or transformer.get_word_embedding_dimension
    pooling = models.Pooling(dimension(), pooling_mode="mean")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    texts = corpus_texts(spec)

    def embed(batch: list[str]) -> np.ndarray:
        with torch.inference_mode():
            out: np.ndarray = model.encode(batch, batch_size=PEER_BATCH_SIZE, convert_to_numpy=True)
        return out

    vectors, seconds = _timed_passes(embed, texts, int(spec["passes"]))
    np.save(spec["vectors"], vectors)
    import sentence_transformers

    return {
        "runner": PEER_RUNNER,
        "seconds": seconds,
        "threads": torch.get_num_threads(),
        "version": sentence_transformers.__version__,
    }


def task_bertonnx(spec: dict[str, Any]) -> dict[str, Any]:
    """One bertonnx variant in this process: ``embed(texts, "mean", truncation=True)`` with the defaults."""
    from bertonnx import BertOnnx, RuntimeOptions

    model = BertOnnx(spec["dir"], spec["variant"], options=RuntimeOptions(threads=int(spec["threads"])))
    texts = corpus_texts(spec)
    vectors, seconds = _timed_passes(
        lambda batch: model.embed(batch, POOLING, truncation=True, max_length=model.max_length),
        texts,
        int(spec["passes"]),
    )
    np.save(spec["vectors"], vectors)
    tokens = sum(len(e.ids) for e in model.encode(texts, truncation=True, max_length=model.max_length))
    return {"runner": spec["variant"], "seconds": seconds, "tokens": tokens, "threads": model.options.intra_op_threads}


def compare(vectors: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    """Max abs difference and min/mean cosine of ``vectors`` against the peer's, row by row."""
    a, b = vectors.astype(np.float64), reference.astype(np.float64)
    cosine = (a * b).sum(axis=1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), COSINE_FLOOR)
    return {
        "max_abs": float(np.abs(a - b).max()),
        "min_cosine": float(cosine.min()),
        "mean_cosine": float(cosine.mean()),
    }


def run_section(
    workers: Any,
    directory: Path,
    variants: list[str],
    threads: int,
    size: int,
    passes: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Time the peer and every variant on ``size`` texts of the mixed corpus; compare their vectors.

    Args:
        workers: the bench's fresh-process runner (``run(task, spec) -> dict``).
        directory: the export.
        variants: bertonnx variants to time.
        threads: the thread budget of every runner.
        size: texts in the corpus.
        passes: timed passes per runner.
        progress: prints one progress line.
    """
    from .corpus import DEFAULT_CORPUS_SEED

    common = {"dir": str(directory), "threads": threads, "size": size, "seed": DEFAULT_CORPUS_SEED, "passes": passes}
    workdir = Path(workers.workdir)
    peer_vectors = workdir / f"throughput-{directory.name}-peer.npy"
    peer = workers.run("peer", {**common, "vectors": str(peer_vectors), "workdir": str(workdir)})
    reference = np.load(peer_vectors)
    rows: list[dict[str, Any]] = []
    tokens = None
    for variant in variants:
        path = workdir / f"throughput-{directory.name}-{variant}.npy"
        out = workers.run("throughput", {**common, "variant": variant, "vectors": str(path)})
        tokens = out["tokens"]
        rows.append({**_rates(out, size, tokens), **compare(np.load(path), reference)})
        progress(f"corpus throughput {directory.name} {variant}: {rows[-1]['texts_per_s']:.1f} texts/s")
    peer_row = {**_rates(peer, size, tokens), "max_abs": 0.0, "min_cosine": 1.0, "mean_cosine": 1.0}
    progress(f"corpus throughput {directory.name} {PEER_RUNNER}: {peer_row['texts_per_s']:.1f} texts/s")
    for row in rows:
        row["vs_peer"] = row["texts_per_s"] / peer_row["texts_per_s"]
    peer_row["vs_peer"] = 1.0
    return {
        "directory": str(directory),
        "texts": size,
        "tokens": tokens,
        "passes": passes,
        "seed": DEFAULT_CORPUS_SEED,
        "peer": {"runner": PEER_RUNNER, "version": peer["version"], "batch_size": PEER_BATCH_SIZE},
        "rows": [peer_row, *rows],
    }


def _rates(out: dict[str, Any], texts: int, tokens: int | None) -> dict[str, Any]:
    per_pass = [texts / s for s in out["seconds"]]
    median = statistics.median(per_pass)
    return {
        "runner": out["runner"],
        "texts_per_s": median,
        "texts_per_s_passes": per_pass,
        "tokens_per_s": None if tokens is None else median * tokens / texts,
    }
