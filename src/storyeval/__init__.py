"""storyeval: a workbench for evaluating open-ended story generation.

The top-level package stays light: importing it never imports torch, transformers or spaCy.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("storyeval")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.1.0"

__all__ = ["__version__"]
