"""A trained preference model as a judge (``storyeval judge --backend reward-model``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from storyeval.judge.backends import (
    JUDGE_BACKENDS,
    Decoding,
    JudgeAnswer,
    JudgeBackendError,
)
from storyeval.judge.prompts import JudgeRequest


class RewardModelJudge:
    """A preference model (``storyeval train preference``) as a judge: it reads the stories a
    request is about, not its prompt. An absolute question gets a distribution over the
    criterion's answers around the predicted rating (a normal of the model's held-out error);
    a pairwise one the model's calibrated probability that story A is preferred. Answers that
    are not numbers (``yes``/``no``) are read as the scale's positions, low to high, with the
    standardised score placed on them by the normal distribution's quantiles.

    Parameters
    ----------
    model : str
        A directory written by ``storyeval train preference``.
    device, precision : str
        Where and how the model's features are computed.
    """

    def __init__(self, model: str, *, device: str = "cpu", precision: str = "float32") -> None:
        from storyeval.learn.preference import load_preference

        self.model = load_preference(model)
        from storyeval.metrics.context import ScoringContext

        # one encoder cache for every call: a story asked about again is not encoded again
        self.context = ScoringContext(device=device, precision=precision)
        self.name = self.model.directory.name
        self.identity = self.model.identity
        self.calls = 0
        #: The perturbation techniques and seed of the negatives it was trained on (an audit
        #: of those techniques says so: such copies of its training stories are not new to it).
        self.trained_perturbations = (self.model.config.negatives, self.model.config.seed)

    def training_overlap(self, stories: Sequence[Any]) -> int | None:
        """How many of ``stories`` the model was trained on (None: not recorded), so that a
        run on them can say its agreement with people there is in-sample."""
        return self.model.trained_on(stories)

    @property
    def heldout_file(self) -> str:
        """Where the model's cross-validated predictions are (the clean comparison)."""
        from storyeval.learn.preference import HELDOUT_FILE

        return str(self.model.directory / HELDOUT_FILE)

    def answer(
        self, requests: Sequence[JudgeRequest], decoding: Decoding, *, sample: int = 0
    ) -> list[JudgeAnswer]:
        """Answers to ``requests`` (every story's features in one pass; deterministic, so
        repeats agree)."""
        missing = [r for r in requests if not r.stories]
        if missing:
            raise JudgeBackendError("a reward-model judge needs requests that carry stories")
        unique = {s.id: s for r in requests for s in r.stories}
        stories = list(unique.values())
        standard = self.model.head.scores(self._features(stories))
        score = dict(zip(unique, standard, strict=True))
        self.calls += 1
        return [self._one(r, [float(score[s.id]) for s in r.stories]) for r in requests]

    def _features(self, stories: Sequence[Any]) -> Any:
        from storyeval.learn.preference import story_features

        features, _, _ = story_features(stories, self.model.feature_config, scoring=self.context)
        return features

    def _one(self, request: JudgeRequest, standard: Sequence[float]) -> JudgeAnswer:
        if len(standard) == 2:
            first = self.model.head.pair_probability(standard[0], standard[1])
            probabilities: tuple[float, ...] = (first, 1.0 - first)
        else:
            probabilities = tuple(self._label_distribution(standard[0], request.labels))
        best = request.labels[max(range(len(probabilities)), key=probabilities.__getitem__)]
        keyword = "Winner" if len(standard) == 2 else "Score"
        return JudgeAnswer(probabilities, f"{keyword}: {best}")

    def _label_distribution(self, standard: float, labels: Sequence[str]) -> list[float]:
        """The answers' probabilities: on the model's rating scale when the labels are its
        numbers, else over the labels' positions."""
        try:
            values = [float(label) for label in labels]
        except ValueError:
            values = []
        if values and self.model.levels and set(values) == set(self.model.levels):
            # the ordinal loss: the model's own distribution over the scale
            found = self.model.level_probabilities(np.array([standard]))[0]
            by_level = dict(zip(self.model.levels, found, strict=True))
            return [float(by_level[v]) for v in values]
        if values and self.model.scale is not None:
            predicted = float(self.model.to_scale(np.array([standard]))[0])
            return self.model.label_probabilities(predicted, values)
        from scipy.stats import norm

        positions = np.arange(len(labels), dtype=float)
        if values and values[0] > values[-1]:
            positions = positions[::-1]
        centre = float(norm.cdf(standard)) * (len(labels) - 1)
        weights = np.exp(-0.5 * (positions - centre) ** 2)
        return [float(w) for w in weights / weights.sum()]


JUDGE_BACKENDS.register("reward-model", RewardModelJudge)
