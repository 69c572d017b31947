"""storyeval: a workbench for evaluating open-ended story generation.

The top-level package stays light: importing it never imports torch, transformers or spaCy.
"""

from storyeval._version import __version__

__all__ = ["__version__"]
