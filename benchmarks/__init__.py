"""Benchmarks of bertonnx against PyTorch: latency grid, runtime overhead, batching, cold start, roofline.

Run ``bertonnx bench DIR``, ``python -m bertonnx_benchmarks DIR``, or ``python -m benchmarks DIR`` from the
repository root. Every runner (PyTorch eager and each ONNX variant) runs in its own fresh process with the
same thread budget, one after another, and is checked against the PyTorch reference before it is timed.
Importing this package is cheap: torch is imported only in the processes that need it (the reference, the
torch runner and the torch cold-start probe).
"""
