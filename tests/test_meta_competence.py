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
from storyeval.meta.competence import competence_tables, dawid_skene, mace

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
