"""Runtime settings shared by every engine: the ``RuntimeOptions`` dataclass and the core count it defaults to.

Defaults: intra-op threads = physical cores (hyper-threads share one core's FMA units, so more threads
than cores only adds contention), one inter-op thread (BERT's graph is a chain), spinning on (lowest
latency for back-to-back calls; turn it off when other work shares the cores), the CPU memory arena on.
Both :mod:`bertonnx.session` (onnxruntime) and :mod:`bertonnx.openvino_session` read these options; this
module imports neither engine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GRAPH_OPTIMIZATION_LEVEL_NAMES", "RuntimeOptions", "physical_cores"]

_CPUINFO = Path("/proc/cpuinfo")
#: onnxruntime's graph optimisation levels by name (mapped to its enum in :mod:`bertonnx.session`).
GRAPH_OPTIMIZATION_LEVEL_NAMES = ("disable", "basic", "extended", "all")


def physical_cores() -> int:
    """Physical cores this process may run on (logical CPUs of the affinity mask, hyper-threads merged).

    Reads ``/proc/cpuinfo`` on Linux (no psutil: the runtime keeps to onnxruntime, tokenizers and numpy);
    elsewhere falls back to the logical CPU count.
    """
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    try:
        text = _CPUINFO.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return max(1, len(allowed))
    cores: set[tuple[str, str]] = set()
    processor, physical, core = -1, "0", None
    for line in [*text.splitlines(), ""]:
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor":
            processor = int(value)
        elif key == "physical id":
            physical = value
        elif key == "core id":
            core = value
        elif not line.strip() and processor >= 0:
            if processor in allowed:
                cores.add((physical, core if core is not None else str(processor)))
            processor, physical, core = -1, "0", None
    return max(1, len(cores) or len(allowed))


#: The most threads one session takes: more than any CPU here has, and far below what onnxruntime's C int holds
#: (10**20 reached it as a binding error).
MAX_THREADS = 1024


@dataclass(frozen=True)
class RuntimeOptions:
    """onnxruntime settings for one model.

    Attributes:
        threads: intra-op threads, 1 to ``MAX_THREADS``; ``None`` = physical cores.
        inter_op_threads: threads running independent graph branches (1 suits BERT's sequential graph).
        allow_spinning: let idle threads spin for the next task (faster back-to-back calls, burns CPU).
        enable_cpu_mem_arena: reuse memory across calls. The arena grows to the largest shape seen and
            never shrinks; disable it for long-running services fed very different shapes.
        enable_mem_pattern: pre-plan allocations for a repeated input shape.
        arena_shrinkage: after each run, the arena frees the memory it took beyond its first chunk (onnxruntime's
            run option ``memory.enable_memory_arena_shrinkage``), so a large batch's memory is not held for
            the next, smaller ones.
        release_memory: after each run, return the heap's free pages to the operating system (glibc's
            ``malloc_trim``; nothing elsewhere). With ``arena_shrinkage`` the resident memory of a process fed
            many shapes then follows the batch being computed instead of growing with each new shape (the
            allocator otherwise keeps freed fragments: onnxruntime #11118, TEI's 6 → 42 GB over 400k calls).
        graph_optimization_level: one of ``GRAPH_OPTIMIZATION_LEVEL_NAMES`` (onnxruntime fuses at load time).
    """

    threads: int | None = None
    inter_op_threads: int = 1
    allow_spinning: bool = True
    enable_cpu_mem_arena: bool = True
    enable_mem_pattern: bool = True
    arena_shrinkage: bool = False
    release_memory: bool = False
    graph_optimization_level: str = "all"

    def __post_init__(self) -> None:
        for name in ("threads", "inter_op_threads"):
            value = getattr(self, name)
            if value is None and name == "threads":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if not 1 <= value <= MAX_THREADS:
                raise ValueError(f"{name} must be between 1 and {MAX_THREADS}, got {value}")
        for name in (
            "allow_spinning",
            "enable_cpu_mem_arena",
            "enable_mem_pattern",
            "arena_shrinkage",
            "release_memory",
        ):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")
        if self.graph_optimization_level not in GRAPH_OPTIMIZATION_LEVEL_NAMES:
            raise ValueError(
                f"graph_optimization_level must be one of {', '.join(GRAPH_OPTIMIZATION_LEVEL_NAMES)}, "
                f"got {self.graph_optimization_level!r}"
            )

    @property
    def intra_op_threads(self) -> int:
        """The resolved intra-op thread count."""
        return self.threads if self.threads is not None else physical_cores()
