"""``bertonnx serve``: BERT over HTTP, batched across requests (the ``bertonnx[serve]`` extra).

Speaks Text Embeddings Inference (``/embed``, ``/predict``, ``/encode``, ``/tokenize``), OpenAI
(``/v1/embeddings``) and KServe v2 / Triton HTTP (``/v2/...``, JSON and binary tensors), with one scheduler
cutting batches from every request by the runtime's token budget. Every answer equals what
:class:`bertonnx.BertOnnx` gives offline. ``import bertonnx`` never imports this package or its
dependencies (FastAPI, uvicorn, pydantic, prometheus-client).

Modules, in the order a request passes them: :mod:`.middleware` (accounting, auth, body limit),
:mod:`.app` (routes) with :mod:`.protocol` (bodies) and :mod:`.kserve` (tensors), :mod:`.scheduler`
(queue and batches), :mod:`.engine` (one run on ``BertOnnx``); around them :mod:`.options`,
:mod:`.errors`, :mod:`.metrics`, :mod:`.server` (uvicorn, draining), :mod:`.arguments` and :mod:`.cli`
(:mod:`.ray_serve`: the same app as Ray Serve replicas).
"""

from __future__ import annotations

from ..extras import install_hint, require_extra

INSTALL_HINT = install_hint("serve")
require_extra("serve", "bertonnx.serve (`bertonnx serve`)")

from .app import create_app  # noqa: E402 - after the dependency check
from .options import ServeOptions  # noqa: E402
from .server import run_server  # noqa: E402

__all__ = ["INSTALL_HINT", "ServeOptions", "create_app", "run_server"]
