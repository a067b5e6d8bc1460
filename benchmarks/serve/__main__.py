"""``python -m benchmarks.serve DIR [options]`` (installed: ``python -m bertonnx_benchmarks.serve``)."""

from .cli import main

raise SystemExit(main())
