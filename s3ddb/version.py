"""The package version (read by pyproject.toml)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
