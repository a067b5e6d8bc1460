"""How every command runs: its own parser, options anywhere, and one line per expected failure.

Each command (the ``bertonnx`` subcommands, ``serve`` and ``batch`` included, and the extras' entry points
``python -m bertonnx_export`` and ``python -m bertonnx_benchmarks``) is a :class:`Command` run by
:func:`run_command`, which

- parses with ``parse_intermixed_args``, so options may come before, between or after the positional
  arguments, as users type them (``bertonnx embed DIR --pooling mean "some text"``). argparse cannot do
  that through subparsers, hence one parser per command and a dispatcher (:func:`dispatch`) that picks
  the command by name;
- checks the command's extra before running it (:func:`bertonnx.extras.require_extra`), so a
  runtime-only install gets the install commands instead of a traceback;
- turns every expected failure into one line on stderr naming the problem and the fix, with exit code 2
  (or the :class:`CommandError`'s own code): bad option values, bad files and directories, missing
  extras, bad input values. ``--debug`` adds the traceback. An unexpected exception is a bug: one line
  saying so, exit 70, and the traceback with ``--debug``. The core's typed errors get their command-line
  wording in :func:`describe_error`; the exit codes are :mod:`bertonnx.exit_codes`.

Adding a command: write ``add_arguments(parser)`` and ``run(args) -> int``, wrap them in a
:class:`Command`, and list it (or its ``"module:ATTRIBUTE"``, for a command whose module needs an extra to
run: that module must import without it, so ``--help`` always works) in :data:`bertonnx.cli.COMMANDS`.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import traceback
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from .errors import InputTooLongError, OptionError, VariantMissingError, over_limit, preferred_variant
from .exit_codes import EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from .extras import extra_of_module, install_hint, require_extra
from .vocabulary import flag, non_negative_int, positive_int

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "ArgumentParser",
    "Command",
    "CommandError",
    "describe_error",
    "dispatch",
    "non_negative_int",
    "optional_address_argv",
    "port_number",
    "positive_int",
    "run_command",
]

DEBUG_OPTION = "--debug"


class CommandError(Exception):
    """A failure the user can fix; the message names the problem and the fix.

    Args:
        message: one sentence (newlines are joined into one line when printed).
        exit_code: the process exit code (default 2).
    """

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose usage errors raise :class:`CommandError` (one line, exit 2), and
    which names a mistyped option first (``--ouput``: did you mean ``--output``?), before any missing one.
    Options are never abbreviated: ``--prompt`` on a command that has only ``--prompt-name`` is refused, not
    taken for it; an option of one value given twice (``--context a --context b``) is refused, not the last
    one kept."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{message}; see `{self.prog} --help`")

    def parse_intermixed_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        words = list(sys.argv[1:] if args is None else args)
        known = [flag for action in self._actions for flag in action.option_strings]
        #: options that keep one value: given twice, argparse would keep the last silently
        single = {
            flag: action
            for action in self._actions
            if not isinstance(action, (argparse._AppendAction, argparse._CountAction, argparse._HelpAction))
            for flag in action.option_strings
        }
        given: dict[int, list[str]] = {}
        for word in _options_part(words):
            flag = word.split("=", 1)[0]
            action = single.get(flag)
            if action is not None:
                flags = given.setdefault(id(action), [])
                flags.append(flag)
                if len(flags) == 2:
                    both = "twice" if flags[0] == flag else f"twice (as {flags[0]} and {flag})"
                    self.error(f"{flags[0]} is given {both}, and it keeps one value; pass it once")
            if not flag.startswith("--") or flag == "--" or flag in known:
                continue
            close = difflib.get_close_matches(flag, known, n=1)
            self.error(f"unrecognized arguments: {flag}" + (f" (did you mean {close[0]}?)" if close else ""))
        return super().parse_intermixed_args(words, namespace)


def port_number(text: str) -> int:
    """An argparse ``type``: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 0-65535, got {value}")
    return value


def optional_address_argv(argv: Sequence[str], flag: str = "--ray") -> list[str]:
    """``argv`` with ``flag`` (an option whose ADDRESS is optional) given its value only when the next word
    looks like an address (``auto`` or with a ``:``), so ``--ray DIR`` keeps DIR positional."""
    out = []
    for i, word in enumerate(argv):
        following = argv[i + 1] if i + 1 < len(argv) else ""
        out.append(f"{flag}=" if word == flag and not (following == "auto" or ":" in following) else word)
    return out


