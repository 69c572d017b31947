"""Exceptions and warnings raised by storyeval.

Every error a user can cause derives from :class:`StoryevalError`, so the CLI can print a
one-line message and exit with status 2 instead of a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class StoryevalError(Exception):
    """Base class for errors caused by the user's input or environment."""


class StoryevalWarning(UserWarning):
    """Base class of every warning storyeval issues (filter them all with
    ``warnings.simplefilter("ignore", StoryevalWarning)``)."""


class MetaEvaluationWarning(StoryevalWarning):
    """Base class of the warnings of statistics (meta-evaluation, study analysis).

    A degenerate input (too few pairs, a constant column, no prompt with two systems...) never
    produces an invented number: the estimate is ``nan`` and one of these warnings says why, so
    a caller can filter them (``warnings.simplefilter("error", DegenerateInputWarning)``) or
    collect them for a report.
    """


class DegenerateInputWarning(MetaEvaluationWarning):
    """A statistic is undefined for the data given (too few items, no variance...); it is nan."""


class BootstrapWarning(MetaEvaluationWarning):
    """Some bootstrap replicates were undefined and were left out of the interval."""


class MixedSignatureWarning(MetaEvaluationWarning):
    """The scores of one metric carry more than one signature (they were computed differently)."""


class DataCoverageWarning(MetaEvaluationWarning):
    """Items, raters or pairs were dropped because they lack a value they need."""


def warn(category: type[StoryevalWarning], message: str, *, stacklevel: int = 3) -> None:
    """Emit ``message`` as a warning of ``category`` pointing at the caller's caller."""
    import warnings

    warnings.warn(message, category, stacklevel=stacklevel)


@dataclass(frozen=True)
class DataProblem:
    """One problem found in a data file: where it is and what is wrong."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class DataFileError(StoryevalError, ValueError):
    """A data file is unusable; ``problems`` lists every problem found, in file order."""

    def __init__(self, problems: list[DataProblem]) -> None:
        if not problems:
            raise ValueError("DataFileError needs at least one problem")
        self.problems = list(problems)
        shown = "\n".join(str(p) for p in self.problems[:10])
        more = len(self.problems) - 10
        if more > 0:
            shown += f"\n... and {more} more problem(s)"
        super().__init__(shown)

    @classmethod
    def single(cls, path: str | Path, line: int, reason: str) -> DataFileError:
        """An error for one problem at ``path:line``."""
        return cls([DataProblem(str(path), line, reason)])


class ModelLoadError(StoryevalError, OSError):
    """A model or language resource could not be found or loaded."""


class MissingInputError(StoryevalError, ValueError):
    """A record lacks a field that an operation needs (e.g. a reference for BLEU)."""


class OutputDirectoryError(StoryevalError, ValueError):
    """An output directory that holds something a command must not overwrite: files of
    anything but a previous output of the same command, or one of its inputs."""
