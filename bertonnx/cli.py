"""The ``bertonnx`` command: inspect, tokenize, nsp, embed, walkthrough (torch-free), and export.

``export`` needs the ``bertonnx[export]`` extra and is imported only when asked for, so every other
command runs with torch, transformers and optimum absent. Every command takes ``--json``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ModelDirectoryError
from .info import describe, mean_pooler_cosine
from .manifest import VARIANT_FILES, read_manifest
from .model import DEFAULT_VARIANT, POOLING_MODES, BertOnnx
from .version import __version__

__all__ = ["main"]

EXIT_OK = 0
EXIT_ERROR = 2
MODULE_PAIR = ("the weather is nice", "i agree with you")
_RULE = "=" * 72
_EXPORT_INSTALL = "pip install torch==2.13.0 'bertonnx[export]'"
#: Commands that live outside the torch-free runtime: name -> (module with a ``main(argv)``, install hint).
_EXTRA_COMMANDS = {
    "export": ("bertonnx_export.cli", "the export step needs the export extra: " + _EXPORT_INSTALL),
    "parity": ("bertonnx_export.parity", "parity needs the export extra: " + _EXPORT_INSTALL),
    "bench": (
        "bertonnx_benchmarks.cli",
        "benchmarks need the bench extra: pip install torch==2.13.0 'bertonnx[bench]'",
    ),
    "serve": ("bertonnx.serve.cli", "the server needs the serve extra: pip install 'bertonnx[serve]'"),
    "bench-serve": (
        "bertonnx_benchmarks.serve.cli",
        "the serving benchmark needs the bench and serve extras: pip install torch==2.13.0 'bertonnx[bench,serve]'",
    ),
}


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    print(json.dumps(payload, indent=2, default=_jsonable) if args.json else text)


def _jsonable(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)


def _load(args: argparse.Namespace) -> BertOnnx:
    return BertOnnx(args.model_dir, args.variant, threads=args.threads)


def _random_banner(random_weights: bool, weights: dict[str, Any]) -> str:
    if not random_weights:
        return ""
    note = weights.get("note") or "some weights are random"
    return f"{_RULE}\n!! {note}\n{_RULE}\n"


def _fmt(n: object) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def cmd_inspect(args: argparse.Namespace) -> int:
    facts = describe(read_manifest(args.model_dir))
    c, p = facts["config"], facts["parameters"]["counts"]
    lines = [
        _random_banner(facts["random_weights"], facts["weights"]) + f"model directory   {facts['directory']}",
        f"source            {facts['source']}",
        f"weights           {facts['weights']}",
        f"layers            {c['num_hidden_layers']}",
        f"attention heads   {c['num_attention_heads']}",
        f"hidden size       {c['hidden_size']}",
        f"ffn size          {c['intermediate_size']}",
        f"vocabulary        {c['vocab_size']}",
        f"positions         {c['max_position_embeddings']}",
        f"segment types     {c['type_vocab_size']}",
        f"parameters        (counted from {facts['parameters']['counted_from']})",
        f"  BertModel       {_fmt(p['bert_model'])}",
        f"  token embedding {_fmt(p['token_embeddings'])}",
        f"  pooler          {_fmt(p['pooler'])}",
        f"  NSP head        {_fmt(p['nsp_head'])}",
        f"  graph total     {_fmt(p['exported_total'])}",
        "inputs            " + ", ".join(f"{i['name']} {i['shape']}" for i in facts["inputs"]),
        "outputs           " + ", ".join(f"{o['name']} {o['shape']}" for o in facts["outputs"]),
        f"opset             {facts['opset']}",
        "variants:",
    ]
    for name, v in facts["variants"].items():
        parity = v.get("parity") or {}
        gate = "gate passed" if parity.get("passed") else "gate not passed"
        worst = ", ".join(
            f"{k} {parity[k]:.3g}" if k.endswith("_max_abs") else f"{k} {parity[k]:.5f}"
            for k in sorted(parity)
            if k.endswith(("_max_abs", "_min_cosine"))
        )
        lines.append(
            f"  {name:<10} {v['file']:<22} {(v['size_bytes'] or 0) / 1e6:8.1f} MB  {v['backend']:<12} {gate}: {worst}"
        )
    _emit(args, facts, "\n".join(lines))
    return EXIT_OK


def cmd_tokenize(args: argparse.Namespace) -> int:
    model = _load(args)
    out = model.tokenize(args.text, args.pair, truncation=args.truncation, max_length=args.max_length)
    payload = {"tokens": out.tokens, "ids": out.ids, "type_ids": out.type_ids, "attention_mask": out.attention_mask}
    _emit(args, payload, "\n".join(f"{k:<15}{v}" for k, v in payload.items()))
    return EXIT_OK


def cmd_nsp(args: argparse.Namespace) -> int:
    model = _load(args)
    probability = model.nsp(args.text_a, args.text_b, truncation=args.truncation)
    payload = {"text_a": args.text_a, "text_b": args.text_b, "is_next_probability": probability}
    banner = _random_banner(model.manifest.random_weights, model.manifest.weights)
    _emit(args, payload, f"{banner}P(B follows A) = {probability:.4f}")
    return EXIT_OK


def _read_inputs(path: str) -> list[str]:
    source = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115 - closed below
    try:
        return [line.rstrip("\n") for line in source if line.strip()]
    finally:
        if source is not sys.stdin:
            source.close()


def cmd_embed(args: argparse.Namespace) -> int:
    if bool(args.texts) == bool(args.input):
        print(
            "error: give TEXT arguments or --input FILE (one text per line, - for stdin), not both or neither",
            file=sys.stderr,
        )
        return EXIT_ERROR
    texts = args.texts or _read_inputs(args.input)
    model = _load(args)
    vectors = model.embed(
        texts, args.pooling, batch_size=args.batch_size, truncation=args.truncation, normalize=args.normalize
    )
    if args.output and args.output.endswith(".npy"):
        target = Path(args.output)
        tmp = target.with_name(f".{target.name}.partial.npy")
        np.save(tmp, vectors)
        tmp.replace(target)
        _emit(args, {"output": str(target), "shape": list(vectors.shape)}, f"wrote {target} {vectors.shape}")
        return EXIT_OK
    lines = [json.dumps({"text": t, "embedding": v.tolist()}) for t, v in zip(texts, vectors, strict=True)]
    if args.output:
        target = Path(args.output)
        tmp = target.with_name(f".{target.name}.partial")
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        tmp.replace(target)
        _emit(args, {"output": str(target), "shape": list(vectors.shape)}, f"wrote {target} {vectors.shape}")
    else:
        print("\n".join(lines))
    return EXIT_OK


def cmd_walkthrough(args: argparse.Namespace) -> int:
    manifest = read_manifest(args.model_dir)
    facts = describe(manifest)
    model = _load(args)
    text_a, text_b = MODULE_PAIR
    tokens = model.tokenize(text_a, text_b)
    out = model([text_a], [text_b])
    assert out.last_hidden_state is not None  # hidden_states=True is the default
    states = out.token_states(0)
    cosine = mean_pooler_cosine(states, tokens.tokens, out.pooler_output[0])
    probability = float(out.nsp_probability[0])
    c, p = facts["config"], facts["parameters"]["counts"]
    payload = {
        "config": c,
        "parameters": p,
        "parameters_counted_from": facts["parameters"]["counted_from"],
        "pair": list(MODULE_PAIR),
        "tokens": tokens.tokens,
        "token_type_ids": tokens.type_ids,
        "last_hidden_state_shape": [1, *states.shape],
        "pooler_output_shape": list(out.pooler_output.shape),
        "mean_tokens_vs_pooler_cosine": cosine,
        "nsp_is_next_probability": probability,
        "variant": model.variant,
        "random_weights": manifest.random_weights,
    }
    text = "\n".join(
        [
            _random_banner(manifest.random_weights, manifest.weights)
            + f"bertonnx walkthrough: {manifest.directory} ({model.variant})",
            f"1. config: {c['num_hidden_layers']} layers, {c['num_attention_heads']} heads, {c['hidden_size']} hidden, "
            f"{c['intermediate_size']} ffn, {c['vocab_size']} vocab, {c['max_position_embeddings']} positions, "
            f"{c['type_vocab_size']} segment types",
            f"2. parameters ({facts['parameters']['counted_from']}): BertModel {_fmt(p['bert_model'])}, "
            f"token embeddings {_fmt(p['token_embeddings'])}, pooler {_fmt(p['pooler'])}, "
            f"NSP head {_fmt(p['nsp_head'])}",
            f"3. pair {MODULE_PAIR}",
            f"   tokens         {tokens.tokens}",
            f"   token_type_ids {tokens.type_ids}",
            f"4. last_hidden_state {tuple(payload['last_hidden_state_shape'])}, "
            f"pooler_output {out.pooler_output.shape}",
            f"5. cosine(mean of non-special token vectors, pooler_output) = {cosine:.4f}",
            f"6. NSP: P(B follows A) = {probability:.4f}",
        ]
    )
    _emit(args, payload, text)
    return EXIT_OK


def _add_model_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    parser.add_argument(
        "--variant", default=DEFAULT_VARIANT, help=f"one of {', '.join(VARIANT_FILES)} (default {DEFAULT_VARIANT})"
    )
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: physical cores)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertonnx", description="Run BERT (encoder, pooler, NSP head) on onnxruntime, without PyTorch."
    )
    parser.add_argument("--version", action="version", version=f"bertonnx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    p = add(
        "inspect",
        cmd_inspect,
        "config numbers, parameter counts (from the ONNX initializers), outputs, variants, provenance",
    )
    p.add_argument("model_dir", metavar="DIR")
    p = add("tokenize", cmd_tokenize, "tokens, ids and segment ids of TEXT (and PAIR)")
    _add_model_args(p)
    p.add_argument("text", metavar="TEXT")
    p.add_argument("pair", metavar="PAIR", nargs="?")
    p.add_argument("--truncation", action="store_true")
    p.add_argument("--max-length", type=int, default=512)
    p = add("nsp", cmd_nsp, "probability that TEXT_B follows TEXT_A")
    _add_model_args(p)
    p.add_argument("text_a", metavar="TEXT_A")
    p.add_argument("text_b", metavar="TEXT_B")
    p.add_argument("--truncation", action="store_true")
    p = add("embed", cmd_embed, "one vector per text, as .npy (--output X.npy) or JSON lines")
    _add_model_args(p)
    p.add_argument("texts", metavar="TEXT", nargs="*")
    p.add_argument("--input", metavar="FILE", help="one text per line (- for stdin)")
    p.add_argument("--output", metavar="FILE", help="X.npy for a [n, hidden] array, else JSON lines (default: stdout)")
    p.add_argument("--pooling", choices=POOLING_MODES, default="pooler")
    p.add_argument("--normalize", action="store_true", help="unit-length vectors")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--truncation", action="store_true")
    p = add("walkthrough", cmd_walkthrough, "the whole module in one run on the model directory")
    _add_model_args(p)
    for p in sub.choices.values():
        p.add_argument("--json", action="store_true", help="print JSON")

    for name, help_text in (
        ("export", "export a BERT checkpoint to a verified model directory (needs bertonnx[export])"),
        ("parity", "compare every variant of DIR with PyTorch (needs bertonnx[export])"),
        ("bench", "latency benchmarks against PyTorch (needs bertonnx[bench])"),
        ("serve", "serve DIR over HTTP: TEI, OpenAI and KServe v2 routes (needs bertonnx[serve])"),
    ):
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _run_extra(name: str, argv: list[str]) -> int:
    module_name, hint = _EXTRA_COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        print(f"error: {hint} ({exc})", file=sys.stderr)
        return EXIT_ERROR
    return int(module.main(argv))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bertonnx`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _EXTRA_COMMANDS:
        return _run_extra(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except (ValueError, TypeError) as exc:  # ModelDirectoryError is a ValueError
        kind = "model directory" if isinstance(exc, ModelDirectoryError) else "input"
        print(f"error ({kind}): {exc}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
