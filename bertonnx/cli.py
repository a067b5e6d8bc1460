"""The ``bertonnx`` command: inspect, tokenize, nsp, embed, classify, rerank, fill-mask, tag, answer,
choose, embed-sparse, walkthrough (torch-free), export, parity, bench, bench-serve, serve, batch.

Each subcommand is a :class:`~bertonnx.command.Command` with its own parser, run by
:func:`bertonnx.command.run_command`: options may come anywhere, every command takes ``--debug``, and every
expected failure is one line on stderr with exit code 2 (``--debug`` adds the traceback). ``export``,
``parity`` and ``bench`` live in the extras' packages, ``serve`` and ``batch`` in subpackages that need their
extras to run; all are imported only when asked for, so every other command runs with torch, transformers,
optimum, FastAPI and pyarrow absent. A new command is one more entry in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .command import ArgumentParser, Command, CommandError, describe_error, dispatch
from .errors import InputTooLongError, RandomWeightsWarning
from .exit_codes import EXIT_OK
from .files import STDIN, blank_lines, check_output_file, read_lines, write_atomic
from .info import describe, format_figure, mean_pooler_cosine, source_text, weights_text
from .manifest import read_manifest
from .model import BertOnnx
from .surface import envelope, print_random_banner
from .surface import random_banner as _random_banner
from .version import __version__
from .vocabulary import add_option

__all__ = ["COMMANDS", "main"]

MODULE_PAIR = ("the weather is nice", "i agree with you")
#: The module-01 check of the masked-language-model head.
MODULE_MASKED = "the capital of france is [MASK]."
DESCRIPTION = (
    "Run BERT-family encoders and their heads on onnxruntime, without PyTorch: embed, embed-sparse, nsp,\n"
    "classify, rerank, zero-shot, fill-mask, tag, answer, choose and detect-replaced, from this command, over\n"
    "HTTP (serve) or on a corpus (batch)."
)


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    print(json.dumps(payload, indent=2, default=_jsonable) if args.json else text)


def _jsonable(value: object) -> object:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    return str(value)


def _load(args: argparse.Namespace) -> BertOnnx:
    with warnings.catch_warnings():  # the commands show random weights in their own banner or JSON field
        warnings.simplefilter("ignore", RandomWeightsWarning)
        return BertOnnx(args.model_dir, args.variant, threads=args.threads)


def _fmt(n: object) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def _add_model_args(parser: ArgumentParser, command: str, *options: str) -> None:
    """DIR, --variant, --threads, --json, then the shared ``options`` (:mod:`bertonnx.vocabulary`) by name."""
    parser.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    for name in ("variant", "threads", "json", *options):
        add_option(parser, name, command)


def _model_args(command: str, *options: str) -> Callable[[ArgumentParser], None]:
    return lambda parser: _add_model_args(parser, command, *options)


# -- inspect -----------------------------------------------------------------------------------------


def _inspect_arguments(parser: ArgumentParser) -> None:
    parser.add_argument("model_dir", metavar="DIR", help="directory written by `bertonnx export`")
    add_option(parser, "json", "inspect")


#: Parameter counts an export may hold beside the base model (``bertonnx.info.count_parameters``).
_PART_LABELS = {
    "pooler": "pooler",
    "nsp_head": "NSP head",
    "classifier_head": "classifier",
    "token_classifier_head": "token classifier",
    "qa_head": "QA head",
}


def _sentence_lines(st: dict[str, Any] | None) -> list[str]:
    """``inspect``'s lines on a sentence-transformers export (none for a plain one)."""
    if st is None:
        return []
    lines = [f"sentence-transformers {st['model_type']}: {' -> '.join(st['pipeline']) or 'its head'}"]
    lines.append(f"  max_seq_length  {st['max_seq_length']}; similarity {st['similarity_fn_name']}")
    prompts = {k: v for k, v in st["prompts"].items() if v}
    if prompts or st["default_prompt_name"]:
        lines.append(f"  prompts         {json.dumps(prompts)} (default {st['default_prompt_name']})")
    if st["truncate_dim"]:
        lines.append(f"  truncate_dim    {st['truncate_dim']} of {st['dimension']}")
    if st["activation"]:
        lines.append(f"  activation      {st['activation']}")
    return lines


