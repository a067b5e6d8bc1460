"""One vocabulary of options: every option more than one surface takes, declared once.

An option has one Python name (the keyword of :class:`bertonnx.BertOnnx`'s methods, the corpus job's
``TaskOptions`` field, the server's ``ServeOptions`` field and the argparse ``dest``), one flag, one
argparse type, choices and default, and one help text. Old spellings stay as aliases, marked deprecated in
``--help``, and parse to the same ``dest``. A command departs from the shared declaration only where
:attr:`Option.conventions` records it, with the reason shown in ``--help`` (the server's
``--max-batch-tokens 512``, ``fill-mask``'s ``--top-k 5``). HTTP keeps a protocol's own field name where it
has one (TEI's ``truncate``), translated at the HTTP edge from :data:`FIELD_NAMES`.

Every command adds its shared options with :func:`add_option`; :func:`flag` is how the command line names
a core error's option (:func:`bertonnx.command.describe_error`); a test builds every command's parser and
holds it to this table. This module imports the standard library and the core only.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .batching import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, DEFAULT_SERVE_MAX_BATCH_TOKENS
from .manifest import VARIANT_FILES
from .model import DEFAULT_VARIANT
from .options import MAX_THREADS
from .tasks.answer import DEFAULT_MAX_ANSWER_LEN, DEFAULT_MAX_SEQ_LEN
from .tasks.embed import PIPELINE_POOLING, POOLING_MODES
from .tasks.fill_mask import DEFAULT_TOP_K
from .tasks.tag import AGGREGATION_STRATEGIES, DEFAULT_IGNORE_LABELS
from .tasks.zero_shot import DEFAULT_HYPOTHESIS_TEMPLATE

__all__ = [
    "FIELD_NAMES",
    "OPTIONS",
    "Convention",
    "Option",
    "add_option",
    "field_name",
    "flag",
    "ignore_labels",
    "non_negative_float",
    "non_negative_int",
    "positive_int",
]


def positive_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def thread_count(text: str) -> int:
    """An argparse ``type``: a thread count, 1 to :data:`bertonnx.options.MAX_THREADS`."""
    value = positive_int(text)
    if value > MAX_THREADS:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_THREADS} threads, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type``: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse ``type``: a number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


_SHARED = object()  # a Convention that keeps the option's own default


@dataclass(frozen=True)
class Convention:
    """Where one command departs from an option's shared declaration, and why.

    Attributes:
        default: the command's own default (a documented convention; the reason goes in ``note``).
        note: appended to the help text (what the option means on this command, or why its default differs).
        required: the command cannot run without it.
        metavar: how its ``--help`` names the value.
    """

    default: object = _SHARED
    note: str = ""
    required: bool = False
    metavar: str | None = None

    @property
    def sets_default(self) -> bool:
        """Whether the command has a default of its own (else the option's)."""
        return self.default is not _SHARED


@dataclass(frozen=True)
class Option:
    """One shared option.

    Attributes:
        name: the Python name (keyword, field and argparse ``dest``).
        flag: the command-line flag.
        help: what it does, in one text for every command.
        commands: the commands that take it (a test checks their parsers against this).
        kind: the argparse ``type`` (``None``: a string, or a switch).
        choices: the values it takes.
        default: the default on every surface, unless a convention says otherwise.
        default_text: how ``--help`` shows a ``None`` default (what happens then).
        action: ``store_true`` (a switch) or ``append`` (repeatable); ``None`` stores a value.
        metavar: how ``--help`` names the value.
        aliases: old flags, each with the commands that spelled it so; they still parse, marked deprecated.
        conventions: per command, where it departs from this declaration.
        http_field: the HTTP field (``None``: the Python name; ``""``: not on HTTP).
        http_default: the HTTP default, where it differs from ``default`` (a protocol's convention).
        python: how Python spells it where ``name`` is only the ``dest`` (``""``: the command line's alone).
    """

    name: str
    flag: str
    help: str
    commands: tuple[str, ...]
    kind: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    default: object = None
    default_text: str | None = None
    action: str | None = None
    metavar: str | None = None
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    conventions: Mapping[str, Convention] = field(default_factory=dict)
    http_field: str | None = None
    http_default: str | None = None
    python: str | None = None

    def flags(self, command: str) -> tuple[str, ...]:
        """The flag and the old spellings ``command`` keeps."""
        return (self.flag, *(alias for alias, commands in self.aliases.items() if command in commands))

    def default_for(self, command: str) -> object:
        convention = self.conventions.get(command)
        return self.default if convention is None or convention.default is _SHARED else convention.default

    def help_for(self, command: str) -> str:
        """The ``--help`` text on ``command``: the shared text, the command's note, the default, old spellings."""
        convention = self.conventions.get(command, Convention())
        text = self.help + (f"; {convention.note}" if convention.note else "")
        default = self.default_for(command)
        if self.action is None or self.default_text is not None:
            shown = self.default_text if default is None else default
            if shown is not None:
                text += f" (default {shown})"
        old = self.flags(command)[1:]
        if old:
            text += f" ({', '.join(old)}: the old spelling, deprecated)"
        return text

    def argparse_keywords(self, command: str) -> dict[str, Any]:
        """The keywords of ``parser.add_argument`` for ``command``."""
        convention = self.conventions.get(command, Convention())
        keywords: dict[str, Any] = {"dest": self.name, "default": self.default_for(command)}
        keywords["help"] = self.help_for(command)
        if self.action is not None:
            keywords["action"] = self.action
        if self.kind is not None:
            keywords["type"] = self.kind
        if self.choices is not None:
            keywords["choices"] = self.choices
        metavar = convention.metavar or self.metavar
        if metavar is not None:
            keywords["metavar"] = metavar
        if convention.required:
            keywords["required"] = True
        return keywords


#: The commands that run a model's task on inputs (each takes --batch-size).
_HEAD_COMMANDS = ("classify", "rerank", "fill-mask", "tag", "answer", "choose")
TASK_COMMANDS = ("nsp", "embed", *_HEAD_COMMANDS, "batch", "embed-sparse", "zero-shot", "detect-replaced")
#: The commands that load an export (each takes --variant and --threads).
MODEL_COMMANDS = ("tokenize", "walkthrough", *TASK_COMMANDS, "serve")
_VARIANT_NAMES = ", ".join(VARIANT_FILES)
_EMBED_ONLY = Convention(note="--task embed")
_TAG_ONLY = Convention(note="--task tag")
#: As ``BertOnnx.classify``/``rerank``: an export of a sentence-transformers CrossEncoder cuts at its max_seq_length.
_CROSS_ENCODER_CUTS = Convention(
    default=None, note="a sentence-transformers CrossEncoder export cuts at its max_seq_length unless told otherwise"
)


def _declare(*options: Option) -> dict[str, Option]:
    return {option.name: option for option in options}


_LABELS_HELP = "the labels, comma-separated (repeatable; Python and HTTP: a list, or one comma-separated string)"
_TEMPLATE_HELP = "the hypothesis each label is put into, with {} where the label goes"
_MULTI_LABEL_HELP = "score each label on its own (contradiction vs entailment), not sharing the probability among them"
_ENTAIL = "the first label starting with 'entail', as the pipeline"


def _zero_shot(name: str, text: str, *, required: bool = False, **declared: Any) -> Option:
    """An option of ``zero-shot`` (``required``: that command cannot run without it), and of ``batch`` for
    ``--task zero-shot``."""
    conventions = {"zero-shot": Convention(required=required), "batch": Convention(note="--task zero-shot")}
    return Option(
        name, "--" + name.replace("_", "-"), text, ("zero-shot", "batch"), conventions=conventions, **declared
    )


#: Every shared option, by Python name, in the order of the table in docs/cli.md.
OPTIONS: Mapping[str, Option] = _declare(
    Option(
        "variant",
        "--variant",
        f"the export's file to run: {_VARIANT_NAMES} (bf16 needs OpenVINO)",
        MODEL_COMMANDS,
        choices=tuple(VARIANT_FILES),
        default=DEFAULT_VARIANT,
        http_field="",
    ),
    Option(
        "variants",
        "--variants",
        f"comma-separated subset of {','.join(VARIANT_FILES)}",
        ("export", "parity"),
        default_text="all",
        conventions={
            "export": Convention(
                note="bf16 needs OpenVINO; a lossy one (int8, bf16) that misses its parity gate is not written, "
                "and named here that exits 5"
            ),
            "parity": Convention(note="the ones DIR holds"),
        },
        http_field="",
    ),
    Option(
        "threads",
        "--threads",
        "onnxruntime intra-op threads",
        (*MODEL_COMMANDS, "bench", "bench-serve"),
        kind=thread_count,
        default_text="physical cores",
        conventions={
            "serve": Convention(note="with --ray: 1 per replica"),
            "batch": Convention(note="the local job's (with --ray: --threads-per-actor)"),
            "bench": Convention(note="the thread budget of every runner, torch's too"),
            "bench-serve": Convention(note="the server's and the offline runs'"),
        },
        http_field="",
    ),
    Option(
        "json",
        "--json",
        "print JSON",
        ("inspect", "tokenize", "walkthrough", *TASK_COMMANDS, "export", "parity"),
        action="store_true",
        default=False,
        conventions={
            "batch": Convention(note="the job's summary"),
            "export": Convention(note="the manifest, when done (the log goes to stderr)"),
            "parity": Convention(note="the figures"),
        },
        http_field="",
        python="",
    ),
    Option(
        "input",
        "--input",
        "one text per line (- for standard input)",
        ("embed", "classify", "rerank", "fill-mask", "tag", "batch", "embed-sparse", "zero-shot", "detect-replaced"),
        metavar="FILE",
        conventions={
            "batch": Convention(
                note="or a .jsonl, .csv or .parquet file (--text-column, --pair-column); not standard input",
                required=True,
            )
        },
        http_field="",
        python="",
    ),
    Option(
        "output",
        "--output",
        "write the answers to FILE (under a temporary name, renamed when complete; its folder must exist)",
        ("embed", "batch"),
        metavar="FILE",
        conventions={
            "embed": Convention(note="X.npy: a [n, hidden] float32 array, else JSON lines"),
            "batch": Convention(
                note="Parquet (a directory of Parquet files with --ray); rejects go to OUT.rejects.jsonl",
                required=True,
                metavar="OUT.parquet",
            ),
        },
        http_field="",
        python="",
    ),
    Option(
        "truncation",
        "--truncation",
        "cut inputs longer than the model takes (a pair: the longer text first) instead of refusing them",
        (
            "tokenize",
            "nsp",
            "embed",
            "classify",
            "rerank",
            "fill-mask",
            "choose",
            "batch",
            "serve",
            "embed-sparse",
            "detect-replaced",
        ),
        action="store_true",
        default=False,
        aliases={"--truncate": ("batch",), "--auto-truncate": ("serve",)},
        conventions={
            "serve": Convention(note='for requests that do not send "truncate" (off: 422 naming the input)'),
            "embed": Convention(
                default=None, note="a sentence-transformers export cuts at its max_seq_length unless told otherwise"
            ),
            "embed-sparse": Convention(
                default=None, note="it cuts at the export's max_seq_length unless told otherwise"
            ),
            "classify": _CROSS_ENCODER_CUTS,
            "rerank": _CROSS_ENCODER_CUTS,
        },
        http_field="truncate",
        http_default="absent: the server's --truncation",
    ),
    Option(
        "pooling",
        "--pooling",
        "pooler (the trained pooler), cls (the [CLS] state), mean (mean of the tokens) or pipeline (the export's "
        "sentence-transformers modules)",
        ("embed", "batch", "serve"),
        choices=(*POOLING_MODES, PIPELINE_POOLING),
        default=None,
        default_text="the export's own: its sentence-transformers pipeline, else pooler",
        conventions={"serve": Convention(note="for requests that name none"), "batch": _EMBED_ONLY},
        http_default="absent: the server's --pooling",
    ),
    Option(
        "prompt_name",
        "--prompt-name",
        "one of the export's sentence-transformers prompts, put before every text",
        ("embed", "batch", "embed-sparse"),
        metavar="NAME",
        conventions={"batch": Convention(note="--task embed or sparse")},
        default_text="the export's default_prompt_name",
    ),
    Option("prompt", "--prompt", "a prompt text put before every text", ("embed", "embed-sparse"), metavar="TEXT"),
    Option(
        "dimensions",
        "--dimensions",
        "keep the first N values of each vector (Matryoshka), then normalize when asked",
        ("embed", "batch"),
        kind=positive_int,
        metavar="N",
        conventions={"batch": _EMBED_ONLY},
        default_text="the export's truncate_dim, else every value",
    ),
    Option(
        "normalize",
        "--normalize",
        "scale each vector to unit length",
        ("embed", "batch"),
        action="store_true",
        default=False,
        conventions={"batch": _EMBED_ONLY},
        http_default="true (TEI's /embed convention; OpenAI's /v1/embeddings are always unit length)",
    ),
    Option(
        "batch_size",
        "--batch-size",
        "inputs (or windows) per onnxruntime run at most",
        TASK_COMMANDS,
        kind=positive_int,
        default=DEFAULT_MAX_BATCH_SIZE,
        http_field="",
    ),
    Option(
        "max_batch_tokens",
        "--max-batch-tokens",
        "padded tokens (longest input x inputs) per onnxruntime run at most",
        ("batch", "serve"),
        kind=positive_int,
        default=DEFAULT_MAX_BATCH_TOKENS,
        conventions={
            "serve": Convention(
                default=DEFAULT_SERVE_MAX_BATCH_TOKENS,
                note=f"the server's is {DEFAULT_SERVE_MAX_BATCH_TOKENS}, not {DEFAULT_MAX_BATCH_TOKENS}: a short "
                "request waits behind a whole run, and on a CPU a larger run gains nothing (measured: "
                "bertonnx/batching.py)",
            )
        },
        http_field="",
    ),
    Option(
        "top_k",
        "--top-k",
        "how many answers, best first",
        ("classify", "fill-mask", "answer", "embed-sparse"),
        kind=positive_int,
        default=1,
        default_text="every weight",  # embed-sparse's None
        conventions={
            "classify": Convention(note="labels per input"),
            "answer": Convention(note="answers per question"),
            "fill-mask": Convention(
                default=DEFAULT_TOP_K, note="candidates per [MASK], not per input, as pipeline('fill-mask')"
            ),
            "embed-sparse": Convention(
                default=None, note="the largest weights kept per text (SparseEncoder.encode's max_active_dims)"
            ),
        },
        http_default=f"`/answer` 1, `/fill_mask` {DEFAULT_TOP_K} (`/predict`: every label, as TEI; `/embed_sparse`: "
        "every weight)",
    ),
    Option(
        "threshold",
        "--threshold",
        "keep only the weights above this",
        ("embed-sparse",),
        kind=non_negative_float,
        default=0.0,
        http_field="",
    ),
    Option(
        "raw_scores",
        "--raw-scores",
        "the head's logits instead of its probabilities",
        ("rerank",),
        action="store_true",
        default=False,
    ),
    Option(
        "aggregation_strategy",
        "--aggregation-strategy",
        "none: every token; simple: B-/I- tags grouped; first/average/max: one label per word",
        ("tag", "batch"),
        choices=AGGREGATION_STRATEGIES,
        default="simple",  # BertOnnx.tag's, pipeline("token-classification")'s
        conventions={"batch": _TAG_ONLY},
    ),
    Option(
        "ignore_labels",
        "--ignore-label",
        "leave LABEL out (repeatable; --keep-all for none)",
        ("tag", "batch"),
        action="append",
        metavar="LABEL",
        default_text=", ".join(DEFAULT_IGNORE_LABELS),
        conventions={"batch": _TAG_ONLY},
        http_default=json.dumps(list(DEFAULT_IGNORE_LABELS)),
    ),
    Option(
        "keep_all",
        "--keep-all",
        "leave no label out: every token or group is shown (Python and HTTP: ignore_labels=[])",
        ("tag", "batch"),
        action="store_true",
        default=False,
        conventions={"batch": _TAG_ONLY},
        http_field="",
        python="ignore_labels=()",
    ),
    Option(
        "stride",
        "--stride",
        "split a text longer than the model's positions into windows sharing this many tokens",
        ("tag", "batch"),
        kind=non_negative_int,
        default_text="none: such a text is refused",
        conventions={"batch": Convention(note="--task tag; a refused row is a bad row (--on-error)")},
        http_default="null",
    ),
    Option(
        "doc_stride",
        "--doc-stride",
        "context tokens shared by consecutive windows",
        ("answer",),
        kind=non_negative_int,
        default=None,
        default_text="min(max_seq_len // 2, 128), as the pipeline",
    ),
    Option(
        "max_answer_len",
        "--max-answer-len",
        "longest answer in tokens",
        ("answer",),
        kind=positive_int,
        default=DEFAULT_MAX_ANSWER_LEN,
    ),
    Option(
        "max_seq_len",
        "--max-seq-len",
        "tokens per window",
        ("answer",),
        kind=positive_int,
        default_text=f"{DEFAULT_MAX_SEQ_LEN}, at most the model's positions",
    ),
    Option(
        "handle_impossible_answer",
        "--handle-impossible-answer",
        "offer the empty answer when [CLS] scores highest",
        ("answer",),
        action="store_true",
        default=False,
    ),
    Option(
        "max_length",
        "--max-length",
        "token limit, special tokens included",
        ("tokenize",),
        kind=positive_int,
        default_text="the model's positions",
        http_field="",
    ),
    _zero_shot(
        "candidate_labels", _LABELS_HELP, required=True, action="append", metavar="LABELS", http_default="required"
    ),
    _zero_shot("hypothesis_template", _TEMPLATE_HELP, metavar="TEMPLATE", default=DEFAULT_HYPOTHESIS_TEMPLATE),
    _zero_shot("multi_label", _MULTI_LABEL_HELP, action="store_true", default=False),
    _zero_shot("entailment_label", "the classifier's label meaning entailment", metavar="LABEL", default_text=_ENTAIL),
)

#: The runtime's option names that HTTP spells otherwise (a protocol's own names, e.g. TEI's ``truncate``).
FIELD_NAMES: Mapping[str, str] = {
    o.name: o.http_field for o in OPTIONS.values() if o.http_field and o.http_field != o.name
}


class _Adder(Protocol):
    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action: ...


def add_option(parser: _Adder, name: str, command: str) -> argparse.Action:
    """Add the shared option ``name`` to ``command``'s parser (or argument group), as declared.

    Raises:
        ValueError: ``name`` is not declared, or ``command`` is not among the commands declared to take it.
    """
    option = OPTIONS.get(name)
    if option is None:
        raise ValueError(f"{name!r} is not a shared option; declare it in bertonnx.vocabulary.OPTIONS")
    if command not in option.commands:
        raise ValueError(f"{command!r} is not declared to take {name!r}; add it to OPTIONS[{name!r}].commands")
    return parser.add_argument(*option.flags(command), **option.argparse_keywords(command))


def flag(name: str) -> str:
    """The command-line flag of the Python option ``name`` (``doc_stride`` -> ``--doc-stride``)."""
    option = OPTIONS.get(name)
    return option.flag if option is not None else "--" + name.replace("_", "-")


def field_name(name: str) -> str:
    """The HTTP field of the Python option ``name`` (``truncation`` -> TEI's ``truncate``)."""
    return FIELD_NAMES.get(name, name)


def ignore_labels(args: argparse.Namespace) -> tuple[str, ...]:
    """The labels ``--ignore-label``/``--keep-all`` leave out (the ``ignore_labels`` Python option).

    ``--ignore-label ''`` (the corpus job's old spelling of ``--keep-all``) adds no label.

    Raises:
        ValueError: both given.
    """
    if args.keep_all and args.ignore_labels:
        raise ValueError(f"{flag('keep_all')} and {flag('ignore_labels')} contradict each other; give one of them")
    if args.keep_all:
        return ()
    return tuple(label for label in args.ignore_labels or DEFAULT_IGNORE_LABELS if label)
