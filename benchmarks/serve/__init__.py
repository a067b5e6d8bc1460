"""The serving benchmark: ``bertonnx serve`` under load against offline ``BertOnnx`` on the same requests.

``python -m benchmarks.serve DIR`` (installed: ``python -m bertonnx_benchmarks.serve``, or
``bertonnx bench-serve DIR``); see :mod:`.cli` for the sections and ``benchmarks/SERVING.md`` for the latest
results. Importing this package is cheap: the server, generator and offline runs are separate processes.
"""
