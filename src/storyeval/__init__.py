"""storyeval: a workbench for evaluating open-ended story generation.

What most users import is here, loaded on first use (importing storyeval never imports torch,
transformers or spaCy)::

    import storyeval as se

    stories = se.read_stories("stories.jsonl")
    run = se.score_stories(stories, ["bleu", "distinct2"])
    table = se.correlate(...)

Everything else lives in its part (``storyeval.metrics``, ``storyeval.meta``,
``storyeval.judge``, ...; the page "How storyeval is built" draws them).
"""

from __future__ import annotations

import importlib
from typing import Any

from storyeval._version import __version__

#: The public face: name -> the module that defines it (imported on first use).
_EXPORTS = {
    "Story": "storyeval.corpus",
    "Judgment": "storyeval.corpus",
    "Score": "storyeval.corpus",
    "read_stories": "storyeval.corpus",
    "read_judgments": "storyeval.corpus",
    "read_scores": "storyeval.corpus",
    "write_stories": "storyeval.corpus",
    "write_scores": "storyeval.corpus",
    "prompt_id": "storyeval.corpus",
    "Signature": "storyeval.base.signature",
    "available_metrics": "storyeval.metrics.registry",
    "get_metric": "storyeval.metrics.registry",
    "metric": "storyeval.metrics.function",
    "Scores": "storyeval.metrics.function",
    "ScoringContext": "storyeval.metrics.context",
    "score_stories": "storyeval.metrics.pipeline",
    "score_file": "storyeval.metrics.files",
    "correlate": "storyeval.meta",
    "build_meta_table": "storyeval.meta",
    "judge_stories": "storyeval.judge.core",
    "generate_stories": "storyeval.generate",
    "DecodingConfig": "storyeval.generate",
    "perturb_stories": "storyeval.perturb",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    """The public names, imported from their module on first use."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'storyeval' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
