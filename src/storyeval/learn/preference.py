"""Story reward models trained from human judgments (``storyeval train preference``).

A researcher who ran one study owns the data to train a judge of their own (LitBench, Fein et
al. 2025, trained Bradley-Terry reward models on human story preferences that agree with
held-out people more often than off-the-shelf LLM judges). The model is a scalar head over a
story's features: the mean-pooled last layer of an encoder (default the offline MiniLM, any hub
or local encoder) or a causal LM's last hidden state. It learns from

- **ratings**: a pointwise objective on each story's mean rating (z-scored), and pairs of
  stories for one prompt whose mean ratings differ by more than ``margin`` (ties, within
  ``tie_margin``, kept as ties);
- **comparisons**: pairwise preferences (``storyeval import pairwise``, a pairwise study's
  export), with a Bradley-Terry loss and Davidson's (1970) ties,

both together when both exist. The encoder can first be fine-tuned on the same objective
(:mod:`storyeval.learn.preference_tune`), and metric scores can join its features
(:mod:`storyeval.learn.metric_features`). Length can be a covariate (``length_covariate``): its
coefficient is learned and reported, and removed from the scores, so a longer story gets no
credit for its length alone. Pair probabilities are calibrated by a temperature fitted on a
held-out split; splits are by prompt (no prompt in both train and test), by story where every
prompt has one story. :func:`cross_validate` reports the held-out pairwise accuracy and the
story-level Kendall tau with bootstrap intervals.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np

from storyeval.corpus import Judgment, Score, Story
from storyeval.errors import StoryevalError
from storyeval.signature import Signature
from storyeval.validation import check_choice, check_fraction

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
        training stories (:mod:`storyeval.learn.preference_tune`).
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


# --------------------------------------------------------------------------- data


@dataclass
class PreferenceData:
    """Stories with what people said of them.

    Attributes
    ----------
    stories : list of Story
    targets : numpy.ndarray
        Each story's mean rating (NaN where it has none), z-scored per criterion and
        averaged when several criteria are learned together.
    pairs : list of (int, int, float)
        ``(i, j, outcome)``: 1 when story ``i`` was preferred, 0.5 a tie.
    groups : list of str
        The split unit of each story (its prompt; itself where each prompt has one story).
    scale : (float, float) or None
        The rating scale's observed ends (one criterion: its ratings' min and max).
    target_mean, target_sd : float
        Of the mean ratings before they were standardised (one criterion).
    ratings : list of (int, int)
        The ordinal loss's single ratings: ``(story, level)``, the level an index into
        ``levels`` (the scale's values, ascending); empty for the squared error.
    negatives : list of (int, int, str)
        ``(original, copy, technique)``: a perturbed copy (among ``stories``, after the
        judged ones, without a rating) that must score below its original.
    """

    stories: list[Story]
    targets: np.ndarray
    pairs: list[tuple[int, int, float]]
    groups: list[str]
    scale: tuple[float, float] | None = None
    target_mean: float = 0.0
    target_sd: float = 1.0
    notes: list[str] = field(default_factory=list)
    ratings: list[tuple[int, int]] = field(default_factory=list)
    levels: tuple[float, ...] = ()
    negatives: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def synthetic(self) -> np.ndarray:
        """True for the perturbed copies (no person judged them)."""
        mask = np.zeros(len(self.stories), dtype=bool)
        mask[[copy for _, copy, _ in self.negatives]] = True
        return mask

    def data_hash(self) -> str:
        """A hash of the stories, targets and pairs (in the signature)."""
        digest = hashlib.sha256()
        for story, target in zip(self.stories, self.targets, strict=True):
            digest.update(f"{story.id}\x1f{story.story}\x1f{target!r}\x1e".encode())
        digest.update(json.dumps(self.pairs).encode())
        if self.ratings:
            digest.update(json.dumps([self.ratings, self.levels]).encode())
        if self.negatives:
            digest.update(json.dumps(self.negatives).encode())
        return digest.hexdigest()[:12]


def preference_data(
    stories: Sequence[Story],
    judgments: Sequence[Judgment] = (),
    comparisons: Sequence[Mapping[str, Any]] = (),
    *,
    config: PreferenceConfig | None = None,
    systems: Collection[str] | None = None,
    exclude_systems: Collection[str] = (),
) -> PreferenceData:
    """The training data of a preference model: mean ratings, pairs from ratings within a
    prompt, and pairs from comparisons (``system_a``/``system_b``/``winner``, each a story id
    or, with ``prompt_id``, the system whose story for that prompt was compared).

    ``systems`` keeps only those systems' stories, ``exclude_systems`` leaves some out (e.g.
    ``human``: a model trained beside human stories learns mostly to tell them from generated
    ones); the judgments and comparisons of the stories left out are dropped with them.

    Raises
    ------
    PreferenceDataError
        When nothing can be learned, a judgment or comparison names an unknown story, or a
        system to keep has no story.
    """
    from storyeval.meta.data import story_prompt_id

    config = config or PreferenceConfig()
    stories, judgments, comparisons, left_out = _systems_only(
        stories, judgments, comparisons, systems, exclude_systems
    )
    stories = [s for s in stories if s.story.strip()]
    index = {s.id: i for i, s in enumerate(stories)}
    prompts = [str(story_prompt_id(s)) for s in stories]
    targets, scale, mean, sd = _mean_ratings(stories, index, judgments, config.criterion)
    pairs: list[tuple[int, int, float]] = []
    if config.pairwise:
        pairs += _rating_pairs(targets * sd + mean, prompts, config.margin, config.tie_margin)
        pairs += _comparison_pairs(comparisons, stories, index, prompts)
    if not config.pointwise:
        targets = np.full(len(stories), np.nan)
    if not np.isfinite(targets).any() and not pairs:
        raise PreferenceDataError(
            "nothing to learn: no story has a rating of the criterion and no pair was found"
        )
    one_each = len(set(prompts)) == len(prompts) and config.group_by is None
    groups = [s.id for s in stories] if one_each else prompts
    notes = ["every prompt has one story: splits are by story"] if one_each else []
    if config.group_by is not None:
        groups = _field_groups(stories, config.group_by)
        notes.append(f"folds by {config.group_by} ({len(set(groups))} groups)")
    notes += left_out
    data = PreferenceData(stories, targets, pairs, groups, scale, mean, sd, notes)
    if config.rating_loss == "ordinal":
        data.ratings, data.levels = _single_ratings(judgments, index, str(config.criterion))
    if config.negatives:
        add_negatives(data, config.negatives, seed=config.seed)
    return data


def _systems_only(
    stories: Sequence[Story],
    judgments: Sequence[Judgment],
    comparisons: Sequence[Mapping[str, Any]],
    systems: Collection[str] | None,
    exclude_systems: Collection[str],
) -> tuple[list[Story], list[Judgment], list[Mapping[str, Any]], list[str]]:
    """The stories of the systems kept, with their judgments and comparisons, and a note of
    what was left out (none when every system is kept)."""
    if systems is None and not exclude_systems:
        return list(stories), list(judgments), list(comparisons), []
    present = {s.system for s in stories}
    missing = sorted(set(systems or ()) - present)
    if missing:
        raise PreferenceDataError(
            f"no story of system(s) {', '.join(missing)}; the stories' systems: "
            f"{', '.join(sorted(str(name) for name in present))}"
        )
    excluded = set(exclude_systems)
    kept = [s for s in stories if (systems is None or s.system in systems)]
    kept = [s for s in kept if s.system not in excluded]
    dropped = {s.id for s in stories} - {s.id for s in kept}
    dropped_systems = present - {s.system for s in kept}
    sides = dropped | {str(name) for name in dropped_systems}
    ratings = [  # a judgment naming its story's system (of a story without text) goes too
        j
        for j in judgments
        if j.item_id not in dropped
        and str(j.extra.get("system")) not in excluded
        and (systems is None or "system" not in j.extra or j.extra["system"] in systems)
    ]
    compared = [
        c for c in comparisons if not {str(c.get("system_a")), str(c.get("system_b"))} & sides
    ]
    note = (
        f"{len(dropped)} stories left out by system ({', '.join(sorted(map(str, dropped_systems)))}"
        f"), with {len(judgments) - len(ratings)} judgments and "
        f"{len(comparisons) - len(compared)} comparisons"
    )
    return kept, ratings, compared, [note]


def add_negatives(
    data: PreferenceData, techniques: Sequence[str], *, seed: int = 0, nlp: Any = None
) -> None:
    """Append a perturbed copy of every judged story per technique (the perturbation engine,
    one technique per copy, seeded) to ``data``: no rating, its original's split group, and a
    negative pair ``(original, copy, technique)``. A story a technique cannot change gets no
    copy of it (counted in the notes)."""
    import warnings
    from collections import Counter

    from storyeval.perturb import SkippedStoriesWarning, perturb_stories

    if data.negatives:
        raise ValueError("these data already have their perturbed copies")
    with warnings.catch_warnings():  # reported in the notes instead
        warnings.simplefilter("ignore", SkippedStoriesWarning)
        made = perturb_stories(
            data.stories, list(techniques), mode="each", seed=seed, skip_inapplicable=True, nlp=nlp
        )
    index = {story.id: i for i, story in enumerate(data.stories)}
    for copy in made.stories:
        original = index[copy.source_id]
        data.negatives.append((original, len(data.stories), copy.techniques[0]))
        data.stories.append(replace(data.stories[original], id=copy.id, story=copy.story))
        data.groups.append(data.groups[original])
    data.targets = np.concatenate([data.targets, np.full(len(made.stories), np.nan)])
    counts = Counter(technique for _, _, technique in data.negatives)
    made_counts = ", ".join(f"{counts[name]} {name}" for name in techniques)
    note = f"perturbed copies that must score below their originals: {made_counts}"
    if made.skipped:
        note += f" ({len(made.skipped)} left out: the technique could not change the story)"
    data.notes.append(note)


def _single_ratings(
    judgments: Sequence[Judgment], index: Mapping[str, int], criterion: str
) -> tuple[list[tuple[int, int]], tuple[float, ...]]:
    """Every rating of ``criterion`` as ``(story, level)``, and the scale's levels."""
    from storyeval.learn.ordinal import MAX_LEVELS

    chosen = [j for j in judgments if j.criterion == criterion and math.isfinite(j.value)]
    levels = tuple(sorted({float(j.value) for j in chosen}))
    if not 2 <= len(levels) <= MAX_LEVELS:
        raise PreferenceDataError(
            f"the ordinal rating loss needs a discrete scale of 2 to {MAX_LEVELS} values; "
            f"the ratings of {criterion!r} take {len(levels)} (use the squared error)"
        )
    position = {level: k for k, level in enumerate(levels)}
    return [(index[j.item_id], position[float(j.value)]) for j in chosen], levels


