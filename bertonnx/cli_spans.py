"""``bertonnx tag``, ``answer``, ``choose`` and ``detect-replaced``: entities, extractive answers, multiple choice
and replaced token detection from the command line.

Both print one line per entity or answer, ``start``/``end`` character offsets into the text as given, or
with ``--json`` the envelope of every command (:func:`bertonnx.surface.envelope`) whose ``results`` are the
pipeline-shaped answers (:meth:`bertonnx.BertOnnx.tag`, :meth:`bertonnx.BertOnnx.answer`).
Registered in :data:`bertonnx.cli.COMMANDS` by name, imported only when used.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .cli import _add_model_args, _load
from .command import EXIT_OK, ArgumentParser, Command, CommandError, describe_error
from .files import read_lines, read_text
from .model import BertOnnx
from .surface import envelope, print_random_banner
from .vocabulary import ignore_labels

__all__ = ["ANSWER_COMMAND", "CHOOSE_COMMAND", "DETECT_REPLACED_COMMAND", "TAG_COMMAND"]


def _print_json(model: BertOnnx, results: list[Any]) -> None:
    print(json.dumps(envelope(model.manifest.directory, model.variant, model.manifest.random_weights, results)))


def _banner(model: BertOnnx) -> str:
    """The random-weights banner on stderr, as every data command prints it (stdout keeps the answers alone);
    an empty first line for the report."""
    print_random_banner(model.manifest.random_weights, model.manifest.weights)
    return ""


# -- tag ---------------------------------------------------------------------------------------------

TAG_EPILOG = """\
input: TEXT arguments, or --input FILE with one text per line (- for standard input).
output: per text its entities, one per line: label, score, start:end (character offsets into the text)
and the text they cover; --json prints {"model", "variant", "random_weights", "results"}, results
holding one list of entities per text (the shape of transformers' pipeline("token-classification")).
A text longer than the model's 512 tokens needs --stride."""


def _tag_arguments(parser: ArgumentParser) -> None:
    _add_model_args(parser, "tag", "input", "aggregation_strategy", "ignore_labels", "keep_all", "stride", "batch_size")
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="texts to tag (or use --input)")


def cmd_tag(args: argparse.Namespace) -> int:
    if bool(args.texts) == (args.input is not None):
        raise CommandError("give TEXT arguments or --input FILE (one text per line, - for stdin), not both or neither")
    ignore = ignore_labels(args)
    texts = list(args.texts) if args.texts else read_lines(args.input, "--input")
    model = _load(args)
    try:
        found = model.tag(texts, args.aggregation_strategy, ignore, args.stride, batch_size=args.batch_size)
    except ValueError as exc:  # the core's typed errors in this command's terms (describe_error)
        raise CommandError(describe_error(exc)) from exc
    if args.json:
        _print_json(model, found)
        return EXIT_OK
    lines = [_banner(model)]
    for index, (text, entities) in enumerate(zip(texts, found, strict=True)):
        if len(texts) > 1:
            lines.append(f"# text {index}")
        if not entities:
            lines.append("(no entities)")
        for entity in entities:
            label = entity.get("entity_group", entity.get("entity"))
            covered = text[entity["start"] : entity["end"]]
            lines.append(f"{label:<12} {entity['score']:.4f}  {entity['start']}:{entity['end']}  {covered!r}")
    print("\n".join(line for line in lines if line))
    return EXIT_OK


TAG_COMMAND = Command(
    "tag",
    "named entities (token labels) of each text with character offsets (token-classification exports)",
    _tag_arguments,
    cmd_tag,
    epilog=TAG_EPILOG,
)


# -- answer ------------------------------------------------------------------------------------------

ANSWER_EPILOG = """\
The context comes from --context TEXT or --context-file FILE (UTF-8, read whole; - for standard
input); a long context is searched in overlapping windows, never cut. Repeat --question to ask several
questions of the same context. Output: per question its answers, best first: score, start:end
(character offsets into the context) and the answer; --json prints {"model", "variant", "random_weights",
"results"}, results holding per question the shape of transformers' pipeline("question-answering") (an
object, a list of them with --top-k > 1)."""


def _answer_arguments(parser: ArgumentParser) -> None:
    _add_model_args(
        parser,
        "answer",
        "top_k",
        "max_answer_len",
        "doc_stride",
        "max_seq_len",
        "handle_impossible_answer",
        "batch_size",
    )
    parser.add_argument("--question", action="append", required=True, metavar="TEXT", help="repeatable")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--context", metavar="TEXT", help="the text to find the answer in")
    source.add_argument("--context-file", metavar="FILE", help="read the context from FILE (- for stdin)")