def cmd_inspect(args: argparse.Namespace) -> int:
    facts = describe(read_manifest(args.model_dir))
    c, p = facts["config"], facts["parameters"]["counts"]
    lines = [
        _random_banner(facts["random_weights"], facts["weights"]) + f"model directory   {facts['directory']}",
        f"source            {source_text(facts['source'])}",
        f"weights           {weights_text(facts['weights'])}",
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
        *(f"  {label:<15} {_fmt(p[key])}" for key, label in _PART_LABELS.items() if key in p),
        f"  graph total     {_fmt(p['exported_total'])}",
        "inputs            " + ", ".join(f"{i['name']} {i['shape']}" for i in facts["inputs"]),
        "outputs           " + ", ".join(f"{o['name']} {o['shape']}" for o in facts["outputs"]),
        f"opset             {facts['opset']}",
        *_sentence_lines(facts["sentence_transformers"]),
        "variants:",
    ]
    for name, v in facts["variants"].items():
        parity = v.get("parity") or {}
        gate = "gate passed" if parity.get("passed") else "gate not passed"
        worst = ", ".join(
            f"{k} {format_figure(k, parity[k])}" for k in sorted(parity) if k.endswith(("_max_abs", "_min_cosine"))
        )
        lines.append(
            f"  {name:<10} {v['file']:<22} {(v['size_bytes'] or 0) / 1e6:8.1f} MB  {v['backend']:<12} {gate}: {worst}"
        )
    for name, refused in facts["refused_variants"].items():
        lines.append(f"  {name:<10} not written: its parity gate at export found {refused['reason']}")
    beside = {key: value for key, value in facts.items() if key != "random_weights"}
    _emit(args, envelope(facts["directory"], None, facts["random_weights"], [], **beside), "\n".join(lines))
    return EXIT_OK


# -- tokenize, nsp -----------------------------------------------------------------------------------


def _tokenize_arguments(parser: ArgumentParser) -> None:
    _add_model_args(parser, "tokenize", "truncation", "max_length")
    parser.add_argument("text", metavar="TEXT")
    parser.add_argument("pair", metavar="PAIR", nargs="?")


def cmd_tokenize(args: argparse.Namespace) -> int:
    model = _load(args)
    out = model.tokenize(args.text, args.pair, truncation=args.truncation, max_length=args.max_length)
    payload = {"tokens": out.tokens, "ids": out.ids, "type_ids": out.type_ids, "attention_mask": out.attention_mask}
    found = envelope(model.manifest.directory, model.variant, model.manifest.random_weights, [payload])
    _emit(args, found, "\n".join(f"{k:<15}{v}" for k, v in payload.items()))
    return EXIT_OK


def _nsp_arguments(parser: ArgumentParser) -> None:
    _add_model_args(parser, "nsp", "truncation", "batch_size")
    parser.add_argument("text_a", metavar="TEXT_A")
    parser.add_argument("text_b", metavar="TEXT_B")


def cmd_nsp(args: argparse.Namespace) -> int:
    model = _load(args)
    probability = model.nsp(args.text_a, args.text_b, truncation=args.truncation, batch_size=args.batch_size)
    payload = envelope(model.manifest.directory, model.variant, model.manifest.random_weights, [probability])
    _banner_to_stderr(args, model)
    _emit(args, payload, f"P(B follows A) = {probability:.4f}")
    return EXIT_OK


# -- embed -------------------------------------------------------------------------------------------

