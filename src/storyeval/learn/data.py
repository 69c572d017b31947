"""Training data helpers shared by the learned metrics: corpus hashing and dev splits."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from storyeval.base.errors import StoryevalError
from storyeval.base.validation import check_fraction
from storyeval.corpus import Story
from storyeval.perturb.base import story_rng

T = TypeVar("T")

#: The fewest stories a split may leave for training and for early stopping.
MIN_TRAIN_STORIES = 4
MIN_DEV_STORIES = 2


class InsufficientDataError(StoryevalError, ValueError):
    """The corpus is too small for what was asked (splitting, pairing sentences, ...)."""


def corpus_hash(stories: Sequence[Story]) -> str:
    """A 12-hex-digit content hash of the stories (id, prompt, text), independent of order.

    >>> from storyeval.corpus import Story
    >>> a, b = Story("1", "", "One."), Story("2", "", "Two.")
    >>> corpus_hash([a, b]) == corpus_hash([b, a])
    True
    """
    digest = hashlib.sha256()
    for story_id, prompt, text in sorted((s.id, s.prompt, s.story) for s in stories):
        digest.update(json.dumps([story_id, prompt, text], ensure_ascii=False).encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:12]


def split_dev(
    stories: Sequence[Story], *, dev_fraction: float = 0.1, seed: int = 0
) -> tuple[list[Story], list[Story]]:
    """Split stories into training and dev sets (by story, reproducibly under ``seed``).

    The dev set takes ``round(dev_fraction * n)`` stories, at least
    :data:`MIN_DEV_STORIES`; at least :data:`MIN_TRAIN_STORIES` must remain for training.

    Raises
    ------
    InsufficientDataError
        When the corpus is too small to split.

    Examples
    --------
    >>> from storyeval.corpus import Story
    >>> stories = [Story(str(i), "", f"Story {i}.") for i in range(20)]
    >>> train, dev = split_dev(stories, dev_fraction=0.1, seed=1)
    >>> len(train), len(dev)
    (18, 2)
    """
    check_fraction(dev_fraction, "dev_fraction")
    n = len(stories)
    n_dev = max(MIN_DEV_STORIES, int(dev_fraction * n + 0.5))
    if n - n_dev < MIN_TRAIN_STORIES:
        raise InsufficientDataError(
            f"a corpus of {n} stor{'y' if n == 1 else 'ies'} is too small to split into training "
            f"and dev sets: it needs at least {MIN_TRAIN_STORIES + MIN_DEV_STORIES} "
            f"({MIN_TRAIN_STORIES} to train on, {MIN_DEV_STORIES} for early stopping); add "
            "stories or give a separate dev file"
        )
    order = sorted(range(n), key=lambda i: stories[i].id)
    story_rng(seed, "dev-split").shuffle(order)
    dev_index = set(order[:n_dev])
    train = [story for i, story in enumerate(stories) if i not in dev_index]
    dev = [story for i, story in enumerate(stories) if i in dev_index]
    return train, dev


def check_sizes(train: Sequence[Story], dev: Sequence[Story]) -> None:
    """Check an explicit train/dev pair: at least 2 training stories and 1 dev story, and no
    story id in both."""
    if len(train) < 2:
        raise InsufficientDataError(
            f"the training corpus has {len(train)} stor{'y' if len(train) == 1 else 'ies'}; "
            "at least 2 are needed"
        )
    if not dev:
        raise InsufficientDataError("the dev corpus is empty; early stopping needs dev stories")
    shared = sorted({s.id for s in train} & {s.id for s in dev})
    if shared:
        raise InsufficientDataError(
            f"{len(shared)} story id(s) are in both the training and the dev corpus "
            f"(first: {shared[0]!r}); the dev set must hold other stories"
        )


@dataclass(frozen=True)
class TrainingData:
    """The stories to train on and to stop early on, as a trained model's signature names
    them: ``dev_tag`` says where the dev set came from, ``data_hash`` covers every story."""

    train: list[Story]
    dev: list[Story]
    dev_tag: str
    data_hash: str


def training_data(
    stories: Sequence[Story],
    dev_stories: Sequence[Story] | None,
    *,
    dev_fraction: float,
    seed: int,
) -> TrainingData:
    """Hold out ``dev_fraction`` of ``stories`` (see :func:`split_dev`) or, when
    ``dev_stories`` is given, check and use that separate dev set.

    Raises
    ------
    InsufficientDataError
        When the corpus is too small to split, or the explicit sets are unusable.
    """
    stories = list(stories)
    if dev_stories is None:
        train, dev = split_dev(stories, dev_fraction=dev_fraction, seed=seed)
        return TrainingData(train, dev, f"split:{dev_fraction}", corpus_hash(stories))
    dev = list(dev_stories)
    check_sizes(stories, dev)
    return TrainingData(stories, dev, f"file:{corpus_hash(dev)}", corpus_hash([*stories, *dev]))
