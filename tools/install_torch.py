"""Install PyTorch's CPU build into the running Python before anything can pull in a CUDA build.

``python tools/install_torch.py [--pin torch==2.13.0] [--index URL] [--timeout S] [--dry-run]``

On Linux, PyPI's ``torch`` wheel is the CUDA build (several GB with its ``nvidia-*`` dependencies);
PyTorch's own CPU index (``--index``, default https://download.pytorch.org/whl/cpu) serves the same
release as ``+cpu``, about 190 MB. This script probes that index with a short timeout and installs the
pin from it when it answers; otherwise it installs the plain pin with pip's own settings (where pip is
told of a local CPU wheel, as on this project's machines, that is the one it gets). Then it prints which
build was installed. ``--dry-run`` prints the pip command instead of running it. ``make setup`` calls it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import urllib.error
import urllib.request

DEFAULT_PIN = "torch==2.13.0"
DEFAULT_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 5.0
REPORT = "import torch; print(torch.__version__, torch.version.cuda or 'none')"


def reachable(index: str, timeout: float) -> bool:
    """Whether ``index`` answers a request for its ``torch/`` page within ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=timeout) as response:
            return 200 <= int(response.status) < 300
    except (OSError, ValueError):  # URLError, timeouts, refused connections, a malformed URL
        return False


def pip_command(pin: str, index: str | None) -> list[str]:
    """The pip command installing ``pin``, from ``index`` when given."""
    command = [sys.executable, "-m", "pip", "install", "--quiet", pin]
    return [*command, "--index-url", index] if index else command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="install_torch", description=__doc__.splitlines()[0])
    parser.add_argument("--pin", default=DEFAULT_PIN, help=f"requirement to install (default {DEFAULT_PIN})")
    parser.add_argument("--index", default=DEFAULT_INDEX, help="PyTorch's CPU wheel index ('' to skip it)")
    parser.add_argument("--timeout", type=float, default=PROBE_TIMEOUT_S, help="probe timeout in seconds")
    parser.add_argument("--dry-run", action="store_true", help="print the pip command, do not run it")
    args = parser.parse_args(argv)
    use_index = bool(args.index) and reachable(args.index, args.timeout)
    if use_index:
        print(f"install_torch: {args.index} answers; installing {args.pin} (CPU build) from it", flush=True)
    else:
        print(
            f"install_torch: PyTorch's CPU index ({args.index or 'skipped'}) is not reachable; installing {args.pin} "
            "with pip's own settings (a local CPU wheel where pip is given one; from PyPI on Linux, the CUDA build)",
            flush=True,
        )
    command = pip_command(args.pin, args.index if use_index else None)
    if args.dry_run:
        print(" ".join(command))
        return 0
    subprocess.run(command, check=True)
    version, cuda = subprocess.run(
        [sys.executable, "-c", REPORT], check=True, capture_output=True, text=True
    ).stdout.split()
    build = "CPU build" if cuda == "none" else f"CUDA {cuda} build (several GB; see the README to get the CPU one)"
    print(f"install_torch: torch {version} installed, {build}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