EMBED_EPILOG = """\
input: TEXT arguments, or --input FILE with one text per line (- for standard input). The file is
UTF-8; every line is one text, blank lines included: a blank or whitespace-only line is the empty text
and gets its own row, so row i of the output always belongs to line i of the file (a note on stderr
names the blank lines). A final newline does not add a line.

output:
  no --output         JSON lines on stdout, one {"text", "embedding"} per text, in input order
  --json              instead, one JSON object: model, variant, random_weights, results (vector i = text i),
                      pooling, normalize, shape
  --output X.npy      a float32 [n, hidden] array (row i = text i); --json then prints the same object
                      with empty results and the output's name
  --output X.jsonl    JSON lines into X.jsonl (any other extension is refused before anything runs)
The output's folder must exist; the file is written to a temporary name and renamed when complete."""


def _embed_arguments(parser: ArgumentParser) -> None:
    _add_model_args(
        parser,
        "embed",
        "input",
        "output",
        "pooling",
        "normalize",
        "batch_size",
        "truncation",
        "prompt_name",
        "prompt",
        "dimensions",
    )
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="texts to embed (or use --input)")


def _embed_texts(args: argparse.Namespace) -> list[str]:
    if bool(args.texts) == (args.input is not None):
        raise CommandError("give TEXT arguments or --input FILE (one text per line, - for stdin), not both or neither")
    if args.texts:
        return list(args.texts)
    texts = read_lines(args.input, "--input")
    blank = blank_lines(texts)
    if blank:
        where = "standard input" if args.input == STDIN else args.input
        print(f"note: {where} {blank} blank: each is embedded as the empty text, keeping rows aligned", file=sys.stderr)
    return texts


#: What ``bertonnx embed --output`` writes, by the name's extension (any case).
EMBED_OUTPUT_FORMATS = {".npy": "a float32 array", ".jsonl": "JSON lines"}


def _embed_output(path: str | None) -> Path | None:
    """``--output``'s target, refused before any work unless its extension names a format embed writes."""
    if not path:
        return None
    target = check_output_file(path, "--output")
    if target.suffix.lower() not in EMBED_OUTPUT_FORMATS:
        formats = " or ".join(f"{suffix} ({what})" for suffix, what in EMBED_OUTPUT_FORMATS.items())
        raise CommandError(
            f"--output {path}: embed writes {formats}, not {target.suffix or 'a name without an extension'}; "
            f"name it {target.stem}.npy or {target.stem}.jsonl"
        )
    return target


def cmd_embed(args: argparse.Namespace) -> int:
    texts = _embed_texts(args)
    target = _embed_output(args.output)
    model = _load(args)
    random_weights = model.manifest.random_weights
    try:
        vectors = model.embed(
            texts,
            args.pooling,
            batch_size=args.batch_size,
            truncation=args.truncation,
            normalize=args.normalize,
            prompt_name=args.prompt_name,
            prompt=args.prompt,
            dimensions=args.dimensions,
        )
    except InputTooLongError as exc:
        if args.input is None:
            raise
        where = "standard input" if args.input == STDIN else args.input
        raise CommandError(f"{describe_error(exc)} (input {exc.index} is line {exc.index + 1} of {where})") from exc
    about = {
        "pooling": args.pooling or ("pipeline" if model.sentence is not None else "pooler"),
        "normalize": args.normalize,
        "shape": list(vectors.shape),
    }
    model_dir, variant = model.manifest.directory, model.variant
    _banner_to_stderr(args, model)
    if target is None:
        if args.json:
            print(json.dumps(envelope(model_dir, variant, random_weights, vectors.tolist(), **about)))
        else:
            for text, vector in zip(texts, vectors, strict=True):
                print(json.dumps({"text": text, "embedding": vector.tolist()}))
        return EXIT_OK

    def write(handle: BinaryIO) -> None:
        if target.suffix.lower() == ".npy":
            np.save(handle, vectors)
            return
        for text, vector in zip(texts, vectors, strict=True):
            handle.write((json.dumps({"text": text, "embedding": vector.tolist()}) + "\n").encode("utf-8"))

    write_atomic(target, write, "--output")
    summary = envelope(model_dir, variant, random_weights, [], output=str(target), **about)
    _emit(args, summary, f"wrote {target} {vectors.shape}")
    return EXIT_OK


