"""``python -m benchmarks DIR [options]``."""

from .cli import main

raise SystemExit(main())