def _mean_ratings(
    stories: Sequence[Story],
    index: Mapping[str, int],
    judgments: Sequence[Judgment],
    criterion: str | None,
) -> tuple[np.ndarray, tuple[float, float] | None, float, float]:
    """Each story's standardised mean rating (NaN where none), the scale's ends, and the mean
    and sd used (one criterion; several are z-scored apiece and averaged)."""
    chosen = [j for j in judgments if criterion is None or j.criterion == criterion]
    unknown = sorted({j.item_id for j in chosen if j.item_id not in index})
    if unknown:
        raise PreferenceDataError(
            f"{len(unknown)} judged item(s) are not in the stories (first: {unknown[0]!r})"
        )
    criteria = sorted({j.criterion for j in chosen})
    if criterion is not None and not chosen and judgments:
        known = sorted({j.criterion for j in judgments})
        raise PreferenceDataError(
            f"no rating of {criterion!r}; the criteria are {', '.join(known)}"
        )
    columns = []
    for name in criteria:
        sums, counts = np.zeros(len(stories)), np.zeros(len(stories))
        for j in chosen:
            if j.criterion == name and math.isfinite(j.value):
                sums[index[j.item_id]] += j.value
                counts[index[j.item_id]] += 1
        with np.errstate(invalid="ignore"):
            columns.append(np.where(counts > 0, sums / np.maximum(counts, 1), np.nan))
    if not columns:
        return np.full(len(stories), np.nan), None, 0.0, 1.0
    if len(columns) == 1:
        raw = columns[0]
        values = [j.value for j in chosen if math.isfinite(j.value)]
        scale = (float(min(values)), float(max(values))) if values else None
    else:
        raw = np.nanmean(np.vstack([_zscore(c) for c in columns]), axis=0)
        scale = None
    mean = float(np.nanmean(raw)) if np.isfinite(raw).any() else 0.0
    sd = float(np.nanstd(raw)) if np.isfinite(raw).sum() > 1 else 1.0
    sd = sd if sd > 0 else 1.0
    return (raw - mean) / sd, scale, mean, sd


def _zscore(values: np.ndarray) -> np.ndarray:
    sd = float(np.nanstd(values))
    standard: np.ndarray = (values - float(np.nanmean(values))) / (sd if sd > 0 else 1.0)
    return standard


def _rating_pairs(
    ratings: np.ndarray, prompts: Sequence[str], margin: float, tie_margin: float
) -> list[tuple[int, int, float]]:
    """Pairs of rated stories for one prompt: the higher mean wins past ``margin``; a tie
    within ``tie_margin``."""
    by_prompt: dict[str, list[int]] = {}
    for i, prompt in enumerate(prompts):
        if math.isfinite(ratings[i]):
            by_prompt.setdefault(prompt, []).append(i)
    pairs = []
    for members in by_prompt.values():
        for a, i in enumerate(members):
            for j in members[a + 1 :]:
                gap = float(ratings[i] - ratings[j])
                if abs(gap) > margin:
                    pairs.append((i, j, 1.0) if gap > 0 else (j, i, 1.0))
                elif abs(gap) <= tie_margin:
                    pairs.append((i, j, 0.5))
    return pairs


def _field_groups(stories: Sequence[Story], field_name: str) -> list[str]:
    """Each story's value of the field the cross-validation groups by (e.g. the author, so that
    no author is in a training and a held-out fold); a story without it is an error."""
    groups = []
    for story in stories:
        value = story.to_dict().get(field_name)
        if value in (None, ""):
            raise PreferenceDataError(
                f"story {story.id!r} has no {field_name!r} to group the folds by (--group-by)"
            )
        groups.append(str(value))
    return groups


def _comparison_pairs(
    comparisons: Sequence[Mapping[str, Any]],
    stories: Sequence[Story],
    index: Mapping[str, int],
    prompts: Sequence[str],
) -> list[tuple[int, int, float]]:
    """Pairs from comparison records; a side is a story id, or a system whose story for the
    record's ``prompt_id`` was shown."""
    by_system = {(prompts[i], s.system): i for i, s in enumerate(stories) if s.system}
    pairs = []
    for number, record in enumerate(comparisons, start=1):
        sides = []
        for key in ("system_a", "system_b"):
            name = str(record.get(key) or "")
            found = index.get(name, by_system.get((str(record.get("prompt_id") or ""), name)))
            if found is None:
                raise PreferenceDataError(
                    f"comparison {number}: {key} {name!r} is neither a story id nor a system "
                    f"with a story for prompt {record.get('prompt_id')!r}"
                )
            sides.append(found)
        winner = str(record.get("winner") or "")
        if winner == "tie":
            pairs.append((sides[0], sides[1], 0.5))
        elif winner in (record.get("system_a"), record.get("system_b")):
            first = winner == record.get("system_a")
            pairs.append((sides[0], sides[1], 1.0) if first else (sides[1], sides[0], 1.0))
    return pairs


# --------------------------------------------------------------------------- features


def story_features(
    stories: Sequence[Story],
    config: PreferenceConfig,
    *,
    device: str = "cpu",
    precision: str = "float32",
    scoring: Any = None,
) -> tuple[np.ndarray, np.ndarray, str]:
    """Each story's features, its length covariate (log of 1 + words) and the feature
    model's identity. ``scoring`` (a ScoringContext) shares a scoring run's encoder cache,
    so texts other metrics encoded are not encoded again."""
    if scoring is not None:
        device, precision = scoring.device, scoring.precision
    encode, identity = feature_encoder(config, device=device, precision=precision, scoring=scoring)
    features = encode(_feature_texts(stories, config))
    if config.metric_features:
        columns, _ = metric_columns(
            stories, config, scoring=scoring, device=device, precision=precision
        )
        features = np.hstack([features, columns])
    return features, _lengths(stories), identity


def metric_columns(
    stories: Sequence[Story],
    config: PreferenceConfig,
    *,
    scoring: Any = None,
    device: str = "cpu",
    precision: str = "float32",
) -> tuple[np.ndarray, dict[str, str]]:
    """A column per metric of ``config.metric_features`` (see
    :func:`storyeval.learn.metric_features.metric_feature_columns`), and each metric's
    signature."""
    from storyeval.learn.metric_features import metric_feature_columns

    columns, signatures = metric_feature_columns(
        stories,
        config.metric_features,
        config.metric_options,
        scoring=scoring,
        device=device,
        precision=precision,
    )
    return columns, dict(zip(config.metric_features, signatures, strict=True))


def _lengths(stories: Sequence[Story]) -> np.ndarray:
    return np.log1p([len(s.story.split()) for s in stories])


