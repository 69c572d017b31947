"""The preference model's settings, files and errors."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

from storyeval.base.errors import StoryevalError
from storyeval.base.validation import check_choice, check_fraction

_T = TypeVar("_T")

#: The model directory's files.
MODEL_FILE = "preference.json"
#: The model directory's store of story features (resume, retraining without encoding).
FEATURES_DIR = "features"
#: The model directory's score file of the cross-validation's held-out predictions.
HELDOUT_FILE = "heldout_scores.jsonl"
#: The metric name of those predictions in it (``preference_heldout:`` and the directory's name).
HELDOUT_METRIC = "preference_heldout"
#: The model directory's list of its judged stories' text keys (:func:`text_key`), one a line.
TRAINING_TEXTS_FILE = "training_texts.txt"


def text_key(text: str) -> str:
    """A story text's key among a model's training texts (a hash of the stripped text: the
    same story under another id is the same story)."""
    return hashlib.sha256(text.strip().encode()).hexdigest()[:16]


FEATURES = ("encoder", "causal-lm", "none")


class PreferenceDataError(StoryevalError, ValueError):
    """The judgments cannot train a preference model (no ratings or pairs, unknown stories)."""


@dataclass(frozen=True)
class PreferenceConfig:
    """How a preference model is trained.

    Attributes
    ----------
    features : {"encoder", "causal-lm", "none"}
        A story's features: the encoder's mean-pooled last layer, the causal LM's final
        hidden state at the last token, or none (the metric features alone: a calibrated
        combination of a few scores).
    model : str, optional
        The encoder or causal LM (hub name or directory; None: the offline one).
    with_prompt : bool
        Read the prompt before the story (the features of ``prompt + story``).
    criterion : str, optional
        The rated criterion to learn; None: every criterion, z-scored per criterion and
        averaged per story.
    pointwise, pairwise : bool
        Use the mean ratings as targets / the pairs (from ratings and comparisons).
    margin, tie_margin : float
        Two stories of a prompt whose mean ratings differ by more than ``margin`` make a pair;
        by at most ``tie_margin`` a tie; in between, no pair.
    length_covariate : bool
        Learn the effect of length (log words) beside the features and leave it out of the
        scores.
    hidden : int
        0 for a linear head; else the width of one tanh hidden layer.
    l2 : float or "auto"
        Weight decay of the head; ``"auto"`` chooses it from :data:`L2_GRID` by
        prompt-disjoint cross-validation within the training stories (nested inside the
        reported cross-validation, so its numbers stay held out).
    steps, learning_rate : int, float
        Full-batch Adam steps over the training stories.
    dev_fraction : float
        Groups held out to fit the pair temperature.
    seed : int
    rating_loss : {"mse", "ordinal"}
        The pointwise objective: squared error on each story's mean rating, or the
        ordered-logit likelihood of every single rating (one criterion on a discrete scale;
        the model then predicts a distribution over the scale, see
        :mod:`storyeval.learn.ordinal`).
    metric_features : tuple of str
        Metrics whose values join the features (repeated n-grams, perplexity, ...: what an
        embedding does not see; :mod:`storyeval.learn.metric_features`).
    metric_options : tuple of (str, str)
        Their options, ``("NAME.KEY", "VALUE")``.
    fine_tune_epochs : int
        0: frozen encoder features; N: the encoder is first fine-tuned for N epochs on the
        training stories (:mod:`storyeval.learn.preference.tune`).
    fine_tune_lr, fine_tune_batch_size, fine_tune_max_length : float, int, int
        The fine-tuning's encoder learning rate, stories per batch, tokens read per story.
    negatives : tuple of str
        Perturbation techniques (``repetition``, ``reordering``, ...): each story gets one
        perturbed copy per technique, which must score below its original (a logistic
        ranking loss on the scores, length left out); the copies carry no rating, share
        their original's split, and cross-validation reports the share of held-out copies
        scored lower, per technique.
    negative_weight : float
        The weight of that ranking loss beside the people's objectives (0: the copies are
        only measured, not learned from).
    group_by : str, optional
        A story field (e.g. ``author``) whose values form the cross-validation's groups, so
        no value is in a training and a held-out fold; by default the prompt.
    select_features : bool
        Choose the features inside every training set (nested): the 1, 2, 3 or 5 metric
        features that agree best with people there, all of them, or the encoder's features
        with them, whichever agrees best with people in a cross-validation within the
        training set (a few strong scores first: the simplest wins a tie).
    """

    features: Literal["encoder", "causal-lm", "none"] = "encoder"
    model: str | None = None
    with_prompt: bool = False
    criterion: str | None = None
    pointwise: bool = True
    pairwise: bool = True
    margin: float = 0.5
    tie_margin: float = 0.0
    length_covariate: bool = True
    hidden: int = 0
    l2: float | Literal["auto"] = 1e-2
    steps: int = 300
    learning_rate: float = 0.02
    dev_fraction: float = 0.2
    seed: int = 0
    rating_loss: Literal["mse", "ordinal"] = "mse"
    metric_features: tuple[str, ...] = ()
    metric_options: tuple[tuple[str, str], ...] = ()
    fine_tune_epochs: int = 0
    fine_tune_lr: float = 3e-5
    fine_tune_batch_size: int = 8
    fine_tune_max_length: int = 256
    negatives: tuple[str, ...] = ()
    negative_weight: float = 1.0
    group_by: str | None = None
    select_features: bool = False

    def __post_init__(self) -> None:
        # a model file's JSON gives lists: keep the config hashable and comparable
        object.__setattr__(self, "metric_features", tuple(self.metric_features))
        object.__setattr__(self, "metric_options", tuple(map(tuple, self.metric_options)))
        object.__setattr__(self, "negatives", _checked_negatives(self.negatives))
        if not (math.isfinite(self.negative_weight) and self.negative_weight >= 0):
            raise ValueError(f"negative_weight must be >= 0; got {self.negative_weight}")
        if self.metric_features or self.metric_options:
            from storyeval.learn.metric_features import check_metric_features

            check_metric_features(self.metric_features, self.metric_options)
        check_choice(self.features, FEATURES, "features")
        if not self.pointwise and not self.pairwise:
            raise ValueError("train on ratings (pointwise), pairs (pairwise), or both")
        if self.margin < 0 or not 0 <= self.tie_margin <= self.margin:
            raise ValueError("need 0 <= tie_margin <= margin")
        if self.l2 != "auto" and not (isinstance(self.l2, int | float) and self.l2 >= 0):
            raise ValueError(f"l2 must be a number >= 0 or 'auto'; got {self.l2!r}")
        if self.steps < 1 or self.learning_rate <= 0 or self.hidden < 0:
            raise ValueError("steps >= 1, learning_rate > 0 and hidden >= 0")
        check_fraction(self.dev_fraction, "dev_fraction")
        if self.rating_loss not in ("mse", "ordinal"):
            raise ValueError(f"rating_loss must be mse or ordinal; got {self.rating_loss!r}")
        if self.rating_loss == "ordinal" and (self.criterion is None or not self.pointwise):
            raise ValueError("the ordinal rating loss learns one criterion's ratings: give it")
        if self.fine_tune_epochs < 0 or self.fine_tune_lr <= 0:
            raise ValueError("fine_tune_epochs >= 0 and fine_tune_lr > 0")
        if self.fine_tune_batch_size < 2 or self.fine_tune_max_length < 8:
            raise ValueError("fine_tune_batch_size >= 2 and fine_tune_max_length >= 8")
        self._check_metric_use()
        if self.fine_tune_epochs and self.features != "encoder":
            raise ValueError("fine-tuning is for encoder features (--features encoder)")

    def _check_metric_use(self) -> None:
        """Settings that need metric features have some."""
        if self.features == "none" and not self.metric_features:
            raise ValueError("features none learns from metric features: give some")
        if self.select_features and not self.metric_features:
            raise ValueError("select_features chooses among metric features: give some")

    def signature_fields(self) -> dict[str, Any]:
        """The settings that change the model (the signature's fields)."""
        fields = asdict(self)
        fields.pop("model")
        if fields["rating_loss"] == "mse":  # the signatures of models trained before it
            fields.pop("rating_loss")
        fields.pop("metric_options")
        if not self.fine_tune_epochs:  # the signatures of frozen-feature models stay as they were
            for name in [name for name in fields if name.startswith("fine_tune_")]:
                fields.pop(name)
        if self.negatives:
            fields["negatives"] = ",".join(self.negatives)
        else:  # the signatures of models trained without them stay as they were
            fields.pop("negatives")
            fields.pop("negative_weight")
        if self.metric_features:
            from storyeval.learn.metric_features import describe_metric_features

            options = dict(self.metric_options)
            fields["metric_features"] = describe_metric_features(self.metric_features, options)
        else:
            fields.pop("metric_features")
        for name in ("group_by", "select_features"):  # unset: signatures as before them
            if not fields[name]:
                fields.pop(name)
        return fields


def _checked_negatives(names: Sequence[str]) -> tuple[str, ...]:
    """The perturbation techniques of the negatives, known and each once, in the given order."""
    names = tuple(names)
    if not names:
        return ()
    from storyeval.perturb import parse_techniques

    known = parse_techniques(list(names))  # raises on an unknown name
    if len(set(names)) != len(names):
        raise ValueError(f"negatives: a technique is named twice in {', '.join(names)}")
    return tuple(name for name in names if name in known)
