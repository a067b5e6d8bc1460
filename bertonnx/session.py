"""Build the onnxruntime session in one place, with the thread, spinning and memory settings of
:class:`~bertonnx.options.RuntimeOptions`, and pick each variant's engine."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnxruntime as ort

from .options import RuntimeOptions

__all__ = ["GRAPH_OPTIMIZATION_LEVELS", "build_session", "open_variant_session", "release_freed_memory", "run_options"]

CPU_PROVIDER = "CPUExecutionProvider"
GRAPH_OPTIMIZATION_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def build_session(path: Path, options: RuntimeOptions) -> ort.InferenceSession:
    """Create a CPU inference session for the ONNX file at ``path`` with ``options``."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = options.intra_op_threads
    so.inter_op_num_threads = options.inter_op_threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = GRAPH_OPTIMIZATION_LEVELS[options.graph_optimization_level]
    so.enable_cpu_mem_arena = options.enable_cpu_mem_arena
    so.enable_mem_pattern = options.enable_mem_pattern
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if options.allow_spinning else "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "1" if options.allow_spinning else "0")
    return ort.InferenceSession(str(path), sess_options=so, providers=[CPU_PROVIDER])


def run_options(options: RuntimeOptions) -> ort.RunOptions | None:
    """The onnxruntime run options every ``session.run`` gets (``None`` when the defaults do)."""
    if not options.arena_shrinkage:
        return None
    run = ort.RunOptions()
    run.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return run


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None
    return trim


def release_freed_memory() -> bool:
    """Return the heap's free pages to the operating system (glibc ``malloc_trim(0)``).

    Returns:
        Whether it could be done (``False`` where the C library has no ``malloc_trim``).
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def open_variant_session(path: Path, variant: str, options: RuntimeOptions) -> Any:
    """The session for one variant's file on the engine that runs it (``VARIANT_BACKENDS``).

    onnxruntime variants get :func:`build_session`; ``bf16`` gets an
    :class:`~bertonnx.openvino_session.OpenVinoSession` with bf16 precision (OpenVINO imported only then).

    Raises:
        ImportError: the variant runs on OpenVINO, which is not installed (the message names the fix).
    """
    from .manifest import BF16_PRECISION, OPENVINO_BACKEND, VARIANT_BACKENDS

    if VARIANT_BACKENDS.get(variant) == OPENVINO_BACKEND:
        from .openvino_session import OpenVinoSession

        return OpenVinoSession(path, options, BF16_PRECISION, purpose=f"The {variant!r} variant")
    return build_session(path, options)
