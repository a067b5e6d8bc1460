"""Every encoder family at base size against PyTorch eager, fp32 and bf16, in one run (benchmarks/FAMILIES.md).

``python -m benchmarks.families --out benchmarks/FAMILIES.md --json families.json`` (alone on the machine)

For each family (bert, roberta, xlm-roberta, distilbert, mpnet, electra) a base-size checkpoint with seeded
weights (the architecture's published shape, written below from the configs of bert-base-uncased, roberta-base,
xlm-roberta-base, distilbert-base-uncased, mpnet-base and electra-base-discriminator; ``torch.manual_seed`` +
the class's own initialisation) and a tokenizer (the bundled bert-base-uncased vocabulary for the WordPiece
families that use it, else one of tests/families.py's kind) is saved, exported as the base model
(``--task feature-extraction``, variants fp32 and bf16) and measured:

- **B1×T128 p50**: one text cut to exactly 128 tokens, end to end (tokenize + run): ``model(text)`` for
  onnxruntime, ``model(**tokenizer(text))`` for torch; alternating rounds (each runtime once per round);
- **corpus texts/s**: a fixed list of texts (benchmarks/corpus.py's mixed corpus: 3-400 words, cut at 512
  tokens), batches of 32:
  ``embed(texts, "mean", batch_size=32)`` for bertonnx, and torch on the same texts sorted by length
  (as sentence-transformers sorts them) in batches of 32, mean-pooled; best of the bounded passes;

for onnxruntime fp32, bertonnx bf16 (OpenVINO; bf16 matrix products only on CPUs with AVX512-BF16 or AMX,
else f32, as ``precision`` says), torch fp32 and torch bf16 (``model.to(torch.bfloat16)``). The ratio
``torch time / bertonnx time`` (the speed-up) is computed per family, and compared with BERT's: a family is
"within 15 %" when its ratio is within 15 % of BERT's at the same size and precision.

The four runners share one process (every family in one run), so onnxruntime runs with spinning off (its idle
threads would take the cores from torch; benchmarks/worker.py does the same where torch and onnxruntime meet).
Before anything is timed each runner's T128 output is checked against torch fp32 (mean-pooled cosine: fp32
≥ 0.99999, bf16 ≥ 0.99) and the run stops if one is wrong. Every loop is bounded by ``--repeats`` and
``--max-seconds`` per family and runner. ``--quick`` is a check that the script runs (tiny 2-layer models,
1 repeat, a few texts); its figures mean nothing. Nothing here is imported by the runtime.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .corpus import build_mixed_corpus
from .machine import cpu_facts, now_utc, versions

ROOT = Path(__file__).resolve().parents[1]
BERT_VOCAB = ROOT / "export" / "assets" / "bert-base-uncased" / "vocab.txt"
FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert", "mpnet", "electra", "modernbert", "deberta-v2")
#: The published checkpoint whose shape each family's base model takes.
CHECKPOINT_NAMES = {
    "bert": "bert-base-uncased",
    "roberta": "roberta-base",
    "xlm-roberta": "xlm-roberta-base",
    "distilbert": "distilbert-base-uncased",
    "mpnet": "mpnet-base",
    "electra": "electra-base-discriminator",
    "modernbert": "ModernBERT-base",
    "deberta-v2": "deberta-v3-base",
}
_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
_ROBERTA = {"max_position_embeddings": 514, "type_vocab_size": 1, "layer_norm_eps": 1e-5}
_ROBERTA_SPECIALS = {"pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2}
#: The configs of the published checkpoints (their config.json values that shape the graph).
BASE_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "bert": ("BertConfig", {**_BASE, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}),
    "roberta": ("RobertaConfig", {**_BASE, **_ROBERTA, **_ROBERTA_SPECIALS, "vocab_size": 50265}),
    "xlm-roberta": ("XLMRobertaConfig", {**_BASE, **_ROBERTA, **_ROBERTA_SPECIALS, "vocab_size": 250002}),
    "distilbert": (
        "DistilBertConfig",
        {
            "vocab_size": 30522,
            "dim": 768,
            "n_layers": 6,
            "n_heads": 12,
            "hidden_dim": 3072,
            "max_position_embeddings": 512,
        },
    ),
    "mpnet": (
        "MPNetConfig",
        {
            **_BASE,
            **_ROBERTA_SPECIALS,
            "vocab_size": 30527,
            "max_position_embeddings": 514,
            "relative_attention_num_buckets": 32,
            "layer_norm_eps": 1e-5,
        },
    ),
    "electra": (
        "ElectraConfig",
        {**_BASE, "vocab_size": 30522, "embedding_size": 768, "max_position_embeddings": 512, "type_vocab_size": 2},
    ),
    "modernbert": (
        "ModernBertConfig",
        {
            **_BASE,
            "num_hidden_layers": 22,
            "intermediate_size": 1152,
            "vocab_size": 50368,
            "max_position_embeddings": 8192,
            "global_attn_every_n_layers": 3,
            "local_attention": 128,
        },
    ),
    "deberta-v2": (
        "DebertaV2Config",
        {
            **_BASE,
            "vocab_size": 128100,
            "max_position_embeddings": 512,
            "relative_attention": True,
            "position_buckets": 256,
            "pos_att_type": ["p2c", "c2p"],
            "norm_rel_ebd": "layer_norm",
            "share_att_key": True,
            "position_biased_input": False,
            "max_relative_positions": -1,
            "type_vocab_size": 0,
            "layer_norm_eps": 1e-7,
        },
    ),
}
#: ``--quick``: 2 layers, hidden 32 (the figures mean nothing; the script's steps all run).
QUICK_SHAPE = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}
QUICK_DISTILBERT = {"dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64}
MODEL_CLASSES = {
    "bert": "BertModel",
    "roberta": "RobertaModel",
    "xlm-roberta": "XLMRobertaModel",
    "distilbert": "DistilBertModel",
    "mpnet": "MPNetModel",
    "electra": "ElectraModel",
    "modernbert": "ModernBertModel",
    "deberta-v2": "DebertaV2Model",
}
#: Families whose published tokenizer is bert-base-uncased's WordPiece vocabulary (bundled in export/assets).
BERT_VOCAB_FAMILIES = {
    "bert": "BertTokenizerFast",
    "distilbert": "DistilBertTokenizerFast",
    "electra": "ElectraTokenizerFast",
}
SEED = 0
TOKENS = 128
BATCH = 32
CORPUS_TEXTS = 256
QUICK_TEXTS = 16
REPEATS = 30
CORPUS_PASSES = 3
MAX_SECONDS = 120.0
#: A family's speed-up is "within" when it is within this fraction of BERT's.
WITHIN = 0.15
#: Mean-pooled cosine against torch fp32 below which a runner is wrong (bf16 computes in 8-bit mantissas).
MIN_COSINE = {"fp32": 0.99999, "bf16": 0.99}
RUNNERS = ("bertonnx fp32", "bertonnx bf16", "torch fp32", "torch bf16")
#: ``--precisions``: both by default; fp32 alone where bf16 would be emulated on both sides.
PRECISIONS = ("fp32", "bf16")


def build_checkpoint(family: str, directory: Path, *, quick: bool) -> Path:
    """A seeded ``<Family>Model`` of the base shape (tiny with ``quick``) and its tokenizer, saved into
    ``directory``."""
    import torch
    import transformers

    from tests.families import build_tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    if family in BERT_VOCAB_FAMILIES:
        tokenizer = getattr(transformers, BERT_VOCAB_FAMILIES[family])(vocab_file=str(BERT_VOCAB))
        tokenizer.model_max_length = 512
        tokenizer.save_pretrained(str(directory))
    else:
        tokenizer = build_tokenizer(family, directory)
    config_name, values = BASE_CONFIGS[family]
    values = dict(values)
    if family in ("modernbert", "deberta-v2"):  # their specials' ids in the locally trained tokenizer
        values["pad_token_id"] = tokenizer.pad_token_id
    if family == "modernbert":
        ids = {"cls_token_id": tokenizer.cls_token_id, "sep_token_id": tokenizer.sep_token_id}
        values.update(ids, bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id)
    if quick:
        values.update(QUICK_DISTILBERT if family == "distilbert" else QUICK_SHAPE)
        values["vocab_size"] = len(tokenizer)
        if family == "electra":
            values["embedding_size"] = 16
    if len(tokenizer) > values["vocab_size"]:
        raise SystemExit(f"{family}: the tokenizer has {len(tokenizer)} tokens, more than vocab_size")
    config = getattr(transformers, config_name)(**values)
    torch.manual_seed(SEED)
    model = getattr(transformers, MODEL_CLASSES[family])(config).eval()
    model.save_pretrained(str(directory))
    return directory


def export(checkpoint: Path, outdir: Path, variants: tuple[str, ...]) -> dict[str, Any]:
    """``bertonnx export CHECKPOINT OUTDIR --task feature-extraction --variants ...``; the manifest."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    options = ExportOptions(outdir=outdir, model=str(checkpoint), task="feature-extraction", variants=variants)
    manifest: dict[str, Any] = run_export(options, log=lambda message: None)
    return manifest


