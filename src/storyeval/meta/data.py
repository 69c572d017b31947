"""Putting scores, judgments and stories side by side for meta-evaluation.

A :class:`MetaTable` holds, for every item (story), its system and prompt id, the value of
each metric and the aggregated human rating on each criterion. Correlations, the Williams
test, drift experiments and the report all start from one.

Where the system and prompt of an item come from, in order:

1. the ``system`` and ``prompt_id`` fields of the score records (``storyeval score`` writes
   them) or of the judgment records;
2. a story file: the story's ``system`` and its ``prompt_id`` field, else an id derived from
   the prompt text (:func:`storyeval.corpus.prompt_key`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storyeval.base.errors import DataCoverageWarning, MixedSignatureWarning, StoryevalError, warn
from storyeval.base.validation import check_choice
from storyeval.corpus import (
    Judgment,
    Score,
    Story,
    prompt_id,
    read_judgments,
    read_scores,
    read_stories,
)

AGGREGATIONS: tuple[str, ...] = ("mean", "median", "majority", "mace", "dawid-skene", "ordinal")


class MetaInputError(StoryevalError, ValueError):
    """Scores, judgments or stories cannot be combined (no common items, conflicting ids...)."""


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    text = str(value)
    return text if text.strip() else None


# --------------------------------------------------------------------------- aggregation


def _model_based(frame: pd.DataFrame, method: str) -> pd.DataFrame:
    """Each item's value per criterion under a competence model (see aggregate_ratings)."""
    return model_based_labels(frame, method)[0]


MODEL_AGGREGATIONS: tuple[str, ...] = ("mace", "dawid-skene", "ordinal")


