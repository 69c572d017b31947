"""Rater competence models against a published implementation (crowd-kit 1.4.2's outputs on a
simulated study, written by scripts/make_competence_reference.py) and against planted truths:
20% spammers and a constant rater must be found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from storyeval.corpus import Judgment
from storyeval.meta.competence import competence_tables, dawid_skene, mace, ordinal_ratings

DATA = Path(__file__).parent / "data" / "competence"
PLANTED_BAD = {"spam1", "spam2", "const"}


@pytest.fixture(scope="module")
def annotations() -> pd.DataFrame:
    return pd.read_csv(DATA / "annotations.csv")


def test_dawid_skene_equals_crowd_kit(annotations: pd.DataFrame) -> None:
    reference = pd.read_csv(DATA / "crowdkit_dawid_skene.csv").set_index("item_id")
    fitted = dawid_skene(annotations)
    ours = fitted.items.set_index("item_id")[reference.columns].loc[reference.index]
    np.testing.assert_allclose(ours.to_numpy(), reference.to_numpy(), atol=1e-8)
    assert fitted.signature.fields["model"] == "dawid-skene"


def test_mace_agrees_with_crowd_kit(annotations: pd.DataFrame) -> None:
    labels = pd.read_csv(DATA / "crowdkit_mace_labels.csv").set_index("item_id")["label"]
    competence = pd.read_csv(DATA / "crowdkit_mace_competence.csv").set_index("rater_id")
    fitted = mace(annotations)
    ours = fitted.items.set_index("item_id")["label"].loc[labels.index]
    assert (ours == labels).mean() >= 0.95
    theirs = competence["competence"]
    mine = fitted.raters.set_index("rater_id")["competence"].loc[theirs.index]
    assert spearmanr(mine, theirs).statistic > 0.95


@pytest.mark.parametrize("fit", [dawid_skene, mace], ids=["dawid-skene", "mace"])
def test_planted_spammers_and_truths_are_recovered(fit: Any, annotations: pd.DataFrame) -> None:
    truth = pd.read_csv(DATA / "truth.csv").set_index("item_id")["truth"]
    fitted = fit(annotations)
    raters = fitted.raters.set_index("rater_id")
    assert set(raters.index[raters["spammer"]]) == PLANTED_BAD
    assert set(raters.index[raters["constant"]]) == {"const"}
    good = raters.drop(index=list(PLANTED_BAD))["competence"]
    assert good.min() > raters.loc[list(PLANTED_BAD), "competence"].max()
    right = annotations["label"].to_numpy() == truth.loc[annotations["item_id"]].to_numpy()
    realised = pd.Series(right).groupby(annotations["rater_id"].to_numpy()).mean()
    realised = realised.loc[good.index]  # each rater's accuracy in the simulation
    assert spearmanr(good, realised).statistic > 0.7 and (good - realised).abs().mean() < 0.1
    labels = fitted.items.set_index("item_id")["label"].loc[truth.index]
    assert (labels == truth).mean() >= 0.85  # majority vote: 0.90; Dawid-Skene 0.87, MACE 0.92
    posteriors = fitted.items.filter(like="p_").to_numpy()
    np.testing.assert_allclose(posteriors.sum(axis=1), 1.0, atol=1e-6)


def test_study_analyse_reports_competence(
    annotations: pd.DataFrame, tmp_path: Path, run_cli: Any
) -> None:
    judgments = [
        Judgment(r.item_id, r.rater_id, "quality", float(r.label), time_s=60.0)
        for r in annotations.itertuples(index=False)
    ]
    raters, items = competence_tables(judgments, model="dawid-skene")
    assert set(raters["criterion"]) == {"quality"} and len(items) == 60
    with pytest.raises(ValueError, match="model must be one of"):
        competence_tables(judgments, model="glad")
    path = tmp_path / "judgments.jsonl"
    path.write_text("".join(json.dumps(j.to_dict()) + "\n" for j in judgments))
    code, out, err = run_cli(
        "study",
        "analyse",
        "--judgments",
        str(path),
        "-o",
        str(tmp_path / "a"),
        "--competence",
        "mace",
        "--bootstrap",
        "0",
    )
    assert code == 0, err
    assert "rater const always the same answer" in out and "rater spam1 answers at chance" in out
    table = pd.read_csv(tmp_path / "a" / "competence.csv")
    assert table.set_index("rater_id").loc["spam2", "spammer"]
    assert (tmp_path / "a" / "posteriors.csv").is_file()


def _likert_study(seed: int = 0) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """80 stories with a true location, 12 raters (70 stories each) of their own severity and
    discrimination, the last three rating at random (discrimination 0)."""
    rng = np.random.default_rng(seed)
    location = rng.normal(size=80)
    severity = rng.normal(0, 0.7, 12)
    discrimination = np.concatenate([rng.uniform(0.8, 2.5, 9), np.zeros(3)])
    cuts = np.array([-1.5, -0.5, 0.5, 1.5])
    rows = []
    for rater in range(12):
        for item in rng.choice(80, 70, replace=False):
            eta = discrimination[rater] * (location[item] - severity[rater])
            cumulative = 1 / (1 + np.exp(-(cuts - eta)))
            p = np.diff(np.concatenate([[0.0], cumulative, [1.0]]))
            rows.append(
                {
                    "item_id": int(item),
                    "rater_id": f"r{rater}",
                    "label": int(rng.choice(5, p=p)) + 1,
                }
            )
    return pd.DataFrame(rows), location, severity


def test_the_ordinal_model_recovers_locations_severities_and_random_raters() -> None:
    flagged = 0
    for seed in range(3):
        frame, location, severity = _likert_study(seed)
        fitted = ordinal_ratings(frame)
        items = fitted.items.set_index("item_id").loc[range(80)]
        mean = frame.groupby("item_id")["label"].mean().loc[range(80)]
        model_r = np.corrcoef(items["location"], location)[0, 1]
        assert model_r > 0.85 and model_r > np.corrcoef(mean, location)[0, 1]  # beats the mean
        assert (items["ci_low"] < items["location"]).all()
        assert (items["location"] < items["ci_high"]).all()
        raters = fitted.raters.set_index("rater_id")
        good = [f"r{k}" for k in range(9)]
        assert not raters.loc[good, "spammer"].any()
        flagged += int(raters.loc[["r9", "r10", "r11"], "spammer"].sum())
        assert np.corrcoef(raters.loc[good, "severity"], severity[:9])[0, 1] > 0.9
    assert flagged >= 8  # of the 9 random raters of the three studies
    table, _ = competence_tables(
        frame.rename(columns={"label": "value"}).assign(criterion="quality"), model="ordinal"
    )
    assert table["spammer"].sum() == 3 and "severity" in table


def test_model_based_aggregates_feed_the_meta_evaluation(examples_dir: Path) -> None:
    from storyeval.corpus import read_judgments
    from storyeval.meta.data import aggregate_ratings

    frame, location, _ = _likert_study(1)
    long = frame.rename(columns={"label": "value"}).assign(criterion="quality")
    ids = [str(i) for i in range(80)]
    mean = aggregate_ratings(long)["quality"].loc[ids]
    for method in ("ordinal", "mace", "dawid-skene"):
        values = aggregate_ratings(long, method=method)["quality"].loc[ids]
        assert values.between(1, 5).all()
        if method == "ordinal":  # random raters count for little: closer to the truth
            assert np.corrcoef(values, location)[0, 1] > np.corrcoef(mean, location)[0, 1]
    examples = aggregate_ratings(read_judgments(examples_dir / "judgments.jsonl"), method="ordinal")
    plain = aggregate_ratings(read_judgments(examples_dir / "judgments.jsonl"))
    assert np.corrcoef(examples["coherence"], plain["coherence"])[0, 1] > 0.95
