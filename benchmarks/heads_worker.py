"""One timed process of ``benchmarks.heads compare``: run by each side's own Python, as a script.

``python benchmarks/heads_worker.py MODEL_DIR CORPUS.json OUT.npz THREADS REPEATS`` loads the model with
whatever ``bertonnx`` that interpreter has installed (main's or a branch's), times the embedding and NSP
paths, saves their outputs to ``OUT.npz`` (the parent checks both sides gave the same numbers) and prints
one JSON line of timings, with the time spent outside ``session.run`` (tokenizing, batching,
post-processing: the runtime's own work) per input. It uses only the API both sides share
(``BertOnnx.embed``, ``nsp``, ``__call__``, ``session.run``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings


class TimedSession:
    """The model's session, with the seconds spent in ``run`` added up (everything else is delegated)."""

    def __init__(self, session: object) -> None:
        self._session = session
        self.seconds = 0.0

    def run(self, *args: object, **kwargs: object) -> object:
        begin = time.perf_counter()
        try:
            return self._session.run(*args, **kwargs)  # type: ignore[attr-defined]
        finally:
            self.seconds += time.perf_counter() - begin

    def __getattr__(self, name: str) -> object:
        return getattr(self._session, name)


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
    session = TimedSession(model.session)
    model.session = session  # both sides call self.session.run: the time outside it is the runtime's own

    started, session.seconds = time.perf_counter(), 0.0
    vectors = model.embed(texts, "mean", truncation=True)
    embed_s = time.perf_counter() - started
    embed_overhead_s = embed_s - session.seconds
    started, session.seconds = time.perf_counter(), 0.0
    probabilities = model.nsp(texts[:half], texts[half : 2 * half], truncation=True)
    nsp_s = time.perf_counter() - started
    nsp_overhead_s = nsp_s - session.seconds

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
                "embed_overhead_ms_per_text": embed_overhead_s * 1e3 / len(texts),
                "nsp_overhead_ms_per_pair": nsp_overhead_s * 1e3 / half,
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
