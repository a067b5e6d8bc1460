"""The export step: a BERT checkpoint to one verified ONNX model directory (needs ``bertonnx[export]``).

Run it as ``bertonnx export [MODEL] OUTDIR`` or ``python -m bertonnx_export``. It imports torch, transformers and
optimum; the runtime package ``bertonnx`` never imports this package except to dispatch the command.
"""

from .errors import ExportError

__all__ = ["ExportError"]