def model_based_labels(
    frame: pd.DataFrame, method: str
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Each item's value per criterion under a competence model (``mace``, ``dawid-skene``,
    ``ordinal``; see :func:`aggregate_ratings`) and, per criterion, each item's posterior
    (for :func:`posterior_draws`)."""
    from storyeval.meta.competence import competence_tables

    _, items = competence_tables(frame, model=method)
    posteriors = {
        str(criterion): part.set_index("item_id").drop(columns=["criterion", "model"])
        for criterion, part in items.groupby("criterion")
    }
    if method == "ordinal":
        items["aggregate"] = items["expected_rating"]
    else:
        columns = [c for c in items.columns if c.startswith("p_")]
        values = [float(c.removeprefix("p_")) for c in columns]
        items["aggregate"] = items[columns].fillna(0.0).to_numpy() @ values
    wide = items.pivot_table(index="item_id", columns="criterion", values="aggregate")
    wide.columns = [str(c) for c in wide.columns]
    wide = wide.sort_index().reindex(sorted(wide.columns), axis=1)
    wide.index.name = "item_id"
    return wide.astype(float), posteriors


def posterior_draws(
    posterior: pd.DataFrame, items: Sequence[str], n_draws: int, seed: int
) -> np.ndarray:
    """``n_draws`` draws of each item's aggregate from its posterior, shape (n_draws, items):
    a label from MACE's or Dawid-Skene's posterior over the label values (``p_<value>``
    columns), or for the ordinal model a location from its normal approximation (the Wald
    interval) mapped to the expected rating through the items' own location-to-rating curve;
    nan for an item without a posterior.

    >>> post = pd.DataFrame({"p_1.0": [1.0, 0.5], "p_5.0": [0.0, 0.5]}, index=["a", "b"])
    >>> draws = posterior_draws(post, ["a", "b", "c"], 1000, seed=0)
    >>> draws[:, 0].tolist() == [1.0] * 1000, round(float(draws[:, 1].mean())), bool(np.isnan(draws[0, 2]))
    (True, 3, True)
    """
    from scipy.stats import norm

    rng = np.random.default_rng(seed)
    out = np.full((n_draws, len(items)), np.nan)
    known = [i for i, item in enumerate(items) if item in posterior.index]
    if not known:
        return out
    rows = posterior.loc[[items[i] for i in known]]
    columns = [c for c in posterior.columns if str(c).startswith("p_")]
    if columns:
        values = np.array([float(str(c).removeprefix("p_")) for c in columns])
        probs = np.nan_to_num(rows[columns].to_numpy(dtype=float))
        probs /= np.maximum(probs.sum(axis=1, keepdims=True), 1e-300)
        cumulative = np.cumsum(probs, axis=1)
        u = rng.random((n_draws, len(known), 1))
        picked = (u > cumulative[None, :, :]).sum(axis=2).clip(0, len(values) - 1)
        out[:, known] = values[picked]
        return out
    z = float(norm.ppf(0.975))
    location = rows["location"].to_numpy(dtype=float)
    se = (rows["ci_high"].to_numpy(dtype=float) - rows["ci_low"].to_numpy(dtype=float)) / (2 * z)
    order = np.argsort(posterior["location"].to_numpy(dtype=float))
    curve_x = posterior["location"].to_numpy(dtype=float)[order]
    curve_y = posterior["expected_rating"].to_numpy(dtype=float)[order]
    drawn = location + se * rng.standard_normal((n_draws, len(known)))
    out[:, known] = np.interp(drawn, curve_x, curve_y)
    return out


def aggregate_ratings(
    judgments: pd.DataFrame | Sequence[Judgment],
    *,
    method: str = "mean",
) -> pd.DataFrame:
    """Aggregate the raters' judgments into one value per item and criterion.

    Parameters
    ----------
    judgments : DataFrame or sequence of Judgment
        Long format: ``item_id``, ``rater_id``, ``criterion``, ``value``.
    method : {"mean", "median", "majority", "mace", "dawid-skene", "ordinal"}
        ``majority`` is for binary (or other categorical) labels: the most frequent value; an
        item whose most frequent values tie gets nan (with a warning), never an arbitrary pick.
        ``mace`` and ``dawid-skene`` give the posterior mean of the label values under a rater
        competence model, ``ordinal`` the expected rating by an average rater under an ordinal
        item-response model (:mod:`storyeval.meta.competence`): raters who answer at random
        count for little.

    Returns
    -------
    DataFrame
        Index ``item_id`` (sorted), one column per criterion (sorted); nan where an item was
        not rated on a criterion.

    Examples
    --------
    >>> import pandas as pd
    >>> long = pd.DataFrame({"item_id": ["a", "a", "a", "b", "b", "b"],
    ...                      "rater_id": ["r1", "r2", "r3"] * 2,
    ...                      "criterion": ["ok"] * 6, "value": [1, 1, 0, 0, 0, 1]})
    >>> aggregate_ratings(long, method="majority")["ok"].tolist()
    [1.0, 0.0]
    >>> aggregate_ratings(long)["ok"].round(3).tolist()
    [0.667, 0.333]
    """
    check_choice(method, AGGREGATIONS, "method")
    frame = judgments_frame(judgments)
    if frame.empty:
        return pd.DataFrame(index=pd.Index([], name="item_id"))
    if method in ("mace", "dawid-skene", "ordinal"):
        return _model_based(frame, method)
    grouped = frame.groupby(["item_id", "criterion"])["value"]
    if method == "mean":
        agg = grouped.mean()
    elif method == "median":
        agg = grouped.median()
    else:
        ties: list[str] = []

        def _majority(values: pd.Series) -> float:
            counts = values.value_counts()
            top = counts[counts == counts.max()]
            if len(top) > 1:
                ties.append(str(values.name))
                return float("nan")
            return float(top.index[0])

        agg = grouped.agg(_majority)
        if ties:
            warn(
                DataCoverageWarning,
                f"majority vote is tied for {len(ties)} item/criterion pair(s); their aggregate "
                "is nan (use an odd number of raters, or method='mean')",
            )
    wide = agg.unstack("criterion")
    wide.columns = [str(c) for c in wide.columns]
    wide = wide.sort_index().reindex(sorted(wide.columns), axis=1)
    wide.index.name = "item_id"
    return wide.astype(float)


def judgments_frame(judgments: pd.DataFrame | Sequence[Judgment]) -> pd.DataFrame:
    """Judgments as a DataFrame with string ids and float values (a frame is checked and
    copied).

    >>> judgments_frame([Judgment("a", "r1", "q", 4)]).to_dict("records")
    [{'item_id': 'a', 'rater_id': 'r1', 'criterion': 'q', 'value': 4.0}]
    """
    if isinstance(judgments, pd.DataFrame):
        frame = judgments
    else:
        frame = pd.DataFrame([j.to_dict() for j in judgments])
    missing = [c for c in ("item_id", "rater_id", "criterion", "value") if c not in frame.columns]
    if missing and not frame.empty:
        raise ValueError(f"judgments lack column(s) {', '.join(missing)}")
    if frame.empty:
        return pd.DataFrame(columns=["item_id", "rater_id", "criterion", "value"])
    out = frame.copy()
    out["item_id"] = out["item_id"].astype(str)
    out["rater_id"] = out["rater_id"].astype(str)
    out["criterion"] = out["criterion"].astype(str)
    out["value"] = pd.to_numeric(out["value"], errors="raise").astype(float)
    return out


# --------------------------------------------------------------------------- the table


@dataclass
class MetaTable:
    """Items with their metric values and aggregated human ratings.

    Attributes
    ----------
    items : DataFrame
        Index ``item_id`` (sorted, the items that have at least one metric value and one
        rating); columns ``system`` and ``prompt_id`` (None when unknown) and any extra
        story fields asked for.
    metrics : DataFrame
        Same index; one float column per metric (nan = undefined or not scored).
    human : DataFrame
        Same index; one float column per criterion, the aggregated rating.
    metric_signatures : dict of str to list of str
        The distinct signatures of each metric's scores.
    aggregation : str
        How raters were aggregated (``mean``, ``median``, ``majority``).
    n_raters : DataFrame
        Same index and columns as ``human``: the number of ratings behind each value.
    coverage : dict
        Counts: items scored, items judged, items in common.
    posteriors : dict of str to DataFrame
        With a competence model's aggregation: per criterion, each item's posterior (draws in
        :meth:`label_draws` carry its uncertainty into the bootstraps); empty otherwise.
    """

    items: pd.DataFrame
    metrics: pd.DataFrame
    human: pd.DataFrame
    metric_signatures: dict[str, list[str]] = field(default_factory=dict)
    aggregation: str = "mean"
    n_raters: pd.DataFrame | None = None
    coverage: dict[str, int] = field(default_factory=dict)
    posteriors: dict[str, pd.DataFrame] = field(default_factory=dict)

    def label_draws(self, criterion: str, n_draws: int, seed: int) -> np.ndarray | None:
        """Draws of people's aggregate for every item (shape (n_draws, items)) from the
        competence model's posterior, or None without one (see :func:`posterior_draws`)."""
        posterior = self.posteriors.get(criterion)
        if posterior is None or n_draws == 0:
            return None
        items = [str(i) for i in self.items.index]
        return posterior_draws(posterior, items, n_draws, seed)

    @property
    def metric_names(self) -> list[str]:
        """The metrics of the table, in column order."""
        return [str(c) for c in self.metrics.columns]

    @property
    def criteria(self) -> list[str]:
        """The human criteria of the table, in column order."""
        return [str(c) for c in self.human.columns]

    @property
    def has_prompts(self) -> bool:
        """Whether some item has a prompt id (needed for the story level)."""
        return bool(self.items["prompt_id"].notna().any())

    @property
    def has_systems(self) -> bool:
        """Whether some item has a system (needed for the system level)."""
        return bool(self.items["system"].notna().any())

    def subset(self, mask: Any) -> MetaTable:
        """The table restricted to the items where ``mask`` (aligned to ``items``) is true."""
        keep = np.asarray(mask, dtype=bool)
        if keep.shape != (len(self.items),):
            raise ValueError(f"mask must have one value per item ({len(self.items)})")
        index = self.items.index[keep]
        return MetaTable(
            items=self.items.loc[index],
            metrics=self.metrics.loc[index],
            human=self.human.loc[index],
            metric_signatures=self.metric_signatures,
            aggregation=self.aggregation,
            n_raters=None if self.n_raters is None else self.n_raters.loc[index],
            coverage={**self.coverage, "items": int(keep.sum())},
            posteriors=self.posteriors,
        )

    def metric_signature(self, metric: str) -> str:
        """The signature of a metric's scores ('; '-joined when they differ)."""
        return "; ".join(self.metric_signatures.get(metric, []))