# -- classify, rerank, fill-mask: the checkpoint's own heads --------------------------------------------

TEXTS_EPILOG = """\
input: TEXT arguments, or --input FILE with one text per line (- for standard input; blank lines are
empty texts, so row i of the output belongs to line i). Output: one line per input, or JSON with --json.
An export without the head the command needs is refused in one line naming what the export has."""


def _texts_arguments(parser: ArgumentParser, command: str) -> None:
    _add_model_args(parser, command, "input", "truncation", "top_k", "batch_size")
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="inputs (or use --input)")


def _classify_arguments(parser: ArgumentParser) -> None:
    _texts_arguments(parser, "classify")
    parser.add_argument(
        "--pair",
        metavar="PAIR",
        action="append",
        help="second sentence of a pair (segment 1); repeat it once per TEXT, in order",
    )
    parser.add_argument("--all-labels", action="store_true", help="every label's score (overrides --top-k)")


def _head_call(args: argparse.Namespace, call: Any) -> Any:
    """Run a model call; its input errors become one line in this command's terms."""
    try:
        return call()
    except ValueError as exc:
        raise CommandError(describe_error(exc)) from exc


def _banner_to_stderr(args: argparse.Namespace, model: BertOnnx) -> None:
    if not args.json:
        print_random_banner(model.manifest.random_weights, model.manifest.weights)


def cmd_classify(args: argparse.Namespace) -> int:
    texts = _embed_texts(args)
    pairs = args.pair
    if pairs is not None and len(pairs) != len(texts):
        raise CommandError(f"{len(texts)} texts but {len(pairs)} --pair values; give one --pair per text, in order")
    model = _load(args)
    top_k = None if args.all_labels else args.top_k
    task = _head_call(args, lambda: model.task("classify", top_k=top_k, truncation=args.truncation))
    predictions = _head_call(args, lambda: model.run_task(task, texts, pairs, batch_size=args.batch_size))
    _banner_to_stderr(args, model)
    payload = envelope(
        model.manifest.directory,
        model.variant,
        model.manifest.random_weights,
        predictions,
        architecture=model.manifest.architecture,
        problem_type=model.manifest.problem_type,
    )
    lines = []
    for text, ranked in zip(texts, predictions, strict=True):
        scores = "  ".join(f"{p['label']} {p['score']:.4f}" for p in ranked)
        lines.append(f"{scores}\t{text}")
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _rerank_arguments(parser: ArgumentParser) -> None:
    _add_model_args(parser, "rerank", "input", "truncation", "raw_scores", "batch_size")
    parser.add_argument("query", metavar="QUERY")
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="texts to rank (or use --input)")


def cmd_rerank(args: argparse.Namespace) -> int:
    texts = _embed_texts(args)
    model = _load(args)
    ranked = _head_call(
        args,
        lambda: model.rerank(
            args.query, texts, truncation=args.truncation, raw_scores=args.raw_scores, batch_size=args.batch_size
        ),
    )
    _banner_to_stderr(args, model)
    results = [{**r, "text": texts[r["index"]]} for r in ranked]
    manifest = model.manifest
    payload = envelope(manifest.directory, model.variant, manifest.random_weights, results, query=args.query)
    lines = [f"{r['score']:.4f}\t{r['index']}\t{texts[r['index']]}" for r in ranked]
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _fill_mask_arguments(parser: ArgumentParser) -> None:
    _texts_arguments(parser, "fill-mask")
    parser.add_argument(
        "--target",
        action="append",
        metavar="TOKEN",
        help="only this token as a candidate (repeatable), as the fill-mask pipeline's targets",
    )


