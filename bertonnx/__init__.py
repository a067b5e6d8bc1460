"""bertonnx: BERT and its fine-tuned heads on onnxruntime, without PyTorch.

Load a directory written by ``bertonnx export`` with :class:`BertOnnx` and call it on texts or sentence
pairs: ``embed``, ``nsp``, ``classify``, ``rerank``, ``fill_mask``, ``tag``, ``answer`` (the tasks the
export's head allows, ``model.tasks``; others raise :class:`HeadMissingError`). Running a model needs only
onnxruntime, tokenizers and numpy (plus OpenVINO for the optional ``bf16`` variant, imported only when that
variant is loaded); ``onnx`` is imported only to read a graph for ``inspect`` and ``walkthrough``. It never
imports torch, transformers or optimum.

Every way into the model runs one path::

    BertOnnx.embed / nsp / classify / rerank / fill_mask / tag / answer  |  serve  |  corpus (compute.py)
                               |
                               +--> driver: tokenize (windows.py: overlapping windows for tag and answer)
                                            -> plan length-sorted batches (BatchLimits)
                                            -> session.run(only the task's outputs)
                                            -> task.postprocess -> answers in the caller's order
                                                     |
                     tasks/: embed (pooling, normalisation) · nsp (softmax) · classify and rerank
                     (softmax / sigmoid / identity, labels) · fill_mask (MLM head graph on the [MASK]
                     positions only) · tag (entities with character offsets, windows merged) · answer
                     (spans from start/end logits, best over windows) · graph (the raw outputs)

A task (:mod:`bertonnx.tasks`) names the graph outputs it needs and turns a batch's raw outputs into
answers; the driver (:mod:`bertonnx.driver`) is the one sort -> batch -> run -> reorder loop. The server's
engine runs rows of different requests and tasks in one batch (``driver.run_mixed``), so each answer
equals the offline one.
"""

from .errors import HeadMissingError, InputTooLongError, ModelDirectoryError, RandomWeightsWarning, VariantMissingError
from .model import BertOnnx
from .options import RuntimeOptions
from .outputs import BertOutput, Tokenized
from .version import __version__

__all__ = [
    "BertOnnx",
    "BertOutput",
    "HeadMissingError",
    "InputTooLongError",
    "ModelDirectoryError",
    "RandomWeightsWarning",
    "RuntimeOptions",
    "Tokenized",
    "VariantMissingError",
    "__version__",
]
