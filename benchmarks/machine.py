"""What the numbers were measured on: CPU, ISA flags, cores, threads and package versions.

Read from ``/proc/cpuinfo`` and package metadata only: nothing here imports torch or onnxruntime.
"""

from __future__ import annotations

import datetime as dt
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
#: ISA extensions that decide which GEMM kernels run (fp32 FMA width, int8 VNNI, bf16, AMX tiles).
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile")
PACKAGES = ("bertonnx", "onnxruntime", "torch", "transformers", "numpy", "tokenizers", "onnx", "optimum")


def _cpuinfo_field(text: str, key: str) -> str | None:
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key:
            return value.strip()
    return None


def cpu_facts() -> dict[str, Any]:
    """CPU model name, ISA flags of interest (present or not), logical CPUs and physical cores."""
    from bertonnx.options import physical_cores

    try:
        text = CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    flags = set((_cpuinfo_field(text, "flags") or "").split())
    return {
        "cpu_model": _cpuinfo_field(text, "model name") or platform.processor() or "unknown",
        "isa_flags": {flag: flag in flags for flag in ISA_FLAGS},
        "logical_cpus": text.count("\nprocessor") + text.startswith("processor"),
        "physical_cores": physical_cores(),
        "platform": platform.platform(),
    }


def versions() -> dict[str, str | None]:
    """Installed versions of the packages that shape the numbers, and Python's."""
    found: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def now_utc() -> str:
    """ISO-8601 timestamp, UTC, to the second."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()