def cmd_fill_mask(args: argparse.Namespace) -> int:
    texts = _embed_texts(args)
    model = _load(args)
    task = _head_call(
        args, lambda: model.task("fill_mask", top_k=args.top_k, truncation=args.truncation, targets=args.target)
    )
    fills = _head_call(args, lambda: model.run_task(task, texts, batch_size=args.batch_size))
    _banner_to_stderr(args, model)
    payload = envelope(model.manifest.directory, model.variant, model.manifest.random_weights, fills)
    lines = []
    for text, masks in zip(texts, fills, strict=True):
        lines.append(text)
        for number, candidates in enumerate(masks, 1):
            lines += [f"  [MASK] {number}: {c['score']:<9.4g} {c['token_str']:<14} {c['sequence']}" for c in candidates]
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


# -- walkthrough -------------------------------------------------------------------------------------


def cmd_walkthrough(args: argparse.Namespace) -> int:
    manifest = read_manifest(args.model_dir)
    if "pooler" not in manifest.heads:  # without an NSP head the walkthrough says so at its NSP step
        heads = ", ".join(manifest.heads) or "no head"
        raise ValueError(
            f"walkthrough follows the module's checks, which need a pooler; {manifest.directory} "
            f"was exported from {manifest.architecture}, which has {heads}. Use `bertonnx inspect` and "
            "`bertonnx embed` on it, or walk through a BertForPreTraining export (bert-base-uncased)."
        )
    facts = describe(manifest)
    model = _load(args)
    text_a, text_b = MODULE_PAIR
    tokens = model.tokenize(text_a, text_b)
    out = model([text_a], [text_b])
    assert out.last_hidden_state is not None  # hidden_states=True is the default
    states = out.token_states(0)
    has_pooler = out.pooler_output.shape[1] > 0
    cosine = mean_pooler_cosine(states, tokens.tokens, out.pooler_output[0]) if has_pooler else None
    probability = float(out.nsp_probability[0]) if "nsp" in model.tasks else None
    fills = model.fill_mask(MODULE_MASKED) if "fill_mask" in model.tasks else None
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
        "fill_mask": {"text": MODULE_MASKED, "predictions": fills[0]} if fills else None,
        "architecture": manifest.architecture,
        "tasks": list(model.tasks),
    }
    heads = ", ".join(f"{_fmt(p[key])} {_PART_LABELS[key]}" for key in _PART_LABELS if key in p)
    random_label = " (RANDOM weights: not a trained model's answer)" if manifest.random_weights else ""
    fill_lines = (
        [f'7. fill-mask "{MODULE_MASKED}"{random_label}']
        + [f"   {fill['score']:<9.4g} {fill['token_str']:<12} {fill['sequence']}" for fill in fills[0]]
        if fills
        else [f"7. fill-mask: this export has no MLM head ({manifest.architecture})"]
    )
    text = "\n".join(
        [
            _random_banner(manifest.random_weights, manifest.weights)
            + f"bertonnx walkthrough: {manifest.directory} ({model.variant})",
            f"1. config: {c['num_hidden_layers']} layers, {c['num_attention_heads']} heads, {c['hidden_size']} hidden, "
            f"{c['intermediate_size']} ffn, {c['vocab_size']} vocab, {c['max_position_embeddings']} positions, "
            f"{c['type_vocab_size']} segment types",
            f"2. parameters ({facts['parameters']['counted_from']}): BertModel {_fmt(p['bert_model'])}, "
            f"token embeddings {_fmt(p['token_embeddings'])}" + (f", {heads}" if heads else ""),
            f'3. pair "{text_a}" / "{text_b}"',
            f"   tokens         {' '.join(tokens.tokens)}",
            f"   token_type_ids {' '.join(map(str, tokens.type_ids))}",
            f"4. last_hidden_state {tuple(payload['last_hidden_state_shape'])}, "
            f"pooler_output {out.pooler_output.shape}",
            f"5. cosine(mean of non-special token vectors, pooler_output) = {cosine:.4f}"
            if cosine is not None
            else f"5. pooler: this export has no pooler ({manifest.architecture})",
            f"6. NSP: P(B follows A) = {probability:.4f}"
            if probability is not None
            else f"6. NSP: this export has no NSP head ({manifest.architecture})",
            *fill_lines,
        ]
    )
    _emit(args, envelope(manifest.directory, model.variant, manifest.random_weights, [], **payload), text)
    return EXIT_OK


