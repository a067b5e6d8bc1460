"""``python -m bertonnx_benchmarks DIR [options]``."""

from .cli import main

raise SystemExit(main())