def _mean_pooled(states: np.ndarray) -> np.ndarray:
    return np.asarray(states, dtype=np.float64).mean(axis=0)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / max(float(np.linalg.norm(a) * np.linalg.norm(b)), 1e-30))


class Runners:
    """The four runners of one family: a T128 call and a corpus pass each, and their T128 outputs."""

    def __init__(
        self, checkpoint: Path, export_dir: Path, variants: tuple[str, ...], threads: int, bf16: bool = True
    ) -> None:
        import torch
        import transformers

        import bertonnx

        self.torch = torch
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(checkpoint))
        fp32 = transformers.AutoModel.from_pretrained(str(checkpoint)).eval()
        self.torch_models = {"torch fp32": fp32}
        if bf16:
            half = transformers.AutoModel.from_pretrained(str(checkpoint), dtype=torch.bfloat16).eval()
            self.torch_models["torch bf16"] = half
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seeded weights saved as a checkpoint: nothing to warn about here
            options = bertonnx.RuntimeOptions(threads=threads, allow_spinning=False)  # idle threads would slow torch
            self.onnx = {f"bertonnx {v}": bertonnx.BertOnnx(export_dir, v, options=options) for v in variants}
        self.precision = {name: model.precision for name, model in self.onnx.items()}
        self.names = [name for name in RUNNERS if name in self.onnx or name in self.torch_models]

    def t128(self, name: str, text: str) -> np.ndarray:
        """``last_hidden_state`` of ``text`` cut to :data:`TOKENS` tokens (float32, no batch axis)."""
        if name in self.onnx:
            out = self.onnx[name](text, truncation=True, max_length=TOKENS)
            return np.asarray(out.token_states(0), dtype=np.float32)
        model = self.torch_models[name]
        with self.torch.inference_mode():
            feeds = self.tokenizer(text, truncation=True, max_length=TOKENS, return_tensors="pt")
            states = model(**feeds).last_hidden_state[0]
        return states.float().numpy()

    def corpus(self, name: str, texts: list[str]) -> np.ndarray:
        """Mean-pooled vectors of ``texts`` in batches of :data:`BATCH`."""
        if name in self.onnx:
            return self.onnx[name].embed(texts, "mean", batch_size=BATCH, truncation=True)
        model = self.torch_models[name]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        found: list[Any] = [None] * len(texts)
        with self.torch.inference_mode():
            for start in range(0, len(order), BATCH):
                picked = order[start : start + BATCH]
                feeds = self.tokenizer([texts[i] for i in picked], padding=True, truncation=True, return_tensors="pt")
                states = model(**feeds).last_hidden_state.float()
                mask = feeds["attention_mask"][..., None].float()
                pooled = ((states * mask).sum(1) / mask.sum(1)).numpy()
                for row, index in enumerate(picked):
                    found[index] = pooled[row]
        return np.stack(found)


