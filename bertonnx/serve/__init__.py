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

The names below are loaded on first use, after the extra is checked: importing a module of this package
runs no web framework, so the command's parser (:mod:`.arguments`, :mod:`.cli`) and the serving core
(:mod:`.scheduler`, :mod:`.engine`) import without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..extras import install_hint, require_extra

if TYPE_CHECKING:
    from .app import create_app
    from .options import ServeOptions
    from .server import run_server

INSTALL_HINT = install_hint("serve")
_LAZY = {"create_app": ".app", "ServeOptions": ".options", "run_server": ".server"}

__all__ = ["INSTALL_HINT", "ServeOptions", "create_app", "run_server"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_extra("serve", "bertonnx.serve (`bertonnx serve`)")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