def _feature_texts(stories: Sequence[Story], config: PreferenceConfig) -> list[str]:
    return [
        f"{s.prompt.strip()}\n\n{s.story.strip()}"
        if config.with_prompt and s.prompt.strip()
        else s.story
        for s in stories
    ]


def feature_encoder(
    config: PreferenceConfig,
    *,
    device: str = "cpu",
    precision: str = "float32",
    scoring: Any = None,
) -> tuple[Callable[[list[str]], np.ndarray], str]:
    """The function that gives texts their features (float64 rows), and the feature model's
    identity; the model is loaded, nothing is encoded yet."""
    if config.features == "none":

        def nothing(texts: list[str]) -> np.ndarray:
            return np.zeros((len(texts), 0))

        return nothing, "none"
    if config.features == "causal-lm":
        from storyeval.metrics.distributional import causal_lm_features
        from storyeval.models import load_causal_lm
        from storyeval.models.devices import place

        lm = place(load_causal_lm(config.model), device)

        def last_states(texts: list[str]) -> np.ndarray:
            return causal_lm_features(lm, texts)[0].astype(np.float64)

        return last_states, str(lm.identity)
    from storyeval.metrics.context import ScoringContext

    context = scoring or ScoringContext(device=device, precision=precision)
    cache = context.cache(config.model)
    return cache.text_embeddings, cache.identity


# --------------------------------------------------------------------------- the head


@dataclass
class PreferenceHead:
    """The fitted head: standardisation, weights, the length coefficient, the pair scale and
    Davidson's tie parameter, and the pair temperature."""

    mean: np.ndarray
    sd: np.ndarray
    weights: dict[str, np.ndarray]
    length_mean: float = 0.0
    length_sd: float = 1.0
    temperature: float = 1.0

    def scores(self, features: np.ndarray) -> np.ndarray:
        """The standardised score of each story (the length effect left out); a metric
        feature undefined for a story counts as the training stories' mean."""
        x = (np.where(np.isnan(features), self.mean, features) - self.mean) / self.sd
        w = self.weights
        if "w1" in w:
            x = np.tanh(x @ w["w1"] + w["b1"])
        result: np.ndarray = np.asarray(x @ w["w"] + float(w["b"][0]), dtype=np.float64)
        return result

    @property
    def length_effect(self) -> float:
        """The score points of one sd of log length (what was left out of the scores)."""
        return float(self.weights.get("length", np.zeros(1))[0])

    @property
    def pair_scale(self) -> float:
        """The Bradley-Terry logit of one score point."""
        return float(np.exp(self.weights["log_scale"][0]))

    def pair_probability(self, first: float, second: float) -> float:
        """P(first preferred) from two scores (calibrated; ties ignored)."""
        logit = self.pair_scale * (first - second) / self.temperature
        return float(1.0 / (1.0 + math.exp(-logit)))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "mean": self.mean.tolist(),
            "sd": self.sd.tolist(),
            "weights": {k: v.tolist() for k, v in self.weights.items()},
            "length_mean": self.length_mean,
            "length_sd": self.length_sd,
            "temperature": self.temperature,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PreferenceHead:
        """The head :meth:`to_dict` wrote."""
        return cls(
            np.asarray(data["mean"], dtype=np.float64),
            np.asarray(data["sd"], dtype=np.float64),
            {k: np.asarray(v, dtype=np.float64) for k, v in data["weights"].items()},
            float(data["length_mean"]),
            float(data["length_sd"]),
            float(data["temperature"]),
        )


def fit_head(
    features: np.ndarray,
    lengths: np.ndarray,
    targets: np.ndarray,
    pairs: Sequence[tuple[int, int, float]],
    config: PreferenceConfig,
    ratings: Sequence[tuple[int, int]] = (),
    levels: int = 0,
    negatives: Sequence[tuple[int, int]] = (),
) -> PreferenceHead:
    """Fit the head on standardised features: mean squared error on the rated stories (or,
    with the ordinal rating loss, the ordered-logit likelihood of ``ratings``, ``(story,
    level)`` on a scale of ``levels``), the Davidson-Bradley-Terry likelihood of the pairs,
    both when both exist (weighted so that each counts as one objective), the ranking loss of
    the ``negatives`` (``(original, copy)``: the copy must score lower, with weight
    ``config.negative_weight``), plus weight decay. The copies are left out of the features'
    standardisation, so a head that learns nothing from them equals one trained without."""
    import torch

    from storyeval.learn.ordinal import initial_thresholds

    if config.l2 == "auto":
        raise ValueError("l2='auto' is chosen per training set: fit through train_preference")
    l2 = float(config.l2)
    real = np.ones(len(features), dtype=bool)
    real[[copy for _, copy in negatives]] = False
    mean, sd = _column_moments(features[real])
    length_mean, length_sd = float(lengths[real].mean()), float(lengths[real].std() + 1e-6)
    generator = torch.Generator().manual_seed(config.seed)
    filled = np.where(np.isnan(features), mean, features)  # undefined: the mean (standard 0)
    x = torch.tensor((filled - mean) / sd, dtype=torch.float64)
    z = torch.tensor((lengths - length_mean) / length_sd, dtype=torch.float64)
    params = _initial_weights(x.shape[1], config, generator)
    if config.rating_loss == "ordinal" and len(ratings) > 0:
        params.update(initial_thresholds(levels))
    objectives = _HeadObjectives(targets, pairs, ratings, negatives, config)
    optimizer = torch.optim.Adam(list(params.values()), lr=config.learning_rate)
    for _ in range(config.steps):
        optimizer.zero_grad()
        plain = _forward(params, x)  # the score without length: what is reported
        score = plain + (params["length"] * z if config.length_covariate else 0.0)
        loss = objectives(params, score, plain)
        penalty = _penalty(params, len(config.metric_features))
        (loss + l2 * penalty).backward()
        optimizer.step()
    weights = {k: v.detach().numpy().copy() for k, v in params.items()}
    return PreferenceHead(mean, sd, weights, length_mean, length_sd)


class _HeadObjectives:
    """The head's loss: the ratings' objective, the pairs' and the negatives'."""

    def __init__(
        self,
        targets: np.ndarray,
        pairs: Sequence[tuple[int, int, float]],
        ratings: Sequence[tuple[int, int]],
        negatives: Sequence[tuple[int, int]],
        config: PreferenceConfig,
    ) -> None:
        import torch

        self.ordinal = config.rating_loss == "ordinal" and len(ratings) > 0
        if self.ordinal:
            self.rated_story, self.rated_level = (
                torch.tensor(c) for c in zip(*ratings, strict=True)
            )
        self.rated = torch.tensor(np.isfinite(targets))
        self.y = torch.tensor(np.nan_to_num(targets), dtype=torch.float64)
        self.pairs = [torch.tensor(c) for c in zip(*pairs, strict=True)] if pairs else []
        self.weight = config.negative_weight
        self.negatives = (
            [torch.tensor(c) for c in zip(*negatives, strict=True)]
            if negatives and self.weight
            else []
        )

    def __call__(self, params: Mapping[str, Any], score: Any, plain: Any) -> Any:
        import torch
        import torch.nn.functional as F

        from storyeval.learn.ordinal import ordinal_nll

        loss = torch.zeros((), dtype=torch.float64)
        if self.ordinal:
            loss = loss + ordinal_nll(params, score[self.rated_story], self.rated_level)
        elif bool(self.rated.any()):
            loss = loss + ((score - self.y)[self.rated] ** 2).mean()
        if self.pairs:
            first, second, outcome = self.pairs
            loss = loss + _davidson_nll(params, score[first], score[second], outcome)
        if self.negatives:  # length is left out: a repeated sentence may not buy length's credit
            original, copy = self.negatives
            loss = loss + self.weight * F.softplus(plain[copy] - plain[original]).mean()
        return loss


def _penalty(params: Mapping[str, Any], metric_columns: int) -> Any:
    """The weight decay: every weight of the embedding; a linear head's metric features
    (the last columns) are left free, as the length covariate is: a few named features,
    each worth what the data say, should not be shrunk towards the embedding's hundreds."""
    if "w1" in params:
        return (params["w1"] ** 2).sum() + (params["w"] ** 2).sum()
    weights = params["w"][: params["w"].shape[0] - metric_columns]
    return (weights**2).sum()