#: Every command, by name, in ``bertonnx --help`` order. Adding one is one entry: a :class:`Command` (its
#: name, summary, ``add_arguments(parser)``, ``run(args) -> int``), or ``"module:ATTRIBUTE"`` naming one
#: whose module is imported only when used (or for ``bertonnx --help``); such a module must import without
#: its extra (``Command.extra``, checked after parsing), so ``--help`` and the missing-extra message work on a
#: runtime-only install.
COMMANDS: dict[str, Command | str] = {
    "inspect": Command(
        "inspect",
        "config numbers, parameter counts (from the ONNX initializers), outputs, variants, provenance",
        _inspect_arguments,
        cmd_inspect,
    ),
    "tokenize": Command(
        "tokenize", "tokens, ids and segment ids of TEXT (and PAIR)", _tokenize_arguments, cmd_tokenize
    ),
    "nsp": Command("nsp", "probability that TEXT_B follows TEXT_A", _nsp_arguments, cmd_nsp),
    "embed": Command(
        "embed",
        "one vector per text, as .npy (--output X.npy) or JSON lines",
        _embed_arguments,
        cmd_embed,
        epilog=EMBED_EPILOG,
    ),
    "classify": Command(
        "classify",
        "labels of each TEXT (or --pair) by the checkpoint's classifier",
        _classify_arguments,
        cmd_classify,
        epilog=TEXTS_EPILOG,
    ),
    "rerank": Command(
        "rerank",
        "rank TEXTs by relevance to QUERY with a cross-encoder",
        _rerank_arguments,
        cmd_rerank,
        epilog=TEXTS_EPILOG,
    ),
    "fill-mask": Command(
        "fill-mask",
        "the MLM head's top tokens for each [MASK] of each TEXT",
        lambda parser: _fill_mask_arguments(parser),
        cmd_fill_mask,
        epilog=TEXTS_EPILOG,
    ),
    "walkthrough": Command(
        "walkthrough", "the whole module in one run on the model directory", _model_args("walkthrough"), cmd_walkthrough
    ),
    "tag": "bertonnx.cli_spans:TAG_COMMAND",
    "answer": "bertonnx.cli_spans:ANSWER_COMMAND",
    "choose": "bertonnx.cli_spans:CHOOSE_COMMAND",
    "embed-sparse": "bertonnx.cli_sparse:EMBED_SPARSE_COMMAND",
    "zero-shot": "bertonnx.cli_zero_shot:ZERO_SHOT_COMMAND",
    "detect-replaced": "bertonnx.cli_spans:DETECT_REPLACED_COMMAND",
    "export": "bertonnx_export.cli:EXPORT_COMMAND",
    "parity": "bertonnx_export.cli:PARITY_COMMAND",
    "bench": "bertonnx_benchmarks.cli:BENCH_COMMAND",
    "bench-serve": "bertonnx_benchmarks.serve.cli:BENCH_SERVE_COMMAND",
    "serve": "bertonnx.serve.cli:SERVE_COMMAND",
    "batch": "bertonnx.corpus.cli:BATCH_COMMAND",
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bertonnx`` command; returns the exit code."""
    return dispatch(COMMANDS, argv, prog="bertonnx", description=DESCRIPTION, version=__version__)


if __name__ == "__main__":
    raise SystemExit(main())
