"""bertonnx: BERT's encoder, pooler and next-sentence head on onnxruntime, without PyTorch.

Load a directory written by ``bertonnx export`` with :class:`BertOnnx` and call it on texts or sentence
pairs. Running a model needs only onnxruntime, tokenizers and numpy (plus OpenVINO for the optional ``bf16``
variant, imported only when that variant is loaded); ``onnx`` is imported only to read a graph for
``inspect`` and ``walkthrough``. It never imports torch, transformers or optimum.
"""

from .errors import HeadMissingError, ModelDirectoryError, RandomWeightsWarning
from .model import BertOnnx
from .options import RuntimeOptions
from .outputs import BertOutput, Tokenized
from .version import __version__

__all__ = [
    "BertOnnx",
    "BertOutput",
    "HeadMissingError",
    "ModelDirectoryError",
    "RandomWeightsWarning",
    "RuntimeOptions",
    "Tokenized",
    "__version__",
]
