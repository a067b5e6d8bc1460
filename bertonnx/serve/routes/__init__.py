"""The server's routes, one module per protocol: :mod:`.tei` (Text Embeddings Inference), :mod:`.openai`,
:mod:`.kserve` (KServe v2 / Triton), :mod:`.tasks` (the heads' own routes: fill-mask, tag, answer, choose) and
:mod:`.server` (health, readiness, info, metrics). Each turns its protocol's body into a task and its inputs,
runs :func:`bertonnx.serve.pipeline.run`, and formats the answers in its protocol's shape."""
