"""The single source of the package version (read by pyproject.toml and the manifest)."""

__version__ = "0.1.0"
