"""``bertonnx embed-sparse``: SPLADE weights of each text from the command line (``BertOnnx.embed_sparse``).

An export of a sentence-transformers ``SparseEncoder`` folder answers with, per text, its non-zero vocabulary
ids (ascending), their weights and the vocabulary entries they stand for, as ``SparseEncoder.encode``; the
pruning options are the Python ones (``--top-k``: ``encode``'s ``max_active_dims``, ``--threshold``). Its
texts are read as ``bertonnx embed`` reads them. Registered in :data:`bertonnx.cli.COMMANDS` by name,
imported only when used.
"""

from __future__ import annotations

import argparse
import json

from .cli import _add_model_args, _banner_to_stderr, _embed_texts, _head_call, _load
from .command import EXIT_OK, ArgumentParser, Command
from .surface import envelope

__all__ = ["EMBED_SPARSE_COMMAND"]

EMBED_SPARSE_EPILOG = """\
input: TEXT arguments, or --input FILE with one text per line (- for standard input; blank lines are
empty texts, so row i of the output belongs to line i). Texts are cut at the export's max_seq_length, as
SparseEncoder.encode cuts them.

output:
  no --json   JSON lines on stdout, one {"text", "indices", "values", "tokens"} per text, in input order:
              its non-zero vocabulary ids (ascending), their weights and the vocabulary entries
  --json      instead, one JSON object: model, variant, random_weights, results (the same objects), then
              top_k and threshold
An export that is not of a SparseEncoder folder (SPLADE pooling on an MLM head) is refused in one line."""


def _embed_sparse_arguments(parser: ArgumentParser) -> None:
    _add_model_args(
        parser, "embed-sparse", "input", "top_k", "threshold", "truncation", "prompt_name", "prompt", "batch_size"
    )
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="texts to embed (or use --input)")


def cmd_embed_sparse(args: argparse.Namespace) -> int:
    texts = _embed_texts(args)
    model = _load(args)
    answers = _head_call(
        args,
        lambda: model.embed_sparse(
            texts,
            top_k=args.top_k,
            threshold=args.threshold,
            prompt_name=args.prompt_name,
            prompt=args.prompt,
            truncation=args.truncation,
            batch_size=args.batch_size,
        ),
    )
    _banner_to_stderr(args, model)
    results = [
        {
            "text": text,
            "indices": answer["indices"].tolist(),
            "values": answer["values"].tolist(),
            "tokens": [model.tokenizer.decode([int(i)], False) for i in answer["indices"]],
        }
        for text, answer in zip(texts, answers, strict=True)
    ]
    if args.json:
        found = envelope(
            model.manifest.directory,
            model.variant,
            model.manifest.random_weights,
            results,
            top_k=args.top_k,
            threshold=args.threshold,
        )
        print(json.dumps(found, ensure_ascii=False))
    else:
        for result in results:
            print(json.dumps(result, ensure_ascii=False))
    return EXIT_OK


EMBED_SPARSE_COMMAND = Command(
    "embed-sparse",
    "SPLADE: each text's non-zero vocabulary weights (exports of a SparseEncoder folder)",
    _embed_sparse_arguments,
    cmd_embed_sparse,
    epilog=EMBED_SPARSE_EPILOG,
)
