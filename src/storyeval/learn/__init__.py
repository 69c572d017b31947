"""Training learned metrics: UNION (Guan & Huang 2020) and a next-sentence-prediction head.

Both share :func:`storyeval.learn.trainer.fit` (dev split, early stopping, checkpoints that
carry a :class:`~storyeval.base.signature.Signature`, progress bar, resuming after interruption).
Heavy libraries (torch, transformers) are imported inside the functions that need them.
"""

from storyeval.learn.data import (
    MIN_DEV_STORIES,
    MIN_TRAIN_STORIES,
    InsufficientDataError,
    corpus_hash,
    split_dev,
)
from storyeval.learn.trainer import (
    METADATA_FILE,
    OutputDirectoryError,
    TrainingConfig,
    TrainingInterrupted,
    TrainingResult,
    fit,
    read_metadata,
)

__all__ = [
    "METADATA_FILE",
    "MIN_DEV_STORIES",
    "MIN_TRAIN_STORIES",
    "InsufficientDataError",
    "OutputDirectoryError",
    "TrainingConfig",
    "TrainingInterrupted",
    "TrainingResult",
    "corpus_hash",
    "fit",
    "read_metadata",
    "split_dev",
]
