"""Named warnings of the meta-evaluation package.

A degenerate input (too few pairs, a constant column, no prompt with two systems...) never
produces an invented number: the estimate is ``nan`` and one of these warnings says why, so a
caller can filter them (``warnings.simplefilter("error", DegenerateInputWarning)``) or
collect them for a report.
"""

from __future__ import annotations

import warnings


class MetaEvaluationWarning(UserWarning):
    """Base class of the warnings raised by :mod:`storyeval.meta`."""


class DegenerateInputWarning(MetaEvaluationWarning):
    """A statistic is undefined for the data given (too few items, no variance...); it is nan."""


class BootstrapWarning(MetaEvaluationWarning):
    """Some bootstrap replicates were undefined and were left out of the interval."""


class MixedSignatureWarning(MetaEvaluationWarning):
    """The scores of one metric carry more than one signature (they were computed differently)."""


class DataCoverageWarning(MetaEvaluationWarning):
    """Items, raters or pairs were dropped because they lack a value they need."""


def warn(category: type[MetaEvaluationWarning], message: str) -> None:
    """Emit ``message`` as a warning of ``category`` pointing at the caller's caller."""
    warnings.warn(message, category, stacklevel=3)
