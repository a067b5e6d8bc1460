"""How every command runs: its own parser, options anywhere, and one line per expected failure.

Each command (the ``bertonnx`` subcommands and the extras' entry points ``python -m bertonnx_export`` and
``python -m bertonnx_benchmarks``) is a :class:`Command` run by :func:`run_command`, which

- parses with ``parse_intermixed_args``, so options may come before, between or after the positional
  arguments, as users type them (``bertonnx embed DIR --pooling mean "some text"``). argparse cannot do
  that through subparsers, hence one parser per command and a dispatcher (:func:`dispatch`) that picks
  the command by name;
- checks the command's extra before running it (:func:`bertonnx.extras.require_extra`), so a
  runtime-only install gets the install commands instead of a traceback;
- turns every expected failure into one line on stderr naming the problem and the fix, with exit code 2
  (or the :class:`CommandError`'s own code): bad option values, bad files and directories, missing
  extras, bad input values. ``--debug`` adds the traceback. An unexpected exception is a bug: one line
  saying so, exit 70, and the traceback with ``--debug``.

Adding a command: write ``add_arguments(parser)`` and ``run(args) -> int``, wrap them in a
:class:`Command`, and list it (or its ``"module:ATTRIBUTE"``) in :data:`bertonnx.cli.COMMANDS`.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from .extras import extra_of_module, install_hint, require_extra

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "ArgumentParser",
    "Command",
    "CommandError",
    "Delegate",
    "dispatch",
    "run_command",
    "run_delegate",
]

EXIT_OK = 0
#: Bad usage or a failure the user can fix (a bad option, file, directory, input, or a missing extra).
EXIT_USAGE = 2
#: An unexpected exception: a bug (sysexits' EX_SOFTWARE).
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
#: Shells report a process killed by SIGPIPE as 128 + 13; a closed stdout ends a command the same way.
EXIT_BROKEN_PIPE = 141
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
    """An ``argparse.ArgumentParser`` whose usage errors raise :class:`CommandError` (one line, exit 2)."""

    def error(self, message: str) -> NoReturn:
        raise CommandError(f"{message}; see `{self.prog} --help`")


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
    """

    name: str
    summary: str
    add_arguments: Callable[[ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    extra: str | None = None
    description: str | None = None
    epilog: str | None = None

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


@dataclass(frozen=True)
class Delegate:
    """A command that parses its own arguments: ``module.main(argv)``, run after its extra is checked
    and with the same one-line errors (for a command whose parser needs its extra to be built).

    Attributes:
        name: the word after ``bertonnx``.
        summary: one line for ``bertonnx --help``.
        module: the module whose ``main(argv) -> int`` runs the command.
        extra: the ``bertonnx`` extra the module needs (checked before it is imported).
    """

    name: str
    summary: str
    module: str
    extra: str | None = None


def _options_part(argv: Sequence[str]) -> list[str]:
    """The arguments before a ``--`` (after it, everything is positional)."""
    argv = list(argv)
    return argv[: argv.index("--")] if "--" in argv else argv


def _describe(exc: BaseException) -> str:
    """One line naming the problem (and the fix, where the exception does not already)."""
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
        _report(prog, _describe(exc), exc, debug)
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
        try:
            args = command.parser(name).parse_intermixed_args(argv)
        except SystemExit as exc:  # --help printed the usage
            return exc.code if isinstance(exc.code, int) else EXIT_OK
        if command.extra is not None:
            require_extra(command.extra, f"`{name}`")
        return int(command.run(args))

    return _guarded(name, DEBUG_OPTION in _options_part(argv), work)


def run_delegate(delegate: Delegate, argv: Sequence[str], prog: str) -> int:
    """Check ``delegate``'s extra, then run its module's ``main(argv)`` with one-line errors."""

    def work() -> int:
        if delegate.extra is not None:
            require_extra(delegate.extra, f"`{prog}`")
        main = importlib.import_module(delegate.module).main
        try:
            return int(main(list(argv)))
        except SystemExit as exc:  # its parser printed --help or a usage error
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE

    return _guarded(prog, DEBUG_OPTION in _options_part(argv), work)


def _load(entry: Command | str) -> Command:
    """A command, importing ``"module:ATTRIBUTE"`` entries (commands of the extras) only when asked for."""
    if isinstance(entry, Command):
        return entry
    module_name, _, attribute = entry.partition(":")
    command = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(command, Command):
        raise TypeError(f"{entry} is a {type(command).__name__}, expected a bertonnx.command.Command")
    return command


def _summary(entry: Command | Delegate | str) -> str:
    if isinstance(entry, Delegate):
        return entry.summary + (f" (needs the {entry.extra} extra)" if entry.extra else "")
    try:
        command = _load(entry)
    except Exception as exc:  # noqa: BLE001 - one broken command must not hide the others
        return f"(cannot be loaded: {_describe(exc)})"
    return command.summary + (f" (needs the {command.extra} extra)" if command.extra else "")


def _overview(prog: str, description: str, commands: Mapping[str, Command | Delegate | str]) -> str:
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
        "problem and the fix), 70 a bug; export, parity and bench add their own (see their --help).",
    ]
    return "\n".join(lines)


def dispatch(
    commands: Mapping[str, Command | Delegate | str],
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
    if isinstance(entry, Delegate):
        return run_delegate(entry, rest, f"{prog} {name}")
    try:
        command = _load(entry)
    except Exception as exc:  # noqa: BLE001 - a command module that fails to import, in one line
        _report(f"{prog} {name}", _describe(exc), exc, DEBUG_OPTION in _options_part(rest))
        return EXIT_USAGE
    return run_command(command, rest, prog=f"{prog} {name}")