def t128_text(tokenizer: Any, text: str) -> str:
    """The shortest run of ``text``'s first 2^k words that has more than :data:`TOKENS` tokens.

    The T128 call tokenizes its text every time: a text far longer than it needs would time the tokenizer (33 ms
    for 67,602 characters with a byte-level BPE tokenizer, where BERT's WordPiece stops early) instead of the
    model. Raises SystemExit when even the whole text is too short."""
    words = text.split()
    count = 64
    while True:
        found = " ".join(words[:count])
        if len(tokenizer(found)["input_ids"]) > TOKENS:
            return found
        if count >= len(words):
            raise SystemExit(f"the corpus has fewer than {TOKENS} tokens")
        count *= 2


def _bounded(work: Callable[[], Any], repeats: int, max_seconds: float) -> list[float]:
    """Seconds of up to ``repeats`` calls of ``work``, stopping once ``max_seconds`` have passed (at least one)."""
    times: list[float] = []
    deadline = time.perf_counter() + max_seconds
    while len(times) < repeats and (not times or time.perf_counter() < deadline):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return times


def measure_family(
    family: str,
    work: Path,
    *,
    quick: bool,
    threads: int,
    repeats: int,
    passes: int,
    max_seconds: float,
    precisions: tuple[str, ...] = PRECISIONS,
    corpus_texts: int = CORPUS_TEXTS,
) -> dict[str, Any]:
    """Build, export, check and time one family (see the module docstring)."""
    from bertonnx.openvino_session import openvino_version

    started = time.perf_counter()
    checkpoint = build_checkpoint(family, work / family / "checkpoint", quick=quick)
    # --quick checks the steps on fp32 alone (the bf16 variant's OpenVINO conversion costs seconds per family)
    bf16 = "bf16" in precisions
    variants = ("fp32", "bf16") if bf16 and openvino_version() is not None and not quick else ("fp32",)
    manifest = export(checkpoint, work / family / "model", variants)
    runners = Runners(checkpoint, work / family / "model", tuple(manifest["variants"]), threads, bf16=bf16)
    texts = build_mixed_corpus(QUICK_TEXTS if quick else corpus_texts)
    long_text = t128_text(runners.tokenizer, " ".join(texts))  # cut to exactly 128 tokens by every runner
    tokens = len(runners.tokenizer(long_text, truncation=True, max_length=TOKENS)["input_ids"])
    if tokens != TOKENS:
        raise SystemExit(f"{family}: the T128 text has {tokens} tokens")
    reference = runners.t128("torch fp32", long_text)
    checks: dict[str, float] = {}
    for name in runners.names:  # correctness of what is timed, and warm-up
        got = runners.t128(name, long_text)
        cosine = _cosine(_mean_pooled(got), _mean_pooled(reference))
        checks[name] = cosine
        precision = "bf16" if "bf16" in name else "fp32"
        if got.shape != reference.shape or cosine < MIN_COSINE[precision]:
            raise SystemExit(f"{family}: {name} is wrong: shape {got.shape}, mean-pooled cosine {cosine:.6f}")
        runners.corpus(name, texts[:BATCH])
    latency: dict[str, list[float]] = {name: [] for name in runners.names}
    deadline = time.perf_counter() + max_seconds * len(runners.names)
    for round_number in range(repeats):  # alternating rounds: each runner once per round
        for name in runners.names:
            latency[name] += _bounded(lambda name=name: runners.t128(name, long_text), 1, max_seconds)
        if round_number and time.perf_counter() > deadline:
            break
    throughput: dict[str, list[float]] = {}
    for name in runners.names:
        seconds = _bounded(lambda name=name: runners.corpus(name, texts), passes, max_seconds)
        throughput[name] = [len(texts) / s for s in seconds]
    precisions = {**runners.precision, "torch fp32": "fp32", "torch bf16": "bf16"}
    return {
        "family": family,
        "shape_of": CHECKPOINT_NAMES[family],
        "config": BASE_CONFIGS[family][1] if not quick else "quick (2 layers, hidden 32)",
        "variants": list(manifest["variants"]),
        "unavailable_variants": manifest.get("unavailable_variants", {}),
        "mean_pooled_cosine_vs_torch_fp32": checks,
        "t128_p50_ms": {name: 1000 * statistics.median(times) for name, times in latency.items()},
        "t128_calls": {name: len(times) for name, times in latency.items()},
        "corpus_texts": len(texts),
        "corpus_texts_per_s": {name: max(rates) for name, rates in throughput.items()},
        "corpus_passes": {name: len(rates) for name, rates in throughput.items()},
        "precisions": precisions,
        "seconds": time.perf_counter() - started,
    }