def build_meta_table(
    scores: Sequence[Score] | pd.DataFrame,
    judgments: Sequence[Judgment] | pd.DataFrame,
    *,
    stories: Sequence[Story] | None = None,
    aggregation: str = "mean",
    metrics: Sequence[str] | None = None,
    criteria: Sequence[str] | None = None,
    item_fields: Sequence[str] = (),
) -> MetaTable:
    """Join metric scores with aggregated human judgments, item by item.

    Parameters
    ----------
    scores : sequence of Score, or DataFrame with ``item_id``, ``metric``, ``value``
        Optional fields ``signature``, ``system``, ``prompt_id``.
    judgments : sequence of Judgment, or long DataFrame
        Aggregated per item and criterion with ``aggregation``.
    stories : sequence of Story, optional
        Looked up by id for items whose scores and judgments carry no ``system`` or
        ``prompt_id`` (and for ``item_fields``).
    aggregation : {"mean", "median", "majority"}
    metrics, criteria : sequence of str, optional
        Keep only these (in this order); an unknown name raises ``ValueError``.
    item_fields : sequence of str
        Extra story fields (e.g. ``genre``, ``error_type``) to copy into ``items``, for
        subset analyses.

    Raises
    ------
    MetaInputError
        When the scores and judgments have no item in common, or an item is given two
        different systems or prompts.
    """
    score_frame = _scores_to_frame(scores)
    judgment_frame = judgments_frame(judgments)
    if score_frame.empty:
        raise MetaInputError("no scores given")
    if judgment_frame.empty:
        raise MetaInputError("no judgments given")

    all_metrics = list(dict.fromkeys(score_frame["metric"]))
    chosen_metrics = _choose(all_metrics, metrics, "metric")
    score_frame = score_frame[score_frame["metric"].isin(chosen_metrics)]
    all_criteria = sorted(set(judgment_frame["criterion"]))
    chosen_criteria = _choose(all_criteria, criteria, "criterion")
    judgment_frame = judgment_frame[judgment_frame["criterion"].isin(chosen_criteria)]

    posteriors: dict[str, pd.DataFrame] = {}
    if aggregation in ("mace", "dawid-skene", "ordinal") and not judgment_frame.empty:
        human, posteriors = model_based_labels(judgment_frame, aggregation)
    else:
        human = aggregate_ratings(judgment_frame, method=aggregation)
    human = human.reindex(columns=chosen_criteria)
    counts = judgment_frame.groupby(["item_id", "criterion"])["value"].count().unstack("criterion")
    counts = counts.reindex(columns=chosen_criteria)
    wide = score_frame.pivot(index="item_id", columns="metric", values="value")
    wide = wide.reindex(columns=chosen_metrics).astype(float)
    wide.columns = [str(c) for c in wide.columns]

    scored = set(wide.index)
    judged = set(human.index)
    common = sorted(scored & judged)
    if not common:
        raise MetaInputError(
            "the scores and the judgments have no item id in common "
            f"(scores: {_examples(scored)}; judgments: {_examples(judged)})"
        )
    dropped_scores = len(scored - judged)
    dropped_judged = len(judged - scored)
    if dropped_scores or dropped_judged:
        warn(
            DataCoverageWarning,
            f"{len(common)} items have both scores and judgments; left out {dropped_scores} "
            f"scored item(s) without judgments and {dropped_judged} judged item(s) without scores",
        )

    info = item_info(score_frame, judgment_frame, stories, common, item_fields)
    signatures: dict[str, list[str]] = {}
    for metric in chosen_metrics:
        sigs = sorted(
            {s for s in score_frame.loc[score_frame["metric"] == metric, "signature"] if s}
        )
        signatures[metric] = sigs
        if len(sigs) > 1:
            warn(
                MixedSignatureWarning,
                f"the scores of metric {metric!r} carry {len(sigs)} different signatures; they "
                "were computed with different settings and are correlated together",
            )
    index = pd.Index(common, name="item_id")
    return MetaTable(
        items=info.reindex(index),
        metrics=wide.reindex(index),
        human=human.reindex(index),
        metric_signatures=signatures,
        aggregation=aggregation,
        n_raters=counts.reindex(index).fillna(0).astype(int),
        coverage={
            "items_scored": len(scored),
            "items_judged": len(judged),
            "items": len(common),
            "raters": int(judgment_frame["rater_id"].nunique()),
            "judgments": len(judgment_frame),
        },
        posteriors=posteriors,
    )