def _column_moments(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's mean and sd over its defined values (NaN: a metric feature undefined for
    a story); a column with none gets mean 0, and a constant column sd 1e-6 as before."""
    if not np.isnan(features).any():
        return features.mean(axis=0), features.std(axis=0) + 1e-6
    defined = ~np.isnan(features)
    counts = np.maximum(defined.sum(axis=0), 1)
    mean = np.where(defined, features, 0.0).sum(axis=0) / counts
    spread = np.where(defined, (features - mean) ** 2, 0.0).sum(axis=0) / counts
    return mean, np.sqrt(spread) + 1e-6


def _initial_weights(width: int, config: PreferenceConfig, generator: Any) -> dict[str, Any]:
    import torch

    def parameter(*shape: int, scale: float = 0.0) -> Any:
        values = torch.randn(*shape, generator=generator, dtype=torch.float64) * scale
        return values.requires_grad_(True)

    params = {"b": parameter(1), "length": parameter(1), "log_scale": parameter(1)}
    params["log_tie"] = parameter(1)
    params["log_tie"].data.fill_(-1.0)
    if config.hidden:
        params["w1"] = parameter(width, config.hidden, scale=1 / math.sqrt(width))
        params["b1"] = parameter(config.hidden)
        params["w"] = parameter(config.hidden, scale=1 / math.sqrt(config.hidden))
    else:
        params["w"] = parameter(width)
    return params


def _forward(params: Mapping[str, Any], x: Any) -> Any:
    import torch

    if "w1" in params:
        x = torch.tanh(x @ params["w1"] + params["b1"])
    return x @ params["w"] + params["b"]


def _davidson_nll(params: Mapping[str, Any], first: Any, second: Any, outcome: Any) -> Any:
    """Davidson's (1970) ties: P(i) ∝ pi_i, P(j) ∝ pi_j, P(tie) ∝ nu sqrt(pi_i pi_j), with
    log pi = scale * score."""
    import torch

    k = torch.exp(params["log_scale"])
    a, b = k * first, k * second
    tie = params["log_tie"] + (a + b) / 2
    log_norm = torch.logsumexp(torch.stack([a, b, tie.expand_as(a)]), dim=0)
    won = outcome == 1.0
    ll = torch.where(won, a - log_norm, tie - log_norm)
    return -ll.mean()


def fit_temperature(
    head: PreferenceHead, scores: np.ndarray, pairs: Sequence[tuple[int, int, float]]
) -> float:
    """The temperature that makes held-out pair probabilities calibrated (the NLL over the
    decided pairs, on a grid then refined); 1 without decided pairs."""
    decided = [(i, j) for i, j, outcome in pairs if outcome == 1.0]
    if len(decided) < 5:
        return 1.0
    gaps = np.array([scores[i] - scores[j] for i, j in decided]) * head.pair_scale

    def nll(temperature: float) -> float:
        return float(np.mean(np.logaddexp(0.0, -gaps / temperature)))

    grid = np.exp(np.linspace(math.log(0.05), math.log(20.0), 121))
    best = float(grid[int(np.argmin([nll(t) for t in grid]))])
    return best


# --------------------------------------------------------------------------- splits and CV


def group_folds(groups: Sequence[str], folds: int, seed: int) -> list[np.ndarray]:
    """The stories of each fold (by group: no group in two folds), groups shuffled by
    ``seed`` and dealt round-robin by size.

    >>> [f.tolist() for f in group_folds(["p1", "p1", "p2", "p3", "p3", "p4"], 2, 0)]
    [[2, 3, 4], [0, 1, 5]]
    """
    names = sorted(set(groups))
    if folds < 2 or folds > len(names):
        raise PreferenceDataError(f"{folds} folds need between 2 and {len(names)} groups")
    order = np.random.default_rng(seed).permutation(len(names))
    members: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    ranked = sorted((names[k] for k in order), key=lambda g: -len(members[g]))
    buckets: list[list[int]] = [[] for _ in range(folds)]
    for group in ranked:
        smallest = min(range(folds), key=lambda f: (len(buckets[f]), f))
        buckets[smallest] += members[group]
    return [np.array(sorted(bucket), dtype=np.int64) for bucket in buckets]


@dataclass
class CrossValidation:
    """Held-out predictions of every story, the fold that held each out (-1: none) and the
    summary table."""

    predictions: np.ndarray
    table: Any
    folds: int
    fold_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def cross_validate(
    data: PreferenceData,
    features: np.ndarray | None,
    lengths: np.ndarray,
    config: PreferenceConfig,
    *,
    folds: int = 5,
    n_boot: int = 1000,
    tuned: Callable[[np.ndarray], np.ndarray] | None = None,
) -> CrossValidation:
    """Train on all folds but one and predict the held-out one, for every fold: the held-out
    pairwise accuracy (decided pairs with both stories held out) and the story-level Kendall
    tau between predictions and mean ratings, pooled over folds, with percentile bootstrap
    intervals; a length-only baseline beside them. ``tuned(train)`` (instead of
    ``features``, which may then be None) gives every story's features from a model trained
    on the fold's training stories only (a fine-tuned encoder)."""
    predictions = np.full(len(data.stories), np.nan)
    fold_of = np.full(len(data.stories), -1, dtype=np.int64)
    for number, held in enumerate(_story_folds(data, folds, config.seed)):
        fold_of[held] = number
        train = np.setdiff1d(np.arange(len(data.stories)), held)
        fold_features = tuned(train) if tuned is not None else features
        if fold_features is None:
            raise ValueError("give features or tuned")
        head = _fit_subset(data, fold_features, lengths, config, train)
        predictions[held] = _held_out(head, fold_features[held], data)
    rows = [
        _summary_rows("model", predictions, data, n_boot, config.seed),
        _summary_rows("length (log words)", lengths, data, n_boot, config.seed),
        _negative_rows("model", predictions, data, n_boot, config.seed),
        _negative_rows("length (log words)", lengths, data, n_boot, config.seed),
    ]
    import pandas as pd

    table = pd.DataFrame([row for pair in rows for row in pair])
    return CrossValidation(predictions, table, folds, fold_of)


def heldout_scores(
    data: PreferenceData, result: CrossValidation, signature: Signature, *, name: str = ""
) -> list[Score]:
    """The judged stories' held-out predictions as scores (metric
    ``preference_heldout:NAME``, NAME the model directory's name so that several models'
    files can be read together; in standard deviations of the mean rating, each with its
    fold), to compare the model with any metric on the same stories (``storyeval
    correlate``, ``compare``, ``report``): every story was scored by a head that never saw
    its prompt. Copies are left out."""
    heldout = Signature(HELDOUT_METRIC, {**signature.fields, "folds": result.folds})
    rendered = heldout.render()
    metric = f"{HELDOUT_METRIC}:{name}" if name else HELDOUT_METRIC
    return [
        Score(story.id, metric, float(prediction), rendered, {"fold": int(fold)})
        for story, prediction, fold, synthetic in zip(
            data.stories, result.predictions, result.fold_of, data.synthetic, strict=True
        )
        if not synthetic and fold >= 0
    ]


def _story_folds(
    data: PreferenceData, folds: int, seed: int, members: np.ndarray | None = None
) -> list[np.ndarray]:
    """The folds of the judged stories (:func:`group_folds`; of those among ``members``),
    each perturbed copy in its original's: the copies change neither the folds nor, when not
    learned from, the numbers."""
    real = np.flatnonzero(~data.synthetic)
    if members is not None:
        real = np.intersect1d(real, members)
    dealt = group_folds([data.groups[i] for i in real], folds, seed)
    fold_of = {int(real[k]): number for number, fold in enumerate(dealt) for k in fold}
    for original, copy, _ in data.negatives:
        if original in fold_of:
            fold_of[copy] = fold_of[original]
    stories: list[list[int]] = [[] for _ in dealt]
    for story, number in sorted(fold_of.items()):
        stories[number].append(story)
    return [np.array(fold, dtype=np.int64) for fold in stories]


def _held_out(head: PreferenceHead, features: np.ndarray, data: PreferenceData) -> np.ndarray:
    """Predictions comparable across folds: the standardised score, or with the ordinal loss
    the expected rating, standardised as the mean ratings are."""
    scores = head.scores(features)
    if not data.ratings:
        return scores
    from storyeval.learn.ordinal import expected_ratings

    expected = expected_ratings(head.weights, scores, data.levels)
    standard: np.ndarray = (expected - data.target_mean) / data.target_sd
    return standard


def pairs_within(
    pairs: Sequence[tuple[int, int, _T]], members: np.ndarray
) -> list[tuple[int, int, _T]]:
    """The pairs (or negatives) whose two stories are both among ``members``, indexed by
    position there.

    >>> pairs_within([(0, 2, 1.0), (1, 2, 0.5)], np.array([0, 2]))
    [(0, 1, 1.0)]
    """
    position = {int(i): k for k, i in enumerate(members)}
    return [(position[i], position[j], o) for i, j, o in pairs if i in position and j in position]


