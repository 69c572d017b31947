"""The judged stories a preference model learns from: ratings, comparisons, pairs, negatives."""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from storyeval.corpus import Judgment, Story
from storyeval.learn.preference.config import PreferenceConfig, PreferenceDataError

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
    from storyeval.corpus import prompt_id

    config = config or PreferenceConfig()
    stories, judgments, comparisons, left_out = _systems_only(
        stories, judgments, comparisons, systems, exclude_systems
    )
    stories = [s for s in stories if s.story.strip()]
    index = {s.id: i for i, s in enumerate(stories)}
    prompts = [str(prompt_id(s)) for s in stories]
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