def ratios(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per family and precision, bertonnx's speed-up over torch (latency: torch p50 / bertonnx p50; corpus:
    bertonnx texts/s / torch texts/s), and whether it is within :data:`WITHIN` of BERT's."""
    rows = []
    bert = next((r for r in results if r["family"] == "bert"), None)

    def speedups(result: dict[str, Any], precision: str) -> tuple[float | None, float | None]:
        ours, theirs = f"bertonnx {precision}", f"torch {precision}"
        if ours not in result["t128_p50_ms"]:
            return None, None
        latency = result["t128_p50_ms"][theirs] / result["t128_p50_ms"][ours]
        corpus = result["corpus_texts_per_s"][ours] / result["corpus_texts_per_s"][theirs]
        return latency, corpus

    for result in results:
        for precision in ("fp32", "bf16"):
            latency, corpus = speedups(result, precision)
            if latency is None or corpus is None:
                continue
            base_latency, base_corpus = speedups(bert, precision) if bert is not None else (None, None)
            row: dict[str, Any] = {
                "family": result["family"],
                "precision": precision,
                "t128_speedup": latency,
                "corpus_speedup": corpus,
            }
            for key, value, base in (("t128", latency, base_latency), ("corpus", corpus, base_corpus)):
                row[f"{key}_vs_bert"] = None if base is None else value / base
                row[f"{key}_within"] = None if base is None else abs(value / base - 1) <= WITHIN
            rows.append(row)
    return rows


