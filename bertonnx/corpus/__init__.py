"""Corpus jobs: a file of texts (or pairs) in, one Parquet row of results per input row out.

``bertonnx batch`` runs the job on this machine (:mod:`.job`) or on a Ray cluster (:mod:`.ray_job`);
both read rows with :mod:`.readers`, compute them with :mod:`.compute` and give the same rows with the
same ``id`` (the input row number). Users who already hold a Ray Dataset map :class:`BertOnnxPredictor`
over it themselves.

This subpackage needs the ``batch`` extra (pyarrow, tqdm); the Ray path needs the ``ray`` extra. The core
``bertonnx`` package never imports it. The names below are loaded on first use, after the extra is
checked, so the command's parser (:mod:`.cli`) imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..extras import require_extra

if TYPE_CHECKING:
    from .compute import TASKS, TaskOptions, output_schema
    from .errors import BadRowError, CorpusFileError
    from .predictor import BertOnnxPredictor
    from .readers import read_metadata, read_output

_LAZY = {
    "TASKS": ".compute",
    "TaskOptions": ".compute",
    "output_schema": ".compute",
    "BadRowError": ".errors",
    "CorpusFileError": ".errors",
    "BertOnnxPredictor": ".predictor",
    "read_metadata": ".readers",
    "read_output": ".readers",
}

__all__ = [
    "TASKS",
    "BadRowError",
    "BertOnnxPredictor",
    "CorpusFileError",
    "TaskOptions",
    "output_schema",
    "read_metadata",
    "read_output",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_extra("batch", "bertonnx.corpus (`bertonnx batch`)")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
