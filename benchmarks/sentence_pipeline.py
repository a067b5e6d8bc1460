"""The sentence-transformers pipeline's cost: embed throughput with an export's full module pipeline (its
default) against bare mean pooling on the same graph, side by side in one run, each result checked against
``SentenceTransformer.encode``.

Usage: ``python -m bertonnx_benchmarks.sentence_pipeline EXPORT ST_FOLDER [--texts N] [--repeats R]``
(run under ``flock /work/team/timing.lock`` on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def mixed_texts(n: int, seed: int = 0) -> list[str]:
    """``n`` seeded texts of 5 to 120 words."""
    line = "the weather is nice today and i agree with you about the plan for café résumé naïve market prices "
    words = (line + "rose in 2024 while researchers published results on language models").split(" ")
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(words, size=int(rng.integers(5, 120)))) for _ in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export")
    parser.add_argument("folder")
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--variant", default="optimized")
    args = parser.parse_args()

    from bertonnx import BertOnnx

    model = BertOnnx(args.export, args.variant)
    texts = mixed_texts(args.texts)
    runs = {
        "pipeline (the export's default)": lambda: model.embed(texts),
        "bare mean pooling + normalize": lambda: model.embed(texts, pooling="mean", normalize=True, truncation=True),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    vectors = {name: run() for name, run in runs.items()}  # warm-up
    for _ in range(args.repeats):  # interleaved, so a machine's drift falls on both alike
        for name, run in runs.items():
            start = time.perf_counter()
            vectors[name] = run()
            times[name].append(time.perf_counter() - start)
    results = {
        name: {"best_s": min(t), "median_s": float(np.median(t)), "texts_per_s": len(texts) / min(t)}
        for name, t in times.items()
    }

    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(args.folder, device="cpu").encode(texts)
    for name, found in results.items():
        found["max_abs_vs_encode"] = float(np.max(np.abs(vectors[name] - expected)))
    print(
        json.dumps(
            {"variant": args.variant, "texts": len(texts), "threads": model.options.intra_op_threads, **results},
            indent=1,
        )
    )
    assert results["pipeline (the export's default)"]["max_abs_vs_encode"] <= 1e-4


if __name__ == "__main__":
    main()
