"""Run a variant on OpenVINO: the ``bf16`` variant, bf16 matrix products on CPUs that have them.

The ``bf16`` variant is the exported graph saved as OpenVINO IR (``model_bf16.xml`` + ``.bin``, weights
stored as fp16) and compiled with ``INFERENCE_PRECISION_HINT=bf16``. On a CPU with AVX512-BF16 or AMX,
OpenVINO then multiplies in bf16 and accumulates in fp32; elsewhere it silently computes in fp32 (exact but
no faster) — :attr:`OpenVinoSession.inference_precision` says which one the CPU got.

OpenVINO is optional (``pip install 'bertonnx[openvino]'``); this module imports it only when such a
variant is loaded. :class:`OpenVinoSession` has the subset of onnxruntime's ``InferenceSession`` API the
runtime uses (``run``, ``get_inputs``, ``get_outputs``), so the rest of the package does not care which
engine runs the graph.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .extras import install_hint
from .options import RuntimeOptions

__all__ = ["OPENVINO_INSTALL_HINT", "OpenVinoSession", "openvino_version"]

OPENVINO_INSTALL_HINT = install_hint("openvino")
CPU_DEVICE = "CPU"
#: Latency mode with one stream: one request uses every thread (the same budget onnxruntime gets).
_BASE_CONFIG = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}


@dataclass(frozen=True)
class IoName:
    """A graph input or output, named like onnxruntime's ``NodeArg``."""

    name: str


def _import_openvino(purpose: str) -> Any:
    try:
        import openvino
    except ImportError:
        raise ImportError(
            f"{purpose} runs on OpenVINO, which is not installed. Install it with {OPENVINO_INSTALL_HINT}, "
            "or pick an onnxruntime variant (fp32, optimized, int8)."
        ) from None
    return openvino


def openvino_version() -> str | None:
    """OpenVINO's version, or ``None`` when it is not installed."""
    try:
        import openvino
    except ImportError:
        return None
    return str(openvino.__version__)


class OpenVinoSession:
    """A compiled OpenVINO model behind onnxruntime's session interface.

    Thread-safe: each call borrows an infer request from a pool (creating one when all are busy) and
    returns it afterwards; outputs are copied out of the request before it is returned.
    """

    def __init__(self, path: Path, options: RuntimeOptions, precision: str, *, purpose: str = "this variant") -> None:
        """Compile ``path`` (OpenVINO IR or ONNX) for the CPU.

        Args:
            path: the model file.
            options: ``threads`` becomes ``INFERENCE_NUM_THREADS``; onnxruntime-only settings (spinning,
                arena, memory patterns, graph optimization level) do not apply.
            precision: OpenVINO's inference precision hint, e.g. ``bf16`` or ``f32``.
            purpose: how the import error names what needed OpenVINO.

        Raises:
            ImportError: OpenVINO is not installed (the message names the install command).
        """
        openvino = _import_openvino(purpose)
        core = openvino.Core()
        config = {
            **_BASE_CONFIG,
            "INFERENCE_NUM_THREADS": options.intra_op_threads,
            "INFERENCE_PRECISION_HINT": precision,
        }
        self._compiled = core.compile_model(str(path), CPU_DEVICE, config)
        self._inputs = [IoName(port.get_any_name()) for port in self._compiled.inputs]
        self._outputs = [IoName(port.get_any_name()) for port in self._compiled.outputs]
        self._idle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        hint = self._compiled.get_property("INFERENCE_PRECISION_HINT")
        #: The precision OpenVINO chose for this CPU: ``bf16`` where supported, else ``f32``.
        self.inference_precision = str(hint.get_type_name() if hasattr(hint, "get_type_name") else hint)

    def get_inputs(self) -> list[IoName]:
        """The graph inputs, in graph order."""
        return list(self._inputs)

    def get_outputs(self) -> list[IoName]:
        """The graph outputs, in graph order."""
        return list(self._outputs)

    def run(
        self, output_names: Sequence[str] | None, feeds: Mapping[str, np.ndarray], run_options: object = None
    ) -> list[np.ndarray]:
        """Run one batch; return the named outputs (all outputs for ``None``) as fresh numpy arrays.

        ``run_options`` (onnxruntime's) is accepted for the same signature and not used.
        """
        names = [o.name for o in self._outputs] if output_names is None else list(output_names)
        try:
            request = self._idle.get_nowait()
        except queue.Empty:
            request = self._compiled.create_infer_request()
        try:
            result = request.infer(dict(feeds), share_outputs=False)  # outputs are copies, safe to hand out
            return [np.asarray(result[name]) for name in names]
        finally:
            self._idle.put(request)
