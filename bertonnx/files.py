"""Files the commands read and write: one line per problem, naming the file and the fix; atomic writes.

Text files hold one text per line. A line ends at ``\\n`` (a ``\\r`` before it is dropped, so Windows
files read the same), and a final newline ends the last line rather than starting an empty one. Every
line is kept: a blank or whitespace-only line is the empty text (the model reads it as ``[CLS] [SEP]``),
so row ``i`` of what a command writes always belongs to line ``i`` of its input. Other Unicode line
separators (U+2028, form feed ...) stay inside their line. A UTF-8 byte-order mark at the start is
dropped.

Outputs are checked before any work starts (the folder must exist and take a new file), then written to
a temporary file beside the target and renamed over it, so an interrupted write never leaves a partial
file under the target's name.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from .command import CommandError

__all__ = ["STDIN", "blank_lines", "check_output_dir", "check_output_file", "read_lines", "read_text", "write_atomic"]

#: The file name that means standard input.
STDIN = "-"
_BOM = "\ufeff"


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CommandError(
            f"{name} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); convert it to UTF-8, "
            f"e.g. `iconv -f latin1 -t utf-8 FILE > FILE.utf8`"
        ) from None


def read_text(path: str, option: str, *, what: str = "a text file") -> str:
    """The whole text of a UTF-8 file (``-`` for stdin), a leading byte-order mark removed, nothing else changed.

    Args:
        path: the file, or ``-``.
        option: how the command line named it, for messages (e.g. ``--context-file``).
        what: what the file should be, for the message when ``path`` is a directory.

    Raises:
        CommandError: the file is missing, a directory, unreadable, or not UTF-8 (the message names it).
    """
    name = "standard input" if path == STDIN else f"{option} {path}"
    if path == STDIN:
        data = sys.stdin.buffer.read()
    else:
        target = Path(path).expanduser()
        if target.is_dir():
            raise CommandError(f"{name} is a directory; expected {what}")
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise CommandError(f"{name} does not exist; check the path") from None
        except PermissionError:
            raise CommandError(f"{name} is not readable; check its permissions (e.g. `chmod u+r {path}`)") from None
        except OSError as exc:
            raise CommandError(f"cannot read {name}: {exc.strerror or exc}") from None
    return _decode(data, name).removeprefix(_BOM)


def read_lines(path: str, option: str) -> list[str]:
    """The lines of a UTF-8 text file (``-`` for stdin), blank lines included (see the module docstring).

    Args:
        path: the file, or ``-``.
        option: how the command line named it, for messages (e.g. ``--input``).

    Returns:
        One str per line, in order.

    Raises:
        CommandError: the file is missing, a directory, unreadable, or not UTF-8 (the message names it).
    """
    text = read_text(path, option, what="a text file with one text per line")
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":  # the final newline ends the last line
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def blank_lines(lines: list[str], shown: int = 5) -> str | None:
    """``"lines 3, 7"`` naming the blank lines (1-based, at most ``shown`` of them), or ``None``."""
    numbers = [i + 1 for i, line in enumerate(lines) if not line.strip()]
    if not numbers:
        return None
    listed = ", ".join(map(str, numbers[:shown])) + (
        f" and {len(numbers) - shown} more" if len(numbers) > shown else ""
    )
    return f"line{'s' if len(numbers) > 1 else ''} {listed}"


def _probe_writable(folder: Path, name: str) -> None:
    """Create and remove a file in ``folder``: the only check that also sees read-only mounts."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".bertonnx-probe-", dir=folder)
    except OSError as exc:
        raise CommandError(
            f"{name}: cannot write in {folder} ({exc.strerror or exc}); choose a folder you can write to"
        ) from None
    os.close(fd)
    os.unlink(probe)


def check_output_file(path: str, option: str) -> Path:
    """Check, before any work, that ``path`` can be written: its folder exists and is writable, and it
    is not a directory.

    Returns:
        The target path (``~`` expanded).

    Raises:
        CommandError: it cannot be written; the message names the file and the fix.
    """
    target = Path(path).expanduser()
    name = f"{option} {path}"
    if target.is_dir():
        raise CommandError(f"{name} is a directory; give a file name, e.g. {target / 'vectors.npy'}")
    folder = target.absolute().parent
    if not folder.exists():
        raise CommandError(f"{name}: the folder {folder} does not exist; create it (`mkdir -p {folder}`) first")
    if not folder.is_dir():
        raise CommandError(f"{name}: {folder} is not a folder; choose a path inside a folder")
    _probe_writable(folder, name)
    return target


def check_output_dir(path: str | Path, option: str, *, name: str | None = None) -> Path:
    """Check, before any work, that the folder ``path`` exists or can be created, and takes new files.

    Args:
        path: the folder.
        option: how the command line named it, for messages (e.g. ``--out``).
        name: what messages call it instead of ``"{option} {path}"``.

    Returns:
        The folder (``~`` expanded); it is not created here.

    Raises:
        CommandError: it is a file, or its nearest existing folder cannot be written.
    """
    target = Path(path).expanduser()
    name = name or f"{option} {path}"
    if target.exists() and not target.is_dir():
        raise CommandError(f"{name} is a file; expected a folder (give a new name, or remove the file)")
    existing = target.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise CommandError(f"{name}: {existing} is a file, so no folder can be made there; choose another path")
    _probe_writable(existing, name)
    return target


def write_atomic(target: Path, write: Callable[[BinaryIO], None], option: str) -> None:
    """Write ``target`` through ``write(handle)`` into a temporary file beside it, then rename it over.

    Raises:
        CommandError: the write failed (disk full, folder gone ...); ``target`` is untouched and no
            temporary file is left.
    """
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.absolute().parent)
    except OSError as exc:
        raise CommandError(f"cannot write {option} {target}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise CommandError(f"cannot write {option} {target}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