def _fit_subset(
    data: PreferenceData,
    features: np.ndarray,
    lengths: np.ndarray,
    config: PreferenceConfig,
    members: np.ndarray,
) -> PreferenceHead:
    """A head fitted on the stories ``members`` (their targets and the pairs within them);
    with ``select_features``, the features are first chosen within them
    (:func:`selected_columns`); with ``l2="auto"``, the weight decay is first chosen by
    cross-validation within them."""
    if config.select_features:
        columns = selected_columns(data, features, lengths, config, members)
        offset = features.shape[1] - len(config.metric_features)
        kept = tuple(config.metric_features[c - offset] for c in columns if c >= offset)
        plain = replace(config, select_features=False, metric_features=kept)  # their count:
        head = _fit_subset(data, features[:, columns], lengths, plain, members)  # left free
        return _expanded(head, columns, features.shape[1])
    if config.l2 == "auto":
        config = replace(config, l2=chosen_l2(data, features, lengths, config, members))
    pairs = pairs_within(data.pairs, members)
    position = {int(i): k for k, i in enumerate(members)}
    ratings = [(position[i], level) for i, level in data.ratings if i in position]
    return fit_head(
        features[members],
        lengths[members],
        data.targets[members],
        pairs,
        config,
        ratings,
        len(data.levels),
        negatives_within(data.negatives, members),
    )


#: The weight decays ``l2="auto"`` chooses from.
L2_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
#: The folds of that choice.
L2_FOLDS = 3


def chosen_l2(
    data: PreferenceData,
    features: np.ndarray,
    lengths: np.ndarray,
    config: PreferenceConfig,
    members: np.ndarray,
) -> float:
    """The weight decay of :data:`L2_GRID` whose heads, trained on all but one of
    :data:`L2_FOLDS` prompt-disjoint folds of ``members``, agree best with people on the
    held-out fold (Kendall tau-b with the mean ratings, pooled over folds; the pairwise
    accuracy without ratings); the larger on a tie. The smallest when ``members`` hold too
    few prompts to split."""
    from scipy.stats import kendalltau

    judged = members[~data.synthetic[members]]
    if len({data.groups[i] for i in judged}) < L2_FOLDS:
        return L2_GRID[0]
    folds = _story_folds(data, L2_FOLDS, config.seed, members)
    rated = judged[np.isfinite(data.targets[judged])]
    decided = [(i, j) for i, j, o in pairs_within(data.pairs, judged) if o == 1.0]
    best, best_agreement = L2_GRID[0], -np.inf
    for l2 in L2_GRID:
        trial = replace(config, l2=l2)
        predictions = np.full(len(data.stories), np.nan)
        for held in folds:
            head = _fit_subset(data, features, lengths, trial, np.setdiff1d(members, held))
            predictions[held] = _held_out(head, features[held], data)
        if len(rated) >= 3:
            agreement = float(kendalltau(predictions[rated], data.targets[rated]).statistic)
        else:
            gaps = [predictions[judged[i]] - predictions[judged[j]] for i, j in decided]
            agreement = float(np.mean(np.sign(gaps))) if gaps else 0.0
        if np.nan_to_num(agreement, nan=-1.0) >= best_agreement:
            best, best_agreement = l2, np.nan_to_num(agreement, nan=-1.0)
    return best


#: The most metric features :func:`selected_columns` adds one by one
SELECT_MOST = 5


def selected_columns(
    data: PreferenceData,
    features: np.ndarray,
    lengths: np.ndarray,
    config: PreferenceConfig,
    members: np.ndarray,
) -> np.ndarray:
    """The feature columns a head fitted on ``members`` uses, chosen within them: metric
    features (the last columns) added one at a time, each time the one whose linear models,
    trained on all but one of :data:`L2_FOLDS` folds of ``members``, agree best with people on
    the held-out fold, while that agreement grows (at most :data:`SELECT_MOST`: a few strong
    scores); then every metric feature, and every feature (the encoder's with them), each
    kept only if it agrees better still. The search fits a ridge regression to the ratings,
    or a logistic regression to the pairs' feature differences (fast); the head is then
    fitted on the columns chosen."""
    width, count = features.shape[1], len(config.metric_features)
    metric = list(range(width - count, width))
    judged = members[~data.synthetic[members]]
    if len({data.groups[i] for i in judged}) < L2_FOLDS:
        return np.arange(width)
    folds = _story_folds(data, L2_FOLDS, config.seed, members)

    def agreement(columns: list[int]) -> float:
        predictions = np.full(len(data.stories), np.nan)
        for held in folds:
            train = np.setdiff1d(judged, held)
            predictions[held] = _proxy_predictions(data, features[:, columns], train, held)
        return float(np.nan_to_num(_column_agreement(data, predictions, judged), nan=-1.0))

    chosen: list[int] = []
    best = -np.inf
    while len(chosen) < min(SELECT_MOST, count):
        found, column = max((agreement([*chosen, c]), c) for c in metric if c not in chosen)
        if found <= best + 1e-12:
            break
        chosen, best = [*chosen, column], found
    for larger in ([*metric], list(range(width))):
        if len(larger) > len(chosen) and agreement(larger) > best + 1e-12:
            chosen, best = larger, agreement(larger)
    return np.sort(np.asarray(chosen))


def _head_notes(
    summary: dict[str, Any], head: PreferenceHead, config: PreferenceConfig, width: int
) -> None:
    """A warning when the held-out agreement is below chance, and the features a selecting
    head kept."""
    warning = wrong_sign_note(summary.get("cross_validation", []), config, head.length_effect)
    if warning:
        summary["notes"].append(warning)
        summary["held_out_below_chance"] = True
    if config.select_features:
        summary["selected_features"] = selected_names(head, config, width)


def wrong_sign_note(
    table: Sequence[Mapping[str, Any]], config: PreferenceConfig, length_effect: float
) -> str:
    """A warning when the held-out agreement is below chance with its whole interval (the
    model learned a direction its held-out stories contradict), and the likely cause: with
    the length covariate, a length effect learned beside features that go with length leaves
    them weighted against it (suppression), so the scores, without length, order stories
    against people while length alone orders them with people. Empty when there is none."""
    rows = {(r["predictor"], r["statistic"]): r for r in table}
    for statistic, chance in (("kendall_tau_b", 0.0), ("pairwise_accuracy", 0.5)):
        model = rows.get(("model", statistic))
        if model is None or not model["ci_high"] < chance:
            continue
        note = (
            f"WARNING: the held-out {statistic} is {model['estimate']:.3f} "
            f"[{model['ci_low']:.3f}, {model['ci_high']:.3f}], below chance ({chance:g}): the "
            "model learned a direction its held-out stories contradict; do not use its scores"
        )
        length = rows.get(("length (log words)", statistic))
        if config.length_covariate and length is not None and length["estimate"] > chance:
            note += (
                f". Length alone agrees with people ({length['estimate']:.3f}) and its effect "
                f"({length_effect:+.2f} sd) was learned beside the features and left out of "
                "the scores, which leaves features that go with length weighted against it: "
                "train with --no-length-covariate"
            )
        return note
    return ""


def selected_names(head: PreferenceHead, config: PreferenceConfig, width: int) -> list[str]:
    """The features a selecting head kept: its metric features by name, ``encoder`` for the
    encoder's."""
    kept = [int(c) for c in head.weights.get("selected", np.arange(width))]
    offset = width - len(config.metric_features)
    names = [config.metric_features[c - offset] for c in kept if c >= offset]
    return (["encoder"] if any(c < offset for c in kept) else []) + names


def _proxy_predictions(
    data: PreferenceData, features: np.ndarray, train: np.ndarray, held: np.ndarray
) -> np.ndarray:
    """The held-out scores of a quick linear model of the training stories: ridge regression
    on the mean ratings where three or more are rated, else logistic regression on the
    decided pairs' standardised feature differences (both orders)."""
    from sklearn.linear_model import LogisticRegression, Ridge

    mean, sd = _column_moments(features[train])
    x = (np.where(np.isnan(features), mean, features) - mean) / sd
    rated = train[np.isfinite(data.targets[train])]
    if len(rated) >= 3:
        return np.asarray(Ridge(alpha=1.0).fit(x[rated], data.targets[rated]).predict(x[held]))
    decided = [(train[i], train[j]) for i, j, o in pairs_within(data.pairs, train) if o == 1.0]
    if not decided:
        return np.zeros(len(held))
    gaps = np.array([x[i] - x[j] for i, j in decided])
    model = LogisticRegression(C=1.0, fit_intercept=False, max_iter=1000)
    model.fit(np.vstack([gaps, -gaps]), np.r_[np.ones(len(gaps)), np.zeros(len(gaps))])
    return np.asarray(x[held] @ model.coef_[0])


