"""``python -m bertonnx_export``: same as ``bertonnx export``."""

from .cli import main

raise SystemExit(main())
