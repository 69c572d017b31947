"""The version of storyeval: the one place it is written (pyproject.toml reads it from here)."""

__version__ = "0.12.0"