def _examples(ids: Iterable[str], k: int = 3) -> str:
    shown = sorted(ids)[:k]
    return ", ".join(repr(i) for i in shown) + (", ..." if len(list(ids)) > k else "")


def _choose(available: list[str], wanted: Sequence[str] | None, what: str) -> list[str]:
    if wanted is None:
        return available
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise ValueError(
            f"unknown {what}(s) {', '.join(map(repr, unknown))}; "
            f"available: {', '.join(available) or 'none'}"
        )
    return list(dict.fromkeys(wanted))


def _scores_to_frame(scores: Sequence[Score] | pd.DataFrame) -> pd.DataFrame:
    if isinstance(scores, pd.DataFrame):
        frame = scores.copy()
    else:
        frame = pd.DataFrame(
            [
                {
                    "item_id": s.item_id,
                    "metric": s.metric,
                    "value": s.value,
                    "signature": s.signature,
                    "system": s.extra.get("system"),
                    "prompt_id": s.extra.get("prompt_id"),
                }
                for s in scores
            ]
        )
    if frame.empty:
        return frame
    missing = [c for c in ("item_id", "metric", "value") if c not in frame.columns]
    if missing:
        raise ValueError(f"scores lack column(s) {', '.join(missing)}")
    for column in ("signature", "system", "prompt_id"):
        if column not in frame.columns:
            frame[column] = None
    frame["item_id"] = frame["item_id"].astype(str)
    frame["metric"] = frame["metric"].astype(str)
    frame["value"] = pd.to_numeric(frame["value"]).astype(float)
    frame["signature"] = frame["signature"].fillna("").astype(str)
    duplicated = frame.duplicated(["item_id", "metric"])
    if duplicated.any():
        first = frame.loc[duplicated, ["item_id", "metric"]].iloc[0]
        raise MetaInputError(
            f"{int(duplicated.sum())} duplicate score(s) for the same item and metric, e.g. "
            f"item {first['item_id']!r} metric {first['metric']!r} (were two score files "
            "given for the same metric?)"
        )
    return frame


