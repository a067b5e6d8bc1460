"""``bertonnx zero-shot``: zero-shot classification by an NLI classifier from the command line.

Prints per text its labels by score, or with ``--json`` the pipeline-shaped answer
(:meth:`bertonnx.BertOnnx.zero_shot`).
Registered in :data:`bertonnx.cli.COMMANDS` by name, imported only when used.
"""

from __future__ import annotations

import argparse
import json

from .cli import _add_model_args, _banner_to_stderr, _load
from .command import EXIT_OK, ArgumentParser, Command, CommandError, describe_error
from .files import read_lines
from .surface import envelope

__all__ = ["ZERO_SHOT_COMMAND"]

ZERO_SHOT_EPILOG = """\
input: TEXT arguments, or --input FILE with one text per line (- for standard input). Each text is the premise
of one pair per label ("This example is {label}." by default), as transformers' pipeline("zero-shot-classification");
a text too long for the model beside a hypothesis is cut (the text, never the hypothesis). Output: per text its
labels and scores, highest first; --json prints every command's envelope (model, variant, random_weights,
results), results holding one {"sequence", "labels", "scores"} per text."""


def _arguments(parser: ArgumentParser) -> None:
    _add_model_args(
        parser,
        "zero-shot",
        "input",
        "candidate_labels",
        "hypothesis_template",
        "multi_label",
        "entailment_label",
        "batch_size",
    )
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="texts to classify (or use --input)")


def cmd_zero_shot(args: argparse.Namespace) -> int:
    if bool(args.texts) == (args.input is not None):
        raise CommandError("give TEXT arguments or --input FILE (one text per line, - for stdin), not both or neither")
    texts = list(args.texts) if args.texts else read_lines(args.input, "--input")
    model = _load(args)
    try:
        found = model.zero_shot(
            texts,
            ",".join(args.candidate_labels),
            hypothesis_template=args.hypothesis_template,
            multi_label=args.multi_label,
            entailment_label=args.entailment_label,
            batch_size=args.batch_size,
        )
    except ValueError as exc:  # the core's errors in this command's terms (describe_error)
        raise CommandError(describe_error(exc)) from exc
    _banner_to_stderr(args, model)
    if args.json:
        payload = envelope(model.manifest.directory, model.variant, model.manifest.random_weights, found)
        print(json.dumps(payload, ensure_ascii=False))
        return EXIT_OK
    lines: list[str] = []
    for answer in found:
        scores = "  ".join(
            f"{label} {score:.4f}" for label, score in zip(answer["labels"], answer["scores"], strict=True)
        )
        lines.append(f"{scores}\t{answer['sequence']}")
    print("\n".join(lines))
    return EXIT_OK


ZERO_SHOT_COMMAND = Command(
    "zero-shot",
    "rank --candidate-labels for each TEXT with an NLI classifier (zero-shot classification)",
    _arguments,
    cmd_zero_shot,
    epilog=ZERO_SHOT_EPILOG,
)