@dataclass(frozen=True)
class Command:
    """One command: how to build its parser and how to run it.

    Attributes:
        name: the word after ``bertonnx``.
        summary: one line for ``bertonnx --help``.
        add_arguments: adds the command's arguments to its parser (``--debug`` is added for every command).
        run: runs the parsed arguments and returns the exit code; raises on failure.
        extra: the ``bertonnx`` extra the command needs (checked after parsing, so ``--help`` always works).
        description: the ``--help`` text above the options (default: ``summary``).
        epilog: the ``--help`` text below the options.
        rewrite_argv: applied to the arguments before parsing (e.g. :func:`optional_address_argv`).
    """

    name: str
    summary: str
    add_arguments: Callable[[ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    extra: str | None = None
    description: str | None = None
    epilog: str | None = None
    rewrite_argv: Callable[[Sequence[str]], list[str]] | None = None

    def parser(self, prog: str | None = None) -> ArgumentParser:
        """The command's parser, with ``--debug``."""
        parser = ArgumentParser(
            prog=prog or f"bertonnx {self.name}",
            description=self.description or self.summary,
            epilog=self.epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        self.add_arguments(parser)
        parser.add_argument(DEBUG_OPTION, action="store_true", help="on an error, also print the traceback")
        return parser


def _options_part(argv: Sequence[str]) -> list[str]:
    """The arguments before a ``--`` (after it, everything is positional)."""
    argv = list(argv)
    return argv[: argv.index("--")] if "--" in argv else argv


def describe_error(exc: BaseException) -> str:
    """One line naming the problem and the fix, in the command line's terms.

    This is the one place where the core's typed errors (:mod:`bertonnx.errors`) get their command-line
    wording: their attributes, with the option that fixes them.
    """
    if isinstance(exc, InputTooLongError):
        if exc.option == "stride":
            model_limit = f"the model's {exc.max_length}"
            return (
                f"text {exc.index} has {over_limit(exc.length, model_limit)}; pass {flag('stride')} (e.g. "
                f"{flag('stride')} 128) to tag it in overlapping windows, merged as transformers' pipeline merges them"
            )
        return (
            f"input {exc.index} has {over_limit(exc.length, f'the limit of {exc.max_length}')}; pass "
            f"{flag(exc.option)} to cut it, or split the text"
        )
    if isinstance(exc, OptionError):  # the core names the option in Python; the vocabulary knows its flag
        return f"{flag(exc.option)} must be {exc.expected}, got {exc.value!r}" + (f"; {exc.fix}" if exc.fix else "")
    if isinstance(exc, VariantMissingError) and exc.reason is not None:  # re-exporting would refuse it again
        return (
            f"{exc.directory} has no {exc.variant!r} variant ({exc.reason}); it holds {', '.join(exc.available)}. "
            f"Pick one with {flag('variant')}, e.g. {flag('variant')} {preferred_variant(exc.available)}"
        )
    if isinstance(exc, VariantMissingError):
        return (
            f"{exc.directory} has no {exc.variant!r} variant; it holds {', '.join(exc.available)}. Pick one with "
            f"--variant, or re-export with `bertonnx export ... --variants {exc.variant}`"
        )
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        extra = extra_of_module(exc.name)
        if extra is not None:
            return f"{exc.name} is not installed; it comes with the {extra} extra. Install it: {install_hint(extra)}"
    if isinstance(exc, OSError) and exc.filename is not None:
        reason = exc.strerror or str(exc)
        return f"cannot use {exc.filename}: {reason}; check the path and its permissions"
    return str(exc) or type(exc).__name__


def _report(prog: str, message: str, exc: BaseException, debug: bool) -> None:
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__)
    one_line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    print(f"{prog}: error: {one_line}", file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no file descriptor (e.g. captured in tests)
        pass


def _guarded(prog: str, debug: bool, work: Callable[[], int]) -> int:
    """Run ``work`` and turn every exception into one line on stderr and an exit code (module docstring)."""
    try:
        return work()
    except CommandError as exc:
        _report(prog, str(exc), exc, debug)
        return exc.exit_code
    except KeyboardInterrupt as exc:
        _report(prog, "interrupted", exc, debug)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except (ValueError, TypeError, OSError, ImportError) as exc:  # ModelDirectoryError is a ValueError
        _report(prog, describe_error(exc), exc, debug)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - the last resort: a bug, said in one line
        message = (
            f"unexpected {type(exc).__name__}: {exc}. This is a bug in bertonnx; rerun with {DEBUG_OPTION} "
            "for the traceback and report it"
        )
        _report(prog, message, exc, debug)
        return EXIT_INTERNAL


def run_command(command: Command, argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Parse ``argv`` for ``command`` (options anywhere), check its extra, run it; return the exit code.

    Never raises for an expected failure: it prints one line on stderr and returns 2 (or the
    :class:`CommandError`'s code). See the module docstring.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    name = prog or f"bertonnx {command.name}"

    def work() -> int:
        words = command.rewrite_argv(argv) if command.rewrite_argv else argv
        try:
            args = command.parser(name).parse_intermixed_args(words)
        except SystemExit as exc:  # --help printed the usage
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        if command.extra is not None:
            require_extra(command.extra, f"`{name}`")
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning(name)
            return int(command.run(args))

    return _guarded(name, DEBUG_OPTION in _options_part(argv), work)


def _one_line_warning(name: str) -> Callable[..., None]:
    """``warnings.showwarning`` for a command: one ``NAME: warning: MESSAGE`` line on stderr, not Python's two
    lines with a source path and a code line (a fill-mask target that is no token, a library's notice)."""

    def show(message: Warning | str, category: type[Warning], *rest: object, **keywords: object) -> None:
        text = " ".join(str(message).split())
        print(f"{name}: warning: {text}", file=sys.stderr, flush=True)

    return show


def _load(entry: Command | str) -> Command:
    """A command, importing ``"module:ATTRIBUTE"`` entries (commands of the extras) only when asked for."""
    if isinstance(entry, Command):
        return entry
    module_name, _, attribute = entry.partition(":")
    command = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(command, Command):
        raise TypeError(f"{entry} is a {type(command).__name__}, expected a bertonnx.command.Command")
    return command


def _summary(entry: Command | str) -> str:
    try:
        command = _load(entry)
    except Exception as exc:  # noqa: BLE001 - one broken command must not hide the others
        return f"(cannot be loaded: {describe_error(exc)})"
    return command.summary + (f" (needs the {command.extra} extra)" if command.extra else "")


def _overview(prog: str, description: str, commands: Mapping[str, Command | str]) -> str:
    width = max(len(name) for name in commands)
    lines = [
        f"usage: {prog} COMMAND [ARGUMENTS AND OPTIONS, IN ANY ORDER]",
        "",
        description,
        "",
        "commands:",
        *(f"  {name:<{width}}  {_summary(entry)}" for name, entry in commands.items()),
        "",
        f"`{prog} COMMAND --help` shows a command's arguments. Every command takes {DEBUG_OPTION} (print the",
        "traceback of an error). Exit codes: 0 ok, 2 bad usage or input (one line on stderr names the",
        "problem and the fix), 70 a bug, 130 interrupted; export, parity, bench and serve add their own",
        "(bertonnx.exit_codes lists them all).",
    ]
    return "\n".join(lines)


def dispatch(
    commands: Mapping[str, Command | str],
    argv: Sequence[str] | None = None,
    *,
    prog: str,
    description: str,
    version: str,
) -> int:
    """Run ``prog COMMAND ...``: the first argument that is not an option names the command.

    Options given before the command name (``bertonnx --debug embed ...``) are passed on to it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    head = _options_part(argv)
    position = next((i for i, arg in enumerate(head) if not arg.startswith("-")), None)
    if position is None:
        if "--version" in head:
            print(f"{prog} {version}")
            return EXIT_OK
        if "-h" in head or "--help" in head:
            print(_overview(prog, description, commands))
            return EXIT_OK
        message = f"no command given; expected one of {', '.join(commands)}; see `{prog} --help`"
        print(f"{prog}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    name = argv[position]
    if name not in commands:
        close = difflib.get_close_matches(name, list(commands), n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        message = f"unknown command {name!r}; {hint}expected one of {', '.join(commands)}; see `{prog} --help`"
        print(f"{prog}: error: {message}", file=sys.stderr)
        return EXIT_USAGE
    rest = argv[:position] + argv[position + 1 :]
    entry = commands[name]
    try:
        command = _load(entry)
    except Exception as exc:  # noqa: BLE001 - a command module that fails to import, in one line
        _report(f"{prog} {name}", describe_error(exc), exc, DEBUG_OPTION in _options_part(rest))
        return EXIT_USAGE
    return run_command(command, rest, prog=f"{prog} {name}")
