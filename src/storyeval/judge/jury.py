"""Judges weighted by people: checklist items whose weights are fitted to people's ratings,
and juries of several judges with per-judge weights fitted to people.

Both are a weighted sum fitted by :func:`storyeval.meta.weights.fit_weights` on stories people
rated; the result is written as judgment records (the fitted sum per story, out-of-fold for the
stories people rated, so ``judge-eval`` on it is an honest estimate), beside the weights with
intervals and a table comparing the fitted sum, the equal-weight sum and each part alone.

A checklist in the manner of the Torrance Test of Creative Writing (Chakrabarty et al. 2024)
counts passed tests; fitting the tests' weights to ratings follows the checklist rubrics of
Lee et al. (2024, CheckEval) and the weighted juries of Verga et al. (2024, "Replacing judges
with juries").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.corpus import Judgment
from storyeval.meta.weights import WeightFit, fit_weights


class JuryError(StoryevalError, ValueError):
    """Judgments that cannot make a checklist fit or a jury."""


@dataclass
class FittedJudge:
    """A fitted checklist or jury.

    Attributes
    ----------
    fits : dict of str to WeightFit
        Per criterion of the output (a checklist has one).
    judgments : list of Judgment
        The fitted sum per story and criterion (``rater_id``: the fit's signature).
    disagreement : DataFrame
        Juries: per story and criterion, the judges' spread (standard deviation of their
        standardised scores) and range; empty for a checklist.
    agreement : DataFrame
        Juries: agreement among the judges per criterion (Krippendorff's alpha, ICC).
    judges : dict of str to str
        Short name of each judge (or item) -> its full rater id.
    notes : list of str
    """

    fits: dict[str, WeightFit]
    judgments: list[Judgment]
    disagreement: pd.DataFrame = field(default_factory=pd.DataFrame)
    agreement: pd.DataFrame = field(default_factory=pd.DataFrame)
    judges: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def weights(self) -> pd.DataFrame:
        """Every fit's weights in one tidy table (``criterion`` first)."""
        return pd.concat(
            [f.weights.assign(criterion=c) for c, f in self.fits.items()], ignore_index=True
        )[["criterion", "feature", "weight", "ci_low", "ci_high", "standardized_weight"]]

    def evaluation(self) -> pd.DataFrame:
        """Every fit's evaluation against people in one tidy table."""
        return pd.concat(
            [f.evaluation.assign(criterion=c) for c, f in self.fits.items()], ignore_index=True
        )[["criterion", "predictor", "statistic", "estimate", "ci_low", "ci_high", "n"]]


def short_judge_names(rater_ids: Sequence[str]) -> dict[str, str]:
    """A readable, unique name per judge rater id (its model, else the id), in input order.

    >>> short_judge_names(["judge|model:a@1|rubric:x", "judge|model:b@2|rubric:x", "p1"])
    {'a@1': 'judge|model:a@1|rubric:x', 'b@2': 'judge|model:b@2|rubric:x', 'p1': 'p1'}
    """
    import re

    names: dict[str, str] = {}
    for rater in rater_ids:
        model = re.search(r"(?:^|\|)model:([^|]+)", rater)
        base = model.group(1) if model else rater
        name, k = base, 2
        while name in names:
            name, k = f"{base}#{k}", k + 1
        names[name] = rater
    return names


def _people_target(people: pd.DataFrame, criterion: str | None, aggregate: str) -> pd.Series:
    """People's value per item: one criterion, or the mean of every criterion's z-scores."""
    from storyeval.meta.data import aggregate_ratings

    wide = aggregate_ratings(people, method=aggregate)
    if wide.empty:
        raise JuryError("the people's file has no judgments")
    if criterion is not None:
        if criterion not in wide.columns:
            raise JuryError(
                f"people rated no criterion {criterion!r}; they rated {', '.join(wide.columns)}"
            )
        return wide[criterion].rename(criterion)
    if wide.shape[1] == 1:
        return wide.iloc[:, 0]
    if "overall" in wide.columns:
        return wide["overall"]
    z = (wide - wide.mean()) / wide.std(ddof=0).replace(0.0, 1.0)
    return z.mean(axis=1).rename("people_mean_z")


def _judge_frame(judgments: pd.DataFrame | Sequence[Judgment]) -> pd.DataFrame:
    from storyeval.meta.data import judgments_frame

    frame = judgments_frame(judgments)
    if frame.empty:
        raise JuryError("the judge's file has no judgments")
    return frame


def _groups(frame: pd.DataFrame, groups: Mapping[str, str] | None) -> dict[str, str]:
    """Prompt per item: given, else the judge records' ``prompt_id``."""
    if groups is not None:
        return dict(groups)
    if "prompt_id" not in frame.columns:
        return {}
    known = frame.dropna(subset=["prompt_id"])
    return dict(zip(known["item_id"], known["prompt_id"].astype(str), strict=True))


def fit_checklist(
    judgments: pd.DataFrame | Sequence[Judgment],
    people: pd.DataFrame | Sequence[Judgment],
    *,
    target: str | None = None,
    aggregate: str = "mean",
    negative: Sequence[str] = (),
    groups: Mapping[str, str] | None = None,
    ridge: float = 1.0,
    n_boot: int = 500,
    seed: int = 0,
) -> FittedJudge:
    """Weights of one judge's checklist items (or any rubric's criteria) fitted to people.

    Parameters
    ----------
    judgments : judgments of one judge
        Each criterion (a checklist item's probability of *yes*, or a score) is a feature; the
        mean over repeats is used.
    people : people's judgments of some of the same stories
    target : str, optional
        People's criterion to predict (default: their only one, ``overall``, else the mean of
        their criteria's z-scores).
    negative : names of criteria that are flaws (for the equal-weight baseline).
    """
    frame = _judge_frame(judgments)
    judges = list(dict.fromkeys(frame["rater_id"]))
    if len(judges) > 1:
        raise JuryError(
            f"a checklist fit reads one judge; the file holds {len(judges)} (fit a jury instead)"
        )
    features = frame.pivot_table(index="item_id", columns="criterion", values="value")
    features.columns = [str(c) for c in features.columns]
    wanted = _people_target(people, target, aggregate)
    fit = fit_weights(
        features,
        wanted,
        groups=_groups(frame, groups),
        signs={n: -1.0 for n in negative},
        ridge=ridge,
        n_boot=n_boot,
        seed=seed,
    )
    name = str(wanted.name)
    signature = fit.signature.with_fields(judge=next(iter(short_judge_names(judges))), target=name)
    fit.signature = signature
    records = _records(fit.predictions, signature.render(), f"{name}_fitted")
    return FittedJudge({name: fit}, records, judges={c: c for c in features.columns})


def _records(predictions: pd.Series, rater: str, criterion: str) -> list[Judgment]:
    return [
        Judgment(str(item), rater, criterion, round(float(value), 6))
        for item, value in predictions.items()
        if np.isfinite(value)
    ]


def fit_jury(
    judgments: pd.DataFrame | Sequence[Judgment],
    people: pd.DataFrame | Sequence[Judgment],
    *,
    criteria: Mapping[str, str] | None = None,
    aggregate: str = "mean",
    groups: Mapping[str, str] | None = None,
    nonnegative: bool = True,
    ridge: float = 1.0,
    n_boot: int = 500,
    seed: int = 0,
) -> FittedJudge:
    """A jury: several judges' scores on each criterion, weighted by a fit to people.

    Parameters
    ----------
    judgments : judgments of two or more judges (``rater_id`` tells them apart)
    people : people's judgments of some of the same stories
    criteria : mapping of the judges' criterion to the people's, optional
        Default: every criterion both rated under the same name.
    nonnegative : bool
        Weights >= 0 (a judge never counts against its own answers).

    Returns
    -------
    FittedJudge
        One fit per criterion; ``disagreement`` per story, ``agreement`` per criterion.
    """
    frame = _judge_frame(judgments)
    judges = short_judge_names(list(dict.fromkeys(frame["rater_id"])))
    if len(judges) < 2:
        raise JuryError("a jury needs judgments of at least two judges (rater ids)")
    frame["judge"] = frame["rater_id"].map({v: k for k, v in judges.items()})
    pairs = _criterion_pairs(frame, people, criteria)
    fits: dict[str, WeightFit] = {}
    records: list[Judgment] = []
    for own, theirs in pairs.items():
        features = frame[frame["criterion"] == own].pivot_table(
            index="item_id", columns="judge", values="value"
        )
        features = features[[j for j in judges if j in features.columns]]
        fit = fit_weights(
            features,
            _people_target(people, theirs, aggregate),
            groups=_groups(frame, groups),
            nonnegative=nonnegative,
            ridge=ridge,
            n_boot=n_boot,
            seed=seed,
        )
        fit.signature = Signature("jury", {**fit.signature.fields, "criterion": own})
        fits[own] = fit
        records += _records(fit.predictions, fit.signature.render(), own)
    spread, agreement = _disagreement(frame[frame["criterion"].isin(list(pairs))])
    return FittedJudge(fits, records, spread, agreement, judges)


def _criterion_pairs(
    frame: pd.DataFrame,
    people: pd.DataFrame | Sequence[Judgment],
    criteria: Mapping[str, str] | None,
) -> dict[str, str]:
    from storyeval.meta.data import judgments_frame

    theirs = set(judgments_frame(people)["criterion"])
    own = list(dict.fromkeys(frame["criterion"]))
    if criteria:
        unknown = [c for c in criteria if c not in own]
        if unknown:
            raise JuryError(f"the judges rated no criterion {', '.join(unknown)}")
        return dict(criteria)
    shared = {c: c for c in own if c in theirs}
    if not shared:
        raise JuryError(
            f"the judges' criteria ({', '.join(own)}) and the people's "
            f"({', '.join(sorted(theirs))}) share no name; map them (JUDGE=PEOPLE)"
        )
    return shared


def _disagreement(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per story and criterion the judges' spread; per criterion their agreement."""
    import warnings

    from storyeval.base.errors import StoryevalWarning
    from storyeval.meta import agreement

    per_judge = frame.groupby(["item_id", "judge", "criterion"], as_index=False)["value"].mean()
    stats = per_judge.groupby(["judge", "criterion"])["value"].agg(["mean", "std"])
    joined = per_judge.join(stats, on=["judge", "criterion"])
    joined["z"] = (joined["value"] - joined["mean"]) / joined["std"].replace(0.0, 1.0)
    spread = joined.groupby(["item_id", "criterion"]).agg(
        judges=("judge", "nunique"),
        spread_z=("z", "std"),
        low=("value", "min"),
        high=("value", "max"),
    )
    spread = spread.reset_index().sort_values("spread_z", ascending=False, ignore_index=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", StoryevalWarning)
        table = agreement(per_judge.rename(columns={"judge": "rater_id"}), n_boot=200)
    chosen = table[table["method"].isin(["krippendorff_alpha_interval", "icc2"])]
    return spread, chosen.reset_index(drop=True)