def cmd_answer(args: argparse.Namespace) -> int:
    if args.context is not None:
        context = args.context
    else:
        context = read_text(args.context_file, "--context-file", what="a text file holding the context")
    model = _load(args)
    try:
        found: list[Any] = model.answer(
            list(args.question),
            context,
            args.top_k,
            args.max_answer_len,
            args.doc_stride,
            args.handle_impossible_answer,
            max_seq_len=args.max_seq_len,
            batch_size=args.batch_size,
        )
    except ValueError as exc:  # the core's typed errors in this command's terms (describe_error)
        raise CommandError(describe_error(exc)) from exc
    if args.json:
        _print_json(model, found)
        return EXIT_OK
    lines = [_banner(model)]
    for question, answers in zip(args.question, found, strict=True):
        lines.append(f"Q: {question}")
        for answer in answers if isinstance(answers, list) else [answers]:
            lines.append(f"  {answer['score']:.4f}  {answer['start']}:{answer['end']}  {answer['answer']!r}")
    print("\n".join(line for line in lines if line))
    return EXIT_OK


ANSWER_COMMAND = Command(
    "answer",
    "extractive answers to --question in --context or --context-file (question-answering exports)",
    _answer_arguments,
    cmd_answer,
    epilog=ANSWER_EPILOG,
)


# -- choose ------------------------------------------------------------------------------------------

CHOOSE_EPILOG = """\
The context comes from --context TEXT; each CHOICE argument is one choice (at least 2). Output: every choice
with its probability (the softmax over the choices' logits), the best marked with *; --json prints
{"model", "variant", "random_weights", "results"}, results holding one {"index", "choice", "score", "scores"}
(the best choice's position, text and probability, and every choice's)."""


def _choose_arguments(parser: ArgumentParser) -> None:
    _add_model_args(parser, "choose", "truncation", "batch_size")
    parser.add_argument("--context", required=True, metavar="TEXT", help="the context (question, sentence start)")
    parser.add_argument("choices", metavar="CHOICE", nargs="+", help="the choices (at least 2)")


def cmd_choose(args: argparse.Namespace) -> int:
    model = _load(args)
    try:
        found = model.choose(args.context, list(args.choices), truncation=args.truncation, batch_size=args.batch_size)
    except ValueError as exc:
        raise CommandError(describe_error(exc)) from exc
    if args.json:
        _print_json(model, [found])
        return EXIT_OK
    lines = [_banner(model)]
    for index, (choice, score) in enumerate(zip(args.choices, found["scores"], strict=True)):
        lines.append(f"{'*' if index == found['index'] else ' '} {score:.4f}  {choice}")
    print("\n".join(line for line in lines if line))
    return EXIT_OK


CHOOSE_COMMAND = Command(
    "choose",
    "the best of several CHOICEs for --context (multiple-choice exports)",
    _choose_arguments,
    cmd_choose,
    epilog=CHOOSE_EPILOG,
)


# -- detect-replaced ---------------------------------------------------------------------------------

DETECT_REPLACED_EPILOG = """\
input: TEXT arguments, or --input FILE with one text per line (- for standard input).
output: per text its tokens (special tokens left out), one per line: P(replaced), start:end (character
offsets into the text) and the text the token covers, marked with * when P(replaced) > 0.5; --json prints every
command's envelope (model, variant, random_weights, results), results holding per text one list of
{"index", "token", "start", "end", "score"}. Needs an ElectraForPreTraining export."""
#: P(replaced) above which the text output marks a token.
REPLACED_MARK = 0.5


def _detect_replaced_arguments(parser: ArgumentParser) -> None:
    _add_model_args(parser, "detect-replaced", "input", "truncation", "batch_size")
    parser.add_argument("texts", metavar="TEXT", nargs="*", help="texts to check (or use --input)")


def cmd_detect_replaced(args: argparse.Namespace) -> int:
    if bool(args.texts) == (args.input is not None):
        raise CommandError("give TEXT arguments or --input FILE (one text per line, - for stdin), not both or neither")
    texts = list(args.texts) if args.texts else read_lines(args.input, "--input")
    model = _load(args)
    try:
        found = model.detect_replaced(texts, truncation=args.truncation, batch_size=args.batch_size)
    except ValueError as exc:  # the core's typed errors in this command's terms (describe_error)
        raise CommandError(describe_error(exc)) from exc
    if args.json:
        _print_json(model, found)
        return EXIT_OK
    lines = [_banner(model)]
    for index, (text, tokens) in enumerate(zip(texts, found, strict=True)):
        if len(texts) > 1:
            lines.append(f"# text {index}")
        for token in tokens:
            mark = "*" if token["score"] > REPLACED_MARK else " "
            covered = text[token["start"] : token["end"]]
            lines.append(f"{mark} {token['score']:.4f}  {token['start']}:{token['end']}  {covered!r}")
    print("\n".join(line for line in lines if line))
    return EXIT_OK


DETECT_REPLACED_COMMAND = Command(
    "detect-replaced",
    "per token of each TEXT, the probability it was replaced (ELECTRA's discriminator: ElectraForPreTraining)",
    _detect_replaced_arguments,
    cmd_detect_replaced,
    epilog=DETECT_REPLACED_EPILOG,
)
