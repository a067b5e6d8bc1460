"""The corpus job's tasks and bad-row modes, by name (no pyarrow), for the parser and :mod:`.compute` alike."""

from __future__ import annotations

__all__ = ["ON_ERROR_MODES", "TASKS"]

#: ``embed``: one vector per text; ``nsp``: P(second sentence follows the first); ``encode``: the graph outputs;
#: ``classify``: label and score per row (the export's classifier); ``tag``: the entities of each row;
#: ``sparse``: the SPLADE weights of each row (an export of a sentence-transformers SparseEncoder folder);
#: ``zero-shot``: the candidate labels of each row ranked by an NLI classifier.
TASKS = ("embed", "nsp", "encode", "classify", "tag", "sparse", "zero-shot")
#: ``stop``: the first bad row stops the job; ``skip``: bad rows go to the rejects file.
ON_ERROR_MODES = ("stop", "skip")
