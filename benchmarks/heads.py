"""The heads round's benchmarks (issue 19): the embedding and NSP paths before and after the task layer,
and what fill-mask costs as the number of ``[MASK]`` tokens grows.

``python -m benchmarks.heads compare MODEL_DIR --before PYTHON --after PYTHON`` runs
``benchmarks/heads_worker.py`` with each interpreter (each has its own ``bertonnx`` installed: main's and
the branch's) in alternating rounds, the order swapped every round, each round a fresh process per side.
A process times ``embed(texts, "mean", truncation=True)`` on the mixed corpus (what the bench's
corpus-throughput section times), ``nsp`` on pairs of it, and B1×T128 end to end (``embed``, ``nsp``,
``__call__``; median of ``--repeats`` calls). The report gives each round's after/before ratio and their
median, and checks the two sides' outputs are identical.

``python -m benchmarks.heads fill-mask MODEL_DIR`` times ``fill_mask`` on one 128-token text with 1 to 32
masks against the encoder alone, the part fill-mask adds (the MLM head on the gathered mask rows, softmax,
top-k, decoding) on its own, and the MLM head on every position (what a vocabulary projection of every
token would add).

Run either under the machine's timing lock: ``flock /work/team/timing.lock python -m benchmarks.heads ...``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from .corpus import build_mixed_corpus
from .machine import cpu_facts, now_utc, versions

WORKER = Path(__file__).with_name("heads_worker.py")
METRICS = (
    "embed_texts_per_s",
    "nsp_pairs_per_s",
    "embed_overhead_ms_per_text",
    "nsp_overhead_ms_per_pair",
    "b1t128_embed_ms",
    "b1t128_nsp_ms",
    "b1t128_call_ms",
    "b1t128_embed_overhead_ms",
    "b1t128_nsp_overhead_ms",
    "b1t128_call_overhead_ms",
)
#: Higher is better for these; lower for the rest (milliseconds).
RATES = ("embed_texts_per_s", "nsp_pairs_per_s")
MASK_COUNTS = (1, 2, 4, 8, 16, 32)
WORKER_TIMEOUT_S = 600


def _texts_of_tokens(model: Any, tokens: int) -> str:
    """A text of exactly ``tokens`` tokens with ``[CLS]``/``[SEP]``."""
    words = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "and", "runs", "far", "away"]
    text = " ".join(words[i % len(words)] for i in range(tokens - 2))
    if len(model.tokenize(text)) != tokens:
        raise RuntimeError(f"the {tokens}-token text has {len(model.tokenize(text))} tokens")
    return text


def compare(args: argparse.Namespace) -> dict[str, Any]:
    from bertonnx import BertOnnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = BertOnnx(args.model_dir)
    t128 = _texts_of_tokens(model, 128)
    half = _texts_of_tokens(model, 64)
    corpus = {"texts": build_mixed_corpus(args.texts), "t128": t128, "pair128": [half, half[: len(half)]]}
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as work:
        corpus_path = Path(work) / "corpus.json"
        corpus_path.write_text(json.dumps(corpus), encoding="utf-8")
        for number in range(args.rounds):
            order = ("before", "after") if number % 2 == 0 else ("after", "before")
            result: dict[str, Any] = {"order": list(order)}
            for side in order:
                python = args.before if side == "before" else args.after
                out = Path(work) / f"{side}-{number}.npz"
                command = [python, str(WORKER), str(args.model_dir), str(corpus_path), str(out)]
                command += [str(args.threads), str(args.repeats)]
                done = subprocess.run(command, capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, check=True)
                result[side] = json.loads(done.stdout.strip().splitlines()[-1])
                result[f"{side}_outputs"] = str(out)
            before, after = np.load(result["before_outputs"]), np.load(result["after_outputs"])
            result["identical"] = all(np.array_equal(before[k], after[k]) for k in before.files)
            result["max_abs"] = max(float(np.abs(before[k] - after[k]).max(initial=0)) for k in before.files)
            rounds.append(result)
            print(f"round {number + 1}/{args.rounds}: " + json.dumps({s: result[s] for s in order}), file=sys.stderr)
    summary = {}
    for metric in METRICS:
        ratios = [r["after"][metric] / r["before"][metric] for r in rounds]
        summary[metric] = {
            "before_median": statistics.median(r["before"][metric] for r in rounds),
            "after_median": statistics.median(r["after"][metric] for r in rounds),
            "after_over_before_median": statistics.median(ratios),
            "ratios": ratios,
            "better": "higher" if metric in RATES else "lower",
        }
    return {
        "kind": "compare",
        "date": now_utc(),
        "machine": cpu_facts(),
        "versions": versions(),
        "model_dir": str(args.model_dir),
        "texts": args.texts,
        "threads": args.threads,
        "repeats": args.repeats,
        "before": args.before,
        "after": args.after,
        "rounds": rounds,
        "identical": all(r["identical"] for r in rounds),
        "summary": summary,
    }


def fill_mask_cost(args: argparse.Namespace) -> dict[str, Any]:
    from bertonnx import BertOnnx
    from bertonnx.batching import make_batch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = BertOnnx(args.model_dir, threads=args.threads)
    text = _texts_of_tokens(model, 128)
    words = text.split()

    def median_ms(call: Any) -> float:
        call()
        times = []
        for _ in range(args.repeats):
            begin = time.perf_counter()
            call()
            times.append((time.perf_counter() - begin) * 1e3)
        return statistics.median(times)

    (encoding,) = model.encode(text)
    batch = make_batch([encoding], [0])
    encoder_ms = median_ms(lambda: model.run_batch(batch, ["last_hidden_state"]))
    states = model.run_batch(batch, ["last_hidden_state"])["last_hidden_state"][0]
    every_position_ms = median_ms(lambda: model.run_mlm_head(np.ascontiguousarray(states)))
    task = model.task("fill_mask", top_k=5)
    rows = []
    for masks in args.masks:
        step = max(1, len(words) // masks)
        masked = [("[MASK]" if i % step == 0 and i // step < masks else w) for i, w in enumerate(words)]
        masked_text = " ".join(masked)
        answer = model.fill_mask(masked_text)
        if len(answer) != masks or any(len(candidates) != 5 for candidates in answer):
            raise RuntimeError(f"fill_mask gave {len(answer)} masks for {masks}: the timed call is wrong")
        (masked_encoding,) = model.encode(masked_text)
        masked_batch = make_batch([masked_encoding], [0])
        hidden = model.run_batch(masked_batch, ["last_hidden_state"])
        rows.append(
            {
                "masks": masks,
                "fill_mask_ms": median_ms(lambda t=masked_text: model.fill_mask(t)),
                # the MLM head on the gathered mask rows, softmax, top-k and decoding: all fill-mask adds
                "head_and_top_k_ms": median_ms(lambda o=hidden, b=masked_batch: task.postprocess(o, b)),
            }
        )
    return {
        "kind": "fill-mask",
        "date": now_utc(),
        "machine": cpu_facts(),
        "versions": versions(),
        "model_dir": str(args.model_dir),
        "config": model.manifest.config,
        "threads": args.threads,
        "repeats": args.repeats,
        "tokens": 128,
        "encoder_only_ms": encoder_ms,
        "mlm_head_every_position_ms": every_position_ms,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.heads", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("compare", help="embedding and NSP paths, before vs after, alternating rounds")
    one.add_argument("model_dir", type=Path)
    one.add_argument("--before", required=True, help="Python with the 'before' bertonnx installed")
    one.add_argument("--after", default=sys.executable, help="Python with the 'after' bertonnx (default: this one)")
    one.add_argument("--texts", type=int, default=1000, help="mixed-corpus texts (default 1000)")
    one.add_argument("--rounds", type=int, default=4, help="alternating rounds (default 4)")
    one.add_argument("--repeats", type=int, default=30, help="B1xT128 calls per process (default 30)")
    one.add_argument("--threads", type=int, default=2)
    one.add_argument("--out", type=Path, help="write the results as JSON here")
    two = sub.add_parser("fill-mask", help="fill-mask cost against the number of masks")
    two.add_argument("model_dir", type=Path)
    two.add_argument("--masks", type=lambda s: [int(v) for v in s.split(",")], default=list(MASK_COUNTS))
    two.add_argument("--repeats", type=int, default=20)
    two.add_argument("--threads", type=int, default=2)
    two.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)
    results = compare(args) if args.command == "compare" else fill_mask_cost(args)
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