def _figure(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def report(payload: dict[str, Any]) -> str:
    """The markdown of one run."""
    facts, found = payload["machine"], payload["versions"]
    flags = " ".join(flag for flag, present in facts["isa_flags"].items() if present)
    settings = payload["settings"]
    lines = [
        f"Run of {payload['measured_at']} (`{payload['command']}`) on {facts['cpu_model']} "
        f"({facts['physical_cores']} physical cores; flags: {flags}); {settings['threads']} threads for torch and "
        f"onnxruntime alike; torch {found.get('torch')}, transformers {found.get('transformers')}, onnxruntime "
        f"{found.get('onnxruntime')}, openvino {payload['openvino']}."
        + (" **--quick: tiny models, figures mean nothing.**" if settings["quick"] else "")
        + f" Corpus: {settings.get('corpus_texts', CORPUS_TEXTS)} texts, {settings['corpus_passes']} pass(es); "
        f"T128: up to {settings['repeats']} rounds."
        + (" **bf16 not run** (`--precisions fp32`)." if "bf16" not in settings.get("precisions", PRECISIONS) else ""),
        "",
        "| family (shape of) | runner | precision run | T128 p50 ms | corpus texts/s | cosine vs torch fp32 |",
        "|---|---|---|---:|---:|---:|",
    ]
    for result in payload["results"]:
        for name, p50 in result["t128_p50_ms"].items():
            precision = result["precisions"][name]
            lines.append(
                f"| {result['family']} ({result['shape_of']}) | {name} | {precision} | {p50:.1f} | "
                f"{result['corpus_texts_per_s'][name]:.1f} | {result['mean_pooled_cosine_vs_torch_fp32'][name]:.6f} |"
            )
    lines += [
        "",
        "Speed-up of bertonnx over torch eager at the same precision (torch time / bertonnx time), and that "
        f"speed-up over BERT's (within: ±{WITHIN:.0%}):",
        "",
        "| family | precision | T128 speed-up | vs BERT | within | corpus speed-up | vs BERT | within |",
        "|---|---|---:|---:|---|---:|---:|---|",
    ]
    for row in payload["ratios"]:
        lines.append(
            f"| {row['family']} | {row['precision']} | {_figure(row['t128_speedup'])} | "
            f"{_figure(row['t128_vs_bert'])} | {_yes(row['t128_within'])} | {_figure(row['corpus_speedup'])} | "
            f"{_figure(row['corpus_vs_bert'])} | {_yes(row['corpus_within'])} |"
        )
    return "\n".join(lines) + "\n"


#: The top of benchmarks/FAMILIES.md (``--out`` writes it, then the run).
HEADER = f"""# Every family against PyTorch eager, fp32 and bf16

For each encoder family at base size (seeded weights: speed does not depend on their values), bertonnx against
PyTorch eager on the same checkpoint, threads and texts: B1×T128 p50 latency (one text of exactly {TOKENS} tokens,
tokenization included) and corpus texts/s (a fixed list of texts of 3-400 words, {CORPUS_TEXTS} unless the run
says otherwise, in batches of {BATCH}, mean-pooled), for bertonnx fp32, bertonnx bf16 (OpenVINO; bf16 matrix
products only on CPUs with AVX512-BF16 or AMX, the "precision run" column says what ran), torch fp32 and torch
bf16 (`model.to(bfloat16)`).
All four runners share one process, so onnxruntime's idle threads do not spin (they would take the cores from
torch). Each runner's output is checked against torch fp32 before it is timed. A family's speed-up over torch is
compared with BERT's: "within" means within ±{WITHIN:.0%} of it. How: `benchmarks/families.py`.

Reproduce (2 cores, nothing else running: the run of 2026-12-07 below took 63 minutes, 2-14 per family; on a
CPU without AVX512-BF16 or AMX bf16 is emulated on both sides and slow, and `--precisions fp32` skips it;
`--out` rewrites this whole page):

```text
.venv/bin/python -m benchmarks.families --out benchmarks/FAMILIES.md --json benchmarks/families.json
```

## Results

"""


def document(markdown: str) -> str:
    """benchmarks/FAMILIES.md: :data:`HEADER`, then one run's :func:`report`."""
    return HEADER + markdown


def _yes(value: bool | None) -> str:
    return "–" if value is None else ("yes" if value else "**no**")


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from bertonnx.openvino_session import openvino_version

    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    quick = bool(args.quick)
    repeats = 1 if quick else args.repeats
    passes = 1 if quick else args.passes
    results = []
    with tempfile.TemporaryDirectory(prefix="bertonnx-families-") as tmp:
        for family in args.families:
            result = measure_family(
                family,
                Path(tmp),
                quick=quick,
                threads=args.threads,
                repeats=repeats,
                passes=passes,
                max_seconds=args.max_seconds,
                precisions=args.precisions,
                corpus_texts=args.corpus_texts,
            )
            results.append(result)
            print(f"[families] {family}: done in {result['seconds']:.0f} s", file=sys.stderr, flush=True)
    return {
        "benchmark": "families",
        "command": "python -m benchmarks.families " + " ".join(args.argv),
        "measured_at": now_utc(),
        "machine": cpu_facts(),
        "versions": versions(),
        "openvino": openvino_version(),
        "settings": {
            "quick": quick,
            "threads": args.threads,
            "repeats": repeats,
            "corpus_passes": passes,
            "max_seconds": args.max_seconds,
            "tokens": TOKENS,
            "batch": BATCH,
            "families": list(args.families),
            "precisions": list(args.precisions),
            "corpus_texts": args.corpus_texts,
        },
        "results": results,
        "ratios": ratios(results),
    }


def _families(value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in FAMILIES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(FAMILIES)}, got {value!r}")
    return names


def _precisions(value: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    if "fp32" not in names or any(name not in PRECISIONS for name in names):
        raise argparse.ArgumentTypeError(f"expected fp32 or fp32,bf16, got {value!r}")
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.families", description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", type=_families, default=FAMILIES, help="comma-separated (default: all eight)")
    parser.add_argument("--threads", type=int, default=2, help="torch and onnxruntime intra-op threads (default 2)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"B1xT128 rounds (default {REPEATS})")
    parser.add_argument("--passes", type=int, default=CORPUS_PASSES, help=f"corpus passes (default {CORPUS_PASSES})")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=MAX_SECONDS,
        help=f"time bound per family and runner for each measurement (default {MAX_SECONDS:.0f})",
    )
    parser.add_argument(
        "--precisions",
        type=_precisions,
        default=PRECISIONS,
        help="fp32,bf16 (default) or fp32 alone (bf16 without AVX512-BF16 or AMX runs emulated on both sides)",
    )
    parser.add_argument(
        "--corpus-texts", type=int, default=CORPUS_TEXTS, help=f"texts of the corpus pass (default {CORPUS_TEXTS})"
    )
    parser.add_argument("--quick", action="store_true", help="tiny models, 1 repeat: checks that it runs")
    parser.add_argument("--out", type=Path, help="write the markdown of this run here (replacing the file)")
    parser.add_argument("--json", type=Path, help="write every figure as JSON here")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag, value in (
        ("--repeats", args.repeats),
        ("--passes", args.passes),
        ("--threads", args.threads),
        ("--corpus-texts", args.corpus_texts),
    ):
        if value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    if args.max_seconds <= 0:
        parser.error(f"--max-seconds must be above 0, got {args.max_seconds}")
    args.argv = argv
    payload = run(args)
    markdown = report(payload)
    from .report import write_atomic

    if args.json is not None:
        write_atomic(args.json, (json.dumps(payload, indent=2, default=str) + "\n").encode("utf-8"))
    if args.out is not None:
        write_atomic(args.out, document(markdown).encode("utf-8"))
    print(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
