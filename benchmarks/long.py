"""Long inputs: ModernBERT's latency and peak memory at 512 to 8,192 tokens, onnxruntime against PyTorch.

``flock /work/team/timing.lock python -m benchmarks.long --out benchmarks/LONG.md``

A ModernBERT-base-shaped encoder (22 layers, hidden 768, 12 heads, intermediate 1152, vocab 50368, global
attention every 3rd layer, local window 128, 8,192 positions) with seeded weights is exported by ``bertonnx
export`` (fp32; the gate checks it against PyTorch) and run on one input of each length, batch 1, by:

- ``onnxruntime fp32``: the export's graph as :class:`bertonnx.BertOnnx` opens it (its session options), fed
  token ids;
- ``torch eager``: transformers' ``ModernBertModel`` with ``attn_implementation="eager"`` (every layer
  computes and masks all ``t × t`` scores);
- ``torch sdpa``: the same with transformers' default ``sdpa`` (PyTorch's fused attention kernel).

Each (runner, length) runs in a child process of its own, so its peak RSS (``ru_maxrss``) is that run's
alone; the child reports the RSS after loading and the peak after its runs, one warm-up and ``--repeats``
timed runs (min and median). Before anything is reported, every runner's last hidden state at every length
is checked against ``torch sdpa``'s (max abs ≤ 1e-4). ``--quick`` runs a 2-layer, hidden-32 model at 512
and 2,048 tokens once, in this process: a check that the benchmark works, not a measurement. Weights are seeded:
the numbers say what the shapes cost, not what a trained model answers. Nothing here is imported by the runtime.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from .machine import cpu_facts, now_utc, versions

#: ModernBERT-base (answerdotai/ModernBERT-base's config.json), seeded.
BASE_SHAPE: dict[str, Any] = dict(
    vocab_size=50368,
    hidden_size=768,
    num_hidden_layers=22,
    num_attention_heads=12,
    intermediate_size=1152,
    max_position_embeddings=8192,
    global_attn_every_n_layers=3,
    local_attention=128,
)
QUICK_SHAPE: dict[str, Any] = dict(BASE_SHAPE, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)
QUICK_SHAPE.update(intermediate_size=64, vocab_size=1024)
LENGTHS = (512, 2048, 4096, 8192)
QUICK_LENGTHS = (512, 2048)
RUNNERS = ("onnxruntime fp32", "torch eager", "torch sdpa")
REFERENCE = "torch sdpa"
REPEATS = 3
SEED = 8192
TOLERANCE = 1e-4
SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
#: A child's wall-clock limit: 8,192 tokens through torch eager at base size is the slowest run.
CHILD_TIMEOUT_S = 1800


def build_checkpoint(directory: Path, shape: dict[str, Any]) -> Path:
    """A seeded ModernBertModel of ``shape`` with a small word-level tokenizer (the runs feed token ids)."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    words = [f"w{i}" for i in range(200)]
    vocab = {token: index for index, token in enumerate([*SPECIALS, *words])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        model_input_names=["input_ids", "attention_mask"],
        model_max_length=shape["max_position_embeddings"],
    )
    tokenizer.save_pretrained(str(directory))
    config = transformers.ModernBertConfig(
        **shape, pad_token_id=vocab["[PAD]"], cls_token_id=vocab["[CLS]"], sep_token_id=vocab["[SEP]"]
    )
    torch.manual_seed(SEED)
    model = transformers.ModernBertModel(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, param in model.named_parameters():
            values = torch.randn(param.shape, generator=generator) * config.initializer_range
            param.copy_(values + 1.0 if "norm" in name else values)
    model.save_pretrained(str(directory))
    return directory


def export(checkpoint: Path, outdir: Path) -> Path:
    """``bertonnx export`` of ``checkpoint`` (fp32): the gate checks it against PyTorch first."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    run_export(ExportOptions(outdir=outdir, model=str(checkpoint), variants=("fp32",)), log=lambda _line: None)
    return outdir


def token_ids(length: int, vocab_size: int) -> Any:
    """One input of ``length`` tokens: ``[CLS]``, seeded ids, ``[SEP]``."""
    import numpy as np

    rng = np.random.default_rng(length)
    ids = rng.integers(len(SPECIALS), vocab_size, size=(1, length), dtype=np.int64)
    ids[0, 0], ids[0, -1] = SPECIALS.index("[CLS]"), SPECIALS.index("[SEP]")
    return ids


def _memory_mb(field: str) -> float:
    """``VmRSS`` or ``VmHWM`` (peak) of this process from ``/proc/self/status``, in MB (``ru_maxrss`` would carry
    the parent's peak over ``execve``)."""
    for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(runner: str, model_dir: Path, length: int, repeats: int, threads: int, states: Path) -> dict[str, Any]:
    """One runner at one length in this process: load, warm up, time ``repeats`` runs, save the states."""
    import numpy as np

    warnings.simplefilter("ignore")
    if runner == "onnxruntime fp32":
        from bertonnx import BertOnnx

        model = BertOnnx(model_dir / "export", threads=threads)
        vocab = int(model.manifest.config["vocab_size"])

        def forward(ids: np.ndarray) -> np.ndarray:
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            return np.asarray(model.session.run(["last_hidden_state"], feeds)[0])

    else:
        import torch
        import transformers

        torch.set_num_threads(threads)
        implementation = runner.split()[1]
        net = transformers.ModernBertModel.from_pretrained(
            str(model_dir / "checkpoint"), attn_implementation=implementation
        ).eval()
        vocab = int(net.config.vocab_size)

        def forward(ids: np.ndarray) -> np.ndarray:
            with torch.inference_mode():
                tensor = torch.from_numpy(ids)
                return net(input_ids=tensor, attention_mask=torch.ones_like(tensor)).last_hidden_state.numpy()

    ids = token_ids(length, vocab)
    loaded = _memory_mb("VmRSS")
    out = forward(ids)  # warm-up, and the states checked against the reference
    np.save(states, out[0])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        forward(ids)
        times.append(time.perf_counter() - start)
    return {"runner": runner, "length": length, "times": times, "loaded_mb": loaded, "peak_mb": _memory_mb("VmHWM")}


def _run_child(runner: str, work: Path, length: int, repeats: int, threads: int) -> dict[str, Any]:
    states = work / f"{runner.replace(' ', '-')}-{length}.npy"
    argv = [sys.executable, "-m", __spec__.name if __spec__ else "benchmarks.long", "--child", runner]
    argv += ["--work", str(work), "--length", str(length), "--repeats", str(repeats), "--threads", str(threads)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{runner} at {length} tokens failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    found: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    found["states"] = str(states)
    return found


def run(
    *,
    quick: bool = False,
    lengths: tuple[int, ...] | None = None,
    runners: tuple[str, ...] = RUNNERS,
    repeats: int = REPEATS,
    threads: int = 2,
) -> str:
    """Build, export, time every runner at every length, check the states, and return the markdown report."""
    import numpy as np

    shape = QUICK_SHAPE if quick else BASE_SHAPE
    lengths = lengths or (QUICK_LENGTHS if quick else LENGTHS)
    repeats = 1 if quick else repeats
    if REFERENCE not in runners:
        runners = (*runners, REFERENCE)
    results: dict[tuple[str, int], dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bertonnx-long-") as tmp:
        work = Path(tmp)
        build_checkpoint(work / "checkpoint", shape)
        export(work / "checkpoint", work / "export")
        for length in lengths:
            for runner in runners:
                if quick:  # in this process: quick, and its memory figures mean nothing
                    states = work / f"{runner.replace(' ', '-')}-{length}.npy"
                    results[runner, length] = {**child(runner, work, length, 1, threads, states), "states": states}
                else:
                    results[runner, length] = _run_child(runner, work, length, repeats, threads)
        differences = {}
        for (runner, length), found in results.items():
            reference = np.load(results[REFERENCE, length]["states"])
            differences[runner, length] = float(np.abs(np.load(found["states"]) - reference).max())
    wrong = {key: value for key, value in differences.items() if value > TOLERANCE}
    if wrong:
        raise SystemExit(f"last hidden states differ from {REFERENCE}'s by more than {TOLERANCE}: {wrong}")
    return report(shape, lengths, runners, results, differences, repeats, threads, quick)


def report(
    shape: dict[str, Any],
    lengths: tuple[int, ...],
    runners: tuple[str, ...],
    results: dict[tuple[str, int], dict[str, Any]],
    differences: dict[tuple[str, int], float],
    repeats: int,
    threads: int,
    quick: bool,
) -> str:
    """The markdown table: per length and runner, latency (min, median), RSS loaded and peak, max abs diff."""
    facts, found = cpu_facts(), versions()
    flags = " ".join(flag for flag, present in facts["isa_flags"].items() if present)
    lines = [
        "## Measured" + (" (--quick: a 2-layer, hidden-32 model, not a measurement)" if quick else ""),
        "",
        f"{now_utc()}, `python -m benchmarks.long` on {facts['cpu_model']} ({facts['physical_cores']} physical "
        f"cores; flags: {flags}), {threads} threads for torch and onnxruntime alike. Shape: "
        f"{shape['num_hidden_layers']} layers, hidden {shape['hidden_size']}, {shape['num_attention_heads']} heads, "
        f"intermediate {shape['intermediate_size']}, vocab {shape['vocab_size']}, window {shape['local_attention']}, "
        f"global every {shape['global_attn_every_n_layers']} layers; seeded weights; batch 1; one warm-up, "
        f"{repeats} timed run(s). torch {found.get('torch')}, transformers {found.get('transformers')}, "
        f"onnxruntime {found.get('onnxruntime')}.",
        "",
        "| tokens | runner | latency min (median) | vs torch eager | RSS loaded | RSS peak | max abs vs torch sdpa |",
        "|---|---|---|---|---|---|---|",
    ]
    for length in lengths:
        eager = results.get(("torch eager", length))
        for runner in runners:
            found_run = results[runner, length]
            best, median = min(found_run["times"]), statistics.median(found_run["times"])
            ratio = f"{min(eager['times']) / best:.2f}x" if eager else "–"
            lines.append(
                f"| {length} | {runner} | {best * 1000:.0f} ms ({median * 1000:.0f}) | {ratio} | "
                f"{found_run['loaded_mb']:.0f} MB | {found_run['peak_mb']:.0f} MB | "
                f"{differences[runner, length]:.1e} |"
            )
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    """Replace the ``## Measured`` section of ``path`` (and everything after it) with ``section``; a file
    without one gets it appended, a missing file is created."""
    from .report import write_atomic

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    found = re.search(r"^## Measured", text, flags=re.MULTILINE)  # the heading, not a mention of it in the text
    head = text[: found.start()] if found else text
    write_atomic(path, (head.rstrip("\n") + "\n\n" + section if head.strip() else section).encode("utf-8"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.long", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="put the table in this file's '## Measured' section")
    parser.add_argument("--quick", action="store_true", help="a tiny model, 512 and 2,048 tokens, one run")
    parser.add_argument("--lengths", help="comma-separated token counts (default 512,2048,4096,8192)")
    parser.add_argument("--runners", default=",".join(RUNNERS), help=f"comma-separated, of: {', '.join(RUNNERS)}")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed runs per runner and length")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        states = args.work / f"{args.child.replace(' ', '-')}-{args.length}.npy"
        print(json.dumps(child(args.child, args.work, args.length, args.repeats, args.threads, states)))
        return
    runners = tuple(name.strip() for name in args.runners.split(","))
    unknown = [name for name in runners if name not in RUNNERS]
    if unknown:
        parser.error(f"--runners: unknown {unknown}; expected some of {', '.join(RUNNERS)}")
    lengths = tuple(int(n) for n in args.lengths.split(",")) if args.lengths else None
    text = run(quick=args.quick, lengths=lengths, runners=runners, repeats=args.repeats, threads=args.threads)
    if args.out is not None:
        write_section(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