def _column_agreement(data: PreferenceData, values: np.ndarray, members: np.ndarray) -> float:
    """How well ``values`` order the people's judgments of ``members``: Kendall's tau-b with
    the mean ratings where there are three or more, else the mean sign of the decided pairs'
    gaps (2 x pairwise accuracy - 1)."""
    from scipy.stats import kendalltau

    judged = members[~data.synthetic[members]]
    rated = judged[np.isfinite(data.targets[judged]) & np.isfinite(values[judged])]
    if len(rated) >= 3:
        return float(kendalltau(values[rated], data.targets[rated]).statistic)
    decided = [(i, j) for i, j, o in pairs_within(data.pairs, judged) if o == 1.0]
    gaps = [values[judged[i]] - values[judged[j]] for i, j in decided]
    gaps = [g for g in gaps if np.isfinite(g)]
    return float(np.mean(np.sign(gaps))) if gaps else 0.0


def _expanded(head: PreferenceHead, columns: np.ndarray, width: int) -> PreferenceHead:
    """A head fitted on some feature columns, as a head over all ``width`` columns (the others
    weighted 0); ``weights["selected"]`` records the columns."""
    mean, sd = np.zeros(width), np.ones(width)
    mean[columns], sd[columns] = head.mean, head.sd
    weights = dict(head.weights)
    first = "w1" if "w1" in weights else "w"
    full = np.zeros((width, *weights[first].shape[1:]))
    full[columns] = weights[first]
    weights[first] = full
    weights["selected"] = np.asarray(columns, dtype=np.float64)
    return replace(head, mean=mean, sd=sd, weights=weights)


def negatives_within(
    negatives: Sequence[tuple[int, int, str]], members: np.ndarray
) -> list[tuple[int, int]]:
    """The negatives whose original and copy are both among ``members``, indexed there.

    >>> negatives_within([(0, 3, "repetition"), (1, 4, "repetition")], np.array([0, 1, 3]))
    [(0, 2)]
    """
    return [(i, j) for i, j, _ in pairs_within(negatives, members)]


def _summary_rows(
    name: str, scores: np.ndarray, data: PreferenceData, n_boot: int, seed: int
) -> list[dict[str, Any]]:
    """Held-out pairwise accuracy and story-level Kendall tau of ``scores``, with intervals."""
    rng = np.random.default_rng(seed)
    decided = [(i, j) for i, j, o in data.pairs if o == 1.0 and np.isfinite(scores[[i, j]]).all()]
    rows = []
    if decided:
        rows.append(_won_row(name, "pairwise_accuracy", scores, decided, n_boot, rng))
    rated = np.isfinite(data.targets) & np.isfinite(scores)
    if rated.sum() >= 3:
        rows.append(_kendall_row(name, scores[rated], data.targets[rated], n_boot, rng))
        within = _within_system_row(name, scores, data, rated, n_boot, seed)
        rows += [within] if within else []
    return rows


def _within_system_row(
    name: str,
    scores: np.ndarray,
    data: PreferenceData,
    rated: np.ndarray,
    n_boot: int,
    seed: int,
) -> dict[str, Any] | None:
    """Kendall tau-b within each system across its ``rated`` stories, averaged over systems
    (the ``within_system`` level of :func:`storyeval.meta.level_correlation`): the agreement
    that telling the systems apart (human from generated) cannot give. None with fewer than
    two systems."""
    from storyeval.meta.correlation import level_correlation

    systems = np.array([story.system for story in data.stories], dtype=object)[rated]
    if len({system for system in systems if system is not None}) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a system without variance is skipped, not an error
        found = level_correlation(
            scores[rated],
            data.targets[rated],
            level="within_system",
            systems=systems,
            method="kendall",
            n_boot=n_boot,
            seed=seed,
        )
    if not np.isfinite(found["estimate"]):
        return None
    statistic = "kendall_tau_b_within_system"
    return _row(name, statistic, found["estimate"], found["ci_low"], found["ci_high"], found["n"])


def _negative_rows(
    name: str, scores: np.ndarray, data: PreferenceData, n_boot: int, seed: int
) -> list[dict[str, Any]]:
    """Per technique, the share of held-out perturbed copies scored below their original
    (a tie counts one half), with a bootstrap interval over the copies."""
    rng = np.random.default_rng(seed)
    techniques = list(dict.fromkeys(technique for _, _, technique in data.negatives))
    rows = []
    for technique in techniques:
        chosen = [(i, j) for i, j, t in data.negatives if t == technique]
        statistic = f"{technique}_scored_lower"
        rows.append(_won_row(name, statistic, scores, chosen, n_boot, rng))
    return rows


def _won_row(
    name: str,
    statistic: str,
    scores: np.ndarray,
    ordered: Sequence[tuple[int, int]],
    n_boot: int,
    rng: np.random.Generator,
) -> dict[str, Any]:
    """The share of the pairs ``(i, j)`` whose ``i`` scores above ``j`` (a tie one half),
    with a percentile-bootstrap interval over the pairs."""
    wins = np.array([scores[i] > scores[j] for i, j in ordered], dtype=float)
    wins[[scores[i] == scores[j] for i, j in ordered]] = 0.5
    boots = [wins[rng.integers(0, len(wins), len(wins))].mean() for _ in range(n_boot)]
    low, high = _interval(boots, n_boot)
    return _row(name, statistic, float(wins.mean()), low, high, len(wins))


def _kendall_row(
    name: str, scores: np.ndarray, targets: np.ndarray, n_boot: int, rng: np.random.Generator
) -> dict[str, Any]:
    from scipy.stats import kendalltau

    tau = float(kendalltau(scores, targets).statistic)
    boots = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(scores), len(scores))
        value = kendalltau(scores[pick], targets[pick]).statistic
        boots.append(value if value == value else np.nan)
    low, high = _interval(boots, n_boot)
    return _row(name, "kendall_tau_b", tau, low, high, len(scores))


def _interval(boots: Sequence[float], n_boot: int) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap replicates (NaN without any)."""
    from storyeval.stats import percentile_interval

    if not n_boot:
        return np.nan, np.nan
    low, high = percentile_interval(np.array(boots), confidence=0.95)
    return float(low), float(high)


def _row(
    predictor: str, statistic: str, estimate: float, low: float, high: float, n: int
) -> dict[str, Any]:
    return {
        "predictor": predictor,
        "statistic": statistic,
        "estimate": estimate,
        "ci_low": low,
        "ci_high": high,
        "n": n,
    }


# --------------------------------------------------------------------------- the model


@dataclass
class PreferenceModel:
    """A trained preference model: its head, settings, signature and data scale.

    ``score(stories)`` gives each story's score on the rating scale when the model learned
    one criterion's ratings (the mean rating it predicts), else in standard deviations.
    """

    directory: Path
    config: PreferenceConfig
    head: PreferenceHead
    signature: Signature
    feature_identity: str
    target_mean: float = 0.0
    target_sd: float = 1.0
    scale: tuple[float, float] | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    levels: tuple[float, ...] = ()

    @property
    def feature_config(self) -> PreferenceConfig:
        """The settings its features are computed with: a fine-tuned model reads its own
        encoder, saved beside it."""
        if not self.config.fine_tune_epochs:
            return self.config
        from storyeval.learn.preference_tune import ENCODER_DIR

        return replace(self.config, model=str(self.directory / ENCODER_DIR))

    @property
    def identity(self) -> str:
        """The model's name and the hash of its file (for signatures)."""
        digest = hashlib.sha256((self.directory / MODEL_FILE).read_bytes()).hexdigest()[:12]
        return f"{self.directory.name}@{digest}"

    def score(
        self,
        stories: Sequence[Story],
        *,
        device: str = "cpu",
        precision: str = "float32",
        scoring: Any = None,
    ) -> np.ndarray:
        """Each story's score (see the class docstring; ``scoring``: see story_features)."""
        features, _, _ = story_features(
            stories, self.feature_config, device=device, precision=precision, scoring=scoring
        )
        return self.to_scale(self.head.scores(features))

    def trained_on(self, stories: Sequence[Story]) -> int | None:
        """How many of ``stories`` (by text) the model was trained on; None for a model
        whose directory does not list its training texts (trained before storyeval 0.8)."""
        path = self.directory / TRAINING_TEXTS_FILE
        if not path.is_file():
            return None
        keys = set(path.read_text(encoding="utf-8").split())
        return sum(text_key(story.story) in keys for story in stories)

    def to_scale(self, standard: np.ndarray) -> np.ndarray:
        """Standardised scores on the rating scale (unchanged without one criterion)."""
        if self.scale is None:
            return standard
        if self.levels:  # the ordinal loss: the expected rating
            from storyeval.learn.ordinal import expected_ratings

            return expected_ratings(self.head.weights, np.atleast_1d(standard), self.levels)
        return standard * self.target_sd + self.target_mean

    def level_probabilities(self, standard: np.ndarray) -> np.ndarray:
        """With the ordinal rating loss: each standardised score's probability of each of
        the scale's ``levels``, shape ``(n, len(levels))``."""
        from storyeval.learn.ordinal import level_probabilities

        if not self.levels:
            raise ValueError("this model learned mean ratings, not a distribution over levels")
        return level_probabilities(self.head.weights, np.atleast_1d(standard))

    def pair_probability(self, first: Story, second: Story) -> float:
        """P(``first`` preferred to ``second``), calibrated."""
        features, _, _ = story_features([first, second], self.feature_config)
        a, b = self.head.scores(features)
        return self.head.pair_probability(float(a), float(b))

    def label_probabilities(self, value: float, labels: Sequence[float]) -> list[float]:
        """A distribution over a rating scale's labels whose expected value is the predicted
        rating (clipped to the scale): a normal of the model's held-out error (its
        cross-validated residual sd, else 1), discretised, its centre moved until the mean
        is ``value``."""
        points = np.asarray(labels, dtype=float)
        spread = float(self.summary.get("residual_sd") or 1.0)
        target = float(np.clip(value, points.min(), points.max()))

        def distribution(centre: float) -> np.ndarray:
            weights: np.ndarray = np.exp(-0.5 * ((points - centre) / spread) ** 2)
            return weights / float(weights.sum())

        low, high = points.min() - 10 * spread, points.max() + 10 * spread
        for _ in range(80):  # the mean grows with the centre: bisection
            middle = (low + high) / 2
            if float(distribution(middle) @ points) < target:
                low = middle
            else:
                high = middle
        return [float(p) for p in distribution((low + high) / 2)]