class _ItemLabels:
    """System and prompt id of each item, from several sources that must agree."""

    def __init__(self, items: Sequence[str]) -> None:
        self.wanted = set(items)
        self.values: dict[str, dict[str, dict[str, str]]] = {"system": {}, "prompt_id": {}}

    def record(self, kind: str, item: str, value: Any, source: str) -> None:
        text = _as_text(value)
        if text is None or item not in self.wanted:
            return
        seen = self.values[kind].get(item)
        if seen is not None and seen["value"] != text:
            raise MetaInputError(
                f"item {item!r} has two different {kind} values: {seen['value']!r} "
                f"({seen['source']}) and {text!r} ({source})"
            )
        self.values[kind].setdefault(item, {"value": text, "source": source})

    def record_frame(self, frame: pd.DataFrame, source: str) -> None:
        for kind in ("system", "prompt_id"):
            if kind in frame.columns:
                sub = frame[["item_id", kind]].dropna()
                for item, value in zip(sub["item_id"], sub[kind], strict=True):
                    self.record(kind, str(item), value, source)

    def get(self, kind: str, item: str) -> str | None:
        return self.values[kind].get(item, {}).get("value")


def _story_fields(
    labels: _ItemLabels, stories: Sequence[Story], items: list[str], item_fields: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Labels the scores and judgments lack, from the stories, and the asked-for fields."""
    extra: dict[str, dict[str, Any]] = {name: {} for name in item_fields}
    by_id = {s.id: s for s in stories}
    for item in items:
        story = by_id.get(item)
        if story is None:
            continue
        if labels.get("system", item) is None:
            labels.record("system", item, story.system, "stories")
        if labels.get("prompt_id", item) is None:
            labels.record("prompt_id", item, prompt_id(story), "stories")
        record = story.to_dict()
        for name in item_fields:
            if name in record:
                value = record[name]
                extra[name][item] = "|".join(map(str, value)) if isinstance(value, list) else value
    return extra


def item_info(
    score_frame: pd.DataFrame,
    judgment_frame: pd.DataFrame,
    stories: Sequence[Story] | None,
    items: list[str],
    item_fields: Sequence[str],
) -> pd.DataFrame:
    """System, prompt id and the asked-for story fields of each item (index ``item_id``):
    from the scores, then the judgments, then the stories; two sources that disagree are an
    error."""
    labels = _ItemLabels(items)
    labels.record_frame(score_frame, "scores")
    labels.record_frame(judgment_frame, "judgments")
    extra: dict[str, dict[str, Any]] = {name: {} for name in item_fields}
    if stories is not None:
        extra = _story_fields(labels, stories, items, item_fields)
    for name in item_fields:
        if not extra[name]:
            raise MetaInputError(
                f"no story has the field {name!r}"
                + ("" if stories is not None else " (pass a story file)")
            )
    frame = pd.DataFrame(index=pd.Index(items, name="item_id"))
    frame["system"] = [labels.get("system", i) for i in items]
    frame["prompt_id"] = [labels.get("prompt_id", i) for i in items]
    for name in item_fields:
        frame[name] = [extra[name].get(i) for i in items]
    return frame


def read_judgment_files(paths: Sequence[str | Path]) -> list[Judgment]:
    """The judgments of every file, in order (``FILE:LINE`` errors as :func:`read_judgments`)."""
    records: list[Judgment] = []
    for path in paths:
        records.extend(read_judgments(path))
    return records


def read_score_files(paths: Sequence[str | Path]) -> list[Score]:
    """The scores of every file, in order (``FILE:LINE`` errors as :func:`read_scores`)."""
    records: list[Score] = []
    for path in paths:
        records.extend(read_scores(path))
    return records


def load_meta_table(
    scores: Sequence[str | Path],
    judgments: Sequence[str | Path],
    *,
    stories: str | Path | None = None,
    aggregation: str = "mean",
    metrics: Sequence[str] | None = None,
    criteria: Sequence[str] | None = None,
    study: str | None = None,
    condition: str | None = None,
    item_fields: Sequence[str] = (),
) -> MetaTable:
    """Read score, judgment and (optionally) story files and join them.

    Several score files are merged (a metric scored twice for an item is an error); several
    judgment files are concatenated. ``study`` and ``condition`` keep only the judgments of
    that study or condition.

    Raises
    ------
    DataFileError
        For an unreadable file (``FILE:LINE: reason``).
    MetaInputError
        When the files cannot be combined (see :func:`build_meta_table`).
    """
    if not scores:
        raise MetaInputError("give at least one score file")
    if not judgments:
        raise MetaInputError("give at least one judgment file")
    judgment_records = filter_judgments(
        read_judgment_files(judgments), study=study, condition=condition
    )
    story_records = read_stories(stories) if stories is not None else None
    return build_meta_table(
        read_score_files(scores),
        judgment_records,
        stories=story_records,
        aggregation=aggregation,
        metrics=metrics,
        criteria=criteria,
        item_fields=item_fields,
    )


def filter_judgments(
    judgments: Sequence[Judgment], *, study: str | None = None, condition: str | None = None
) -> list[Judgment]:
    """Keep the judgments of one study and/or condition; warn when several are mixed."""
    kept = [
        j
        for j in judgments
        if (study is None or j.study == study) and (condition is None or j.condition == condition)
    ]
    if (study is not None or condition is not None) and not kept:
        raise MetaInputError(
            f"no judgment has study={study!r} condition={condition!r}; available: "
            f"studies {sorted({str(j.study) for j in judgments})}, "
            f"conditions {sorted({str(j.condition) for j in judgments})}"
        )
    conditions = {j.condition for j in kept if j.condition is not None}
    studies = {j.study for j in kept if j.study is not None}
    if len(conditions) > 1 or len(studies) > 1:
        warn(
            DataCoverageWarning,
            f"the judgments mix {len(studies)} studies and {len(conditions)} conditions; they "
            "are aggregated together (filter with study=/condition= to separate them)",
        )
    return kept
