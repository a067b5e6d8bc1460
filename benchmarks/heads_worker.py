"""One timed process of ``benchmarks.heads compare``: run by each side's own Python, as a script.

``python benchmarks/heads_worker.py MODEL_DIR CORPUS.json OUT.npz THREADS REPEATS`` loads the model with
whatever ``bertonnx`` that interpreter has installed (main's or a branch's), times the embedding and NSP
paths, saves their outputs to ``OUT.npz`` (the parent checks both sides gave the same numbers) and prints
one JSON line of timings. It uses only the API both sides share (``BertOnnx.embed``, ``nsp``, ``__call__``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings


def main(argv: list[str]) -> int:
    import numpy as np

    import bertonnx
    from bertonnx import BertOnnx

    model_dir, corpus_path, out_path, threads, repeats = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    with open(corpus_path, encoding="utf-8") as handle:
        corpus = json.load(handle)
    texts, t128, pair128 = corpus["texts"], corpus["t128"], corpus["pair128"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = BertOnnx(model_dir, "fp32", threads=threads)
    model.embed(texts[:64], "mean", truncation=True)  # warm-up: the session's first allocations
    half = len(texts) // 2

    started = time.perf_counter()
    vectors = model.embed(texts, "mean", truncation=True)
    embed_s = time.perf_counter() - started
    started = time.perf_counter()
    probabilities = model.nsp(texts[:half], texts[half : 2 * half], truncation=True)
    nsp_s = time.perf_counter() - started

    def median_ms(call: object) -> float:
        times = []
        for _ in range(repeats):
            begin = time.perf_counter()
            call()  # type: ignore[operator]
            times.append((time.perf_counter() - begin) * 1e3)
        return statistics.median(times)

    b1_embed = median_ms(lambda: model.embed(t128, "mean"))
    b1_nsp = median_ms(lambda: model.nsp(pair128[0], pair128[1]))
    b1_call = median_ms(lambda: model(t128))
    np.savez(out_path, embed=vectors, nsp=probabilities, b1=model.embed(t128, "mean"), call=model(t128).pooler_output)
    print(
        json.dumps(
            {
                "embed_texts_per_s": len(texts) / embed_s,
                "nsp_pairs_per_s": half / nsp_s,
                "b1t128_embed_ms": b1_embed,
                "b1t128_nsp_ms": b1_nsp,
                "b1t128_call_ms": b1_call,
                "bertonnx": bertonnx.__file__,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