def preference_signature(
    config: PreferenceConfig, data: PreferenceData, feature_identity: str
) -> Signature:
    """The model's signature: the feature model, every setting, and the data's hash."""
    return Signature(
        "preference",
        {
            "features_model": feature_identity,
            **config.signature_fields(),
            "stories": len(data.stories),
            "pairs": len(data.pairs),
            "data": data.data_hash(),
        },
    )


def train_preference(
    data: PreferenceData,
    output: str | Path,
    *,
    config: PreferenceConfig | None = None,
    folds: int = 5,
    n_boot: int = 1000,
    overwrite: bool = False,
    device: str = "cpu",
    precision: str = "float32",
    progress: Callable[[str], None] | None = None,
) -> PreferenceModel:
    """Cross-validate (``folds`` > 1), then train on every story and write the model to
    ``output``: the head, fitted on the training groups, with the pair temperature fitted on
    the held-out ``dev_fraction`` of groups, refitted on all stories. A directory holding a
    model trained with the same signature is returned as it is (a re-run does not train
    again); another model there is replaced only with ``overwrite``.

    The stories' features are kept in ``output/features/`` as they are computed: a run that
    was interrupted resumes from them, and a retraining (other head settings, more stories)
    encodes only the texts it has not seen. ``progress`` hears how many were reused."""
    config = config or PreferenceConfig()
    encode, identity = feature_encoder(config, device=device, precision=precision)
    signature = preference_signature(config, data, identity)
    directory = Path(output)
    reused = _existing(directory, signature, overwrite)
    if reused is not None:
        return reused
    summary: dict[str, Any] = {"notes": list(data.notes)}
    columns = np.zeros((len(data.stories), 0))
    if config.metric_features:
        columns, summary["metric_signatures"] = metric_columns(
            data.stories, config, device=device, precision=precision
        )
    lengths = _lengths(data.stories)
    tuning = (
        _FoldTuning(data, config, columns, device, precision, directory, identity, progress)
        if config.fine_tune_epochs
        else None
    )
    if tuning is None:
        stored, _ = _stored_features(data, config, encode, identity, precision, directory, progress)
        features = np.hstack([stored, columns])
    if folds > 1:
        result = cross_validate(
            data,
            None if tuning else features,
            lengths,
            config,
            folds=folds,
            n_boot=n_boot,
            tuned=tuning,
        )
        summary["cross_validation"] = result.table.to_dict("records")
        summary["folds"] = folds
        summary["residual_sd"] = _residual_sd(result.predictions, data)
    if tuning is not None:
        features, identity = tuning.final()
    final = config
    if config.l2 == "auto":  # chosen once on every story, and reported
        everything = np.arange(len(data.stories))
        final = replace(config, l2=chosen_l2(data, features, lengths, config, everything))
        summary["l2_chosen"] = final.l2
    head = _final_head(data, features, lengths, final)
    if tuning is not None and folds > 1:  # the final encoder saw every story: use held-out
        head.temperature = fit_temperature(head, result.predictions, data.pairs)
    summary["length_effect"] = head.length_effect
    _head_notes(summary, head, config, features.shape[1])
    if config.metric_features:
        summary["metric_effects"] = metric_feature_effects(head, config.metric_features)
    model = PreferenceModel(
        directory,
        config,
        head,
        signature,
        identity,
        data.target_mean,
        data.target_sd,
        data.scale,
        summary,
        levels=data.levels,
    )
    heldout = heldout_scores(data, result, signature, name=directory.name) if folds > 1 else []
    _write_beside(directory, data, heldout)
    _save(model)
    return load_preference(directory)


def _write_beside(directory: Path, data: PreferenceData, scores: Sequence[Score]) -> None:
    """The files beside the model, before the model file (the run's commit point): the keys
    of the judged stories' texts (a judge notes stories it was trained on), and the held-out
    scores (a stale file of an earlier run is removed when there are none)."""
    from storyeval.corpus import write_scores
    from storyeval.io import write_text_atomic

    directory.mkdir(parents=True, exist_ok=True)
    judged = {
        text_key(s.story) for s, copy in zip(data.stories, data.synthetic, strict=True) if not copy
    }
    write_text_atomic(directory / TRAINING_TEXTS_FILE, "".join(f"{k}\n" for k in sorted(judged)))
    path = directory / HELDOUT_FILE
    if scores:
        write_scores(path, scores)
    else:
        path.unlink(missing_ok=True)


#: The settings a fine-tuning depends on (the head's do not: a new head reuses the tuning).
TUNING_FIELDS = (
    "with_prompt",
    "criterion",
    "pointwise",
    "pairwise",
    "margin",
    "tie_margin",
    "seed",
    "fine_tune_epochs",
    "fine_tune_lr",
    "fine_tune_batch_size",
    "fine_tune_max_length",
)
#: The model directory's store of fine-tuned features (a re-run does not tune again).
TUNING_DIR = "tuning"


@dataclass
class _FoldTuning:
    """Fine-tuned features: for a fold, an encoder tuned on its training stories only; at the
    end, one tuned on every story and saved in the model directory. Each tuning's features
    are saved in ``directory/tuning/``, so an interrupted or repeated training (other head
    settings) does not tune again what it tuned before."""

    data: PreferenceData
    config: PreferenceConfig
    columns: np.ndarray
    device: str
    precision: str
    directory: Path
    base: str
    progress: Callable[[str], None] | None = None
    runs: int = 0

    def __call__(self, members: np.ndarray) -> np.ndarray:
        """Every story's features under an encoder tuned on the stories ``members``."""
        from storyeval.learn.preference_tune import store_tuning, stored_tuning, tuning_key

        key = tuning_key(self._fields(), members)
        tuned = stored_tuning(self.directory / TUNING_DIR, key)
        self.runs += 1
        if tuned is None:
            tuned = self._features(self._tune(members))
            store_tuning(self.directory / TUNING_DIR, key, tuned)
        else:
            self._say(f"fine-tuning {self.runs}: reused from {self.directory / TUNING_DIR}")
        return np.hstack([tuned, self.columns])

    def final(self) -> tuple[np.ndarray, str]:
        """The features of an encoder tuned on every story, saved, and its identity."""
        from storyeval.learn.preference_tune import (
            ENCODER_DIR,
            save_encoder,
            saved_encoder_identity,
            tuning_key,
        )

        key = "final-" + tuning_key(self._fields(), np.arange(len(self.data.stories)))
        reused = self._final_reused(key)
        if reused is not None:
            return reused
        self.runs += 1
        encoder = self._tune(np.arange(len(self.data.stories)))
        save_encoder(encoder, self.directory)
        self._say(f"fine-tuned encoder saved in {self.directory / ENCODER_DIR}")
        tuned = self._features(encoder)
        identity = str(saved_encoder_identity(self.directory))
        self._store_final(key, tuned, identity)
        return np.hstack([tuned, self.columns]), identity

    def _final_reused(self, key: str) -> tuple[np.ndarray, str] | None:
        """The final tuning's features when they and the encoder they came from are saved."""
        from storyeval.learn.preference_tune import (
            ENCODER_DIR,
            saved_encoder_identity,
            stored_tuning,
        )

        tuned = stored_tuning(self.directory / TUNING_DIR, key)
        record = self.directory / TUNING_DIR / f"{key}.identity"
        if tuned is None or not record.is_file():
            return None
        identity = record.read_text().strip()
        if identity != saved_encoder_identity(self.directory):
            return None
        self._say(f"fine-tuned encoder reused from {self.directory / ENCODER_DIR}")
        return np.hstack([tuned, self.columns]), identity

    def _store_final(self, key: str, tuned: np.ndarray, identity: str) -> None:
        from storyeval.io import write_text_atomic
        from storyeval.learn.preference_tune import store_tuning

        store_tuning(self.directory / TUNING_DIR, key, tuned)
        write_text_atomic(self.directory / TUNING_DIR / f"{key}.identity", identity + "\n")

    def _fields(self) -> dict[str, Any]:
        fields = {name: getattr(self.config, name) for name in TUNING_FIELDS}
        fields.update(base=self.base, data=self.data.data_hash(), device=self.device)
        fields["precision"] = self.precision
        if self.config.negatives:  # the keys of tunings without them stay as they were
            fields["negative_weight"] = self.config.negative_weight
        return fields

    def _say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    def _tune(self, members: np.ndarray) -> Any:
        from storyeval.learn.preference_tune import fine_tune_encoder

        copies = self.data.synthetic[members]
        if not self.config.negative_weight:  # measured only: tuned as without them
            members, copies = members[~copies], copies[~copies]
        pairs = pairs_within(self.data.pairs, members)
        texts = _feature_texts([self.data.stories[i] for i in members], self.config)
        epochs = self.config.fine_tune_epochs
        extra = f" and {int(copies.sum())} perturbed copies" if copies.any() else ""
        self._say(
            f"fine-tuning {self.runs}: the encoder on {int((~copies).sum())} stories{extra} "
            f"({epochs} epoch{'' if epochs == 1 else 's'})"
        )
        return fine_tune_encoder(
            texts,
            self.data.targets[members],
            pairs,
            [self.data.groups[i] for i in members],
            self.config,
            device=self.device,
            precision=self.precision,
            negatives=negatives_within(self.data.negatives, members),
        )

    def _features(self, encoder: Any) -> np.ndarray:
        from storyeval.learn.preference_tune import tuned_features

        features: np.ndarray = np.vstack(
            [
                tuned_features(encoder, part, device=self.device, precision=self.precision)
                for part in _encoded_apart(self.data, self.config)
            ]
        )
        return features


