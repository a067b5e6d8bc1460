"""Every exit code of every ``bertonnx`` command, in one place.

0 and 2 mean the same for every command (success; bad usage or input, with one line on stderr naming the
problem and the fix), 70 is a bug, 130 an interrupt and 141 a closed stdout. 1, 3, 4 and 5 carry a meaning of
the command that returns them; each has its own name here so a caller can test for it by name.
"""

from __future__ import annotations

__all__ = [
    "EXIT_ABANDONED",
    "EXIT_BREACH",
    "EXIT_BROKEN_PIPE",
    "EXIT_GATE_FAILED",
    "EXIT_HUB_UNREACHABLE",
    "EXIT_INCORRECT",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_LOAD_FAILED",
    "EXIT_OK",
    "EXIT_STARTUP_FAILED",
    "EXIT_USAGE",
    "EXIT_VARIANT_REFUSED",
]

EXIT_OK = 0
#: Bad usage or a failure the user can fix (a bad option, file, directory, input, or a missing extra).
EXIT_USAGE = 2
#: An unexpected exception: a bug (sysexits' EX_SOFTWARE).
EXIT_INTERNAL = 70
#: Ctrl-C or SIGTERM (shells report a process killed by SIGINT as 128 + 2).
EXIT_INTERRUPTED = 130
#: Shells report a process killed by SIGPIPE as 128 + 13; a closed stdout ends a command the same way.
EXIT_BROKEN_PIPE = 141

# -- codes whose meaning belongs to one command ---------------------------------------------------------

#: ``bertonnx parity``: a variant breached its tolerance.
EXIT_BREACH = 1
#: ``bertonnx serve``: the drain timeout passed with requests still in flight; they were cut off.
EXIT_ABANDONED = 1
#: ``bertonnx export``: the written graph failed the parity gate against PyTorch (nothing was kept).
EXIT_GATE_FAILED = 3
#: ``bertonnx bench``: a timed runner gave wrong answers (its figures are not reported as valid).
EXIT_INCORRECT = 3
#: ``bertonnx serve``: the model could not be loaded (the reason is logged and was served by ``/ready``).
EXIT_LOAD_FAILED = 3
#: ``bertonnx export``: the Hugging Face hub could not be reached and nothing was cached.
EXIT_HUB_UNREACHABLE = 4
#: ``bertonnx serve``: uvicorn could not start listening (a race after the CLI's own address check).
EXIT_STARTUP_FAILED = 4
#: ``bertonnx export``: a lossy variant named by ``--variants`` (int8, bf16) missed its parity gate and was not
#: written; the variants that passed were published (without ``--variants`` the same refusal is a note, exit 0).
EXIT_VARIANT_REFUSED = 5
