"""Corpus jobs: a file of texts (or pairs) in, one Parquet row of results per input row out.

``bertonnx batch`` runs the job on this machine (:mod:`.job`) or on a Ray cluster (:mod:`.ray_job`);
both read rows with :mod:`.readers`, compute them with :mod:`.compute` and give the same rows with the
same ``id`` (the input row number). Users who already hold a Ray Dataset map :class:`BertOnnxPredictor`
over it themselves.

This subpackage needs the ``batch`` extra (pyarrow, tqdm); the Ray path needs the ``ray`` extra. The core
``bertonnx`` package never imports it.
"""

from __future__ import annotations

from ..extras import require_extra

require_extra("batch", "bertonnx.corpus (`bertonnx batch`)")

from .compute import TASKS, TaskOptions, output_schema  # noqa: E402 - after the extra check
from .errors import BadRowError, CorpusFileError  # noqa: E402
from .predictor import BertOnnxPredictor  # noqa: E402
from .readers import read_output  # noqa: E402

__all__ = [
    "TASKS",
    "BadRowError",
    "BertOnnxPredictor",
    "CorpusFileError",
    "TaskOptions",
    "output_schema",
    "read_output",
]