def _encoded_apart(data: PreferenceData, config: PreferenceConfig) -> list[list[str]]:
    """The feature texts of the judged stories, then those of their perturbed copies (which
    come last) as a second part: encoded apart, the judged stories' features are exactly
    those of a training without copies (a batch's padding does not change with them)."""
    texts = _feature_texts(data.stories, config)
    judged = len(texts) - len(data.negatives)
    return [texts[:judged], texts[judged:]] if data.negatives else [texts]


def _stored_features(
    data: PreferenceData,
    config: PreferenceConfig,
    encode: Callable[[list[str]], np.ndarray],
    identity: str,
    precision: str,
    directory: Path,
    progress: Callable[[str], None] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The stories' features through the model directory's store (``features/``), so an
    interrupted training resumes and a retraining encodes only what it has not seen."""
    from storyeval.learn.feature_store import FeatureStore
    from storyeval.metrics.context import windowed_texts

    store = FeatureStore.for_model(directory / FEATURES_DIR, identity, precision)
    with windowed_texts() as windowed:
        parts = [store.features(part, encode) for part in _encoded_apart(data, config)]
    note = (
        f"{len(windowed)} stories longer than the encoder's input were read in overlapping "
        "windows (never truncated)"
    )
    if windowed and note not in data.notes:
        data.notes.append(note)
    features = np.vstack([part for part, _ in parts])
    encoded = sum(count for _, count in parts)
    if progress is not None and encoded < len(data.stories):
        progress(
            f"features: {len(data.stories) - encoded} of {len(data.stories)} stories from "
            f"an earlier run ({store.directory}), {encoded} encoded now"
        )
    return features, _lengths(data.stories)


def metric_feature_effects(head: PreferenceHead, names: Sequence[str]) -> dict[str, float]:
    """A linear head's weight of each metric feature: the score sd one sd of the metric adds
    (the last columns of the features); empty for a head with a hidden layer."""
    if not names or "w1" in head.weights:
        return {}
    tail = head.weights["w"][-len(names) :]
    return {name: float(weight) for name, weight in zip(names, tail, strict=True)}


def _residual_sd(predictions: np.ndarray, data: PreferenceData) -> float | None:
    """The held-out prediction error, in rating points (one criterion)."""
    rated = np.isfinite(predictions) & np.isfinite(data.targets)
    if rated.sum() < 3 or data.scale is None:
        return None
    return float(np.std(predictions[rated] - data.targets[rated]) * data.target_sd)


def _final_head(
    data: PreferenceData, features: np.ndarray, lengths: np.ndarray, config: PreferenceConfig
) -> PreferenceHead:
    """Fit on the training groups, calibrate the pair temperature on the dev groups, refit on
    every story and keep the temperature."""
    names = sorted(set(data.groups))
    rng = np.random.default_rng(config.seed)
    dev_groups = set(rng.permutation(names)[: max(1, int(len(names) * config.dev_fraction))])
    dev = np.array([i for i, g in enumerate(data.groups) if g in dev_groups], dtype=np.int64)
    train = np.setdiff1d(np.arange(len(data.stories)), dev)
    temperature = 1.0
    if len(train) and len(dev):
        head = _fit_subset(data, features, lengths, config, train)
        dev_pairs = pairs_within(data.pairs, dev)
        temperature = fit_temperature(head, head.scores(features[dev]), dev_pairs)
    everything = np.arange(len(data.stories))
    head = _fit_subset(data, features, lengths, config, everything)
    head.temperature = temperature
    return head


def _existing(directory: Path, signature: Signature, overwrite: bool) -> PreferenceModel | None:
    """The model already in ``directory`` when trained with ``signature``; refuse another."""
    if not (directory / MODEL_FILE).is_file():
        return None
    found = load_preference(directory)
    if found.signature == signature:
        return found
    if not overwrite:
        from storyeval.learn.trainer import OutputDirectoryError

        raise OutputDirectoryError(
            f"{directory} holds a preference model trained with other settings or data; "
            "pass --overwrite to replace it"
        )
    return None


def _save(model: PreferenceModel) -> None:
    from storyeval.io import write_text_atomic

    model.directory.mkdir(parents=True, exist_ok=True)
    payload = {
        "kind": "preference",
        "signature": model.signature.to_dict(),
        "config": asdict(model.config),
        "feature_identity": model.feature_identity,
        "head": model.head.to_dict(),
        "target_mean": model.target_mean,
        "target_sd": model.target_sd,
        "scale": list(model.scale) if model.scale else None,
        "summary": model.summary,
    }
    if model.levels:  # the ordinal loss (files of the squared error stay as they were)
        payload["levels"] = list(model.levels)
    write_text_atomic(
        model.directory / MODEL_FILE, json.dumps(payload, indent=1, default=_json_default) + "\n"
    )


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON: {type(value).__name__}")


def load_preference(directory: str | Path) -> PreferenceModel:
    """A model written by :func:`train_preference`.

    Raises
    ------
    ModelLoadError
        When the directory holds no preference model.
    """
    from storyeval.errors import ModelLoadError

    path = Path(directory)
    file = path / MODEL_FILE
    if not file.is_file():
        raise ModelLoadError(
            f"{path}: no preference model ({MODEL_FILE}); train one with storyeval train preference"
        )
    data = json.loads(file.read_text(encoding="utf-8"))
    config = replace(PreferenceConfig(), **data["config"])
    if config.fine_tune_epochs:
        _check_tuned_encoder(path, str(data["feature_identity"]))
    return PreferenceModel(
        path,
        config,
        PreferenceHead.from_dict(data["head"]),
        Signature.from_dict(data["signature"]),
        str(data["feature_identity"]),
        float(data["target_mean"]),
        float(data["target_sd"]),
        tuple(data["scale"]) if data.get("scale") else None,
        dict(data.get("summary") or {}),
        tuple(float(v) for v in data.get("levels") or ()),
    )


def _check_tuned_encoder(directory: Path, expected: str) -> None:
    """Refuse a fine-tuned model whose saved encoder is missing or is not the one it was
    trained with (its files' hash is in the model file)."""
    from storyeval.errors import ModelLoadError
    from storyeval.learn.preference_tune import ENCODER_DIR, saved_encoder_identity

    encoder = directory / ENCODER_DIR
    found = saved_encoder_identity(directory)
    if found is None:
        raise ModelLoadError(f"{directory}: the fine-tuned encoder ({ENCODER_DIR}/) is missing")
    if found != expected:
        raise ModelLoadError(
            f"{encoder} is not the encoder this model was trained with ({found}, trained "
            f"with {expected}): train again"
        )
