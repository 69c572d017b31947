"""Prediction-powered inference: parity with ppi-python, hand-worked numbers, the per-group
table, the CLI, and the coverage it promises."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from storyeval.meta.ppi import ppi_mean, ppi_means_by


def _draw(seed: int, n: int, total: int, noise: float) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    truth = rng.normal(0.5, 0.3, size=n + total)
    judge = truth + rng.normal(0.2, noise, size=n + total)
    return truth[:n], judge[:n], judge[n:]


@pytest.mark.parametrize(
    "seed,noise,lam", [(0, 0.1, None), (1, 2.0, None), (2, 0.3, 1.0), (3, 0.3, 0.4)]
)
def test_matches_ppi_python(seed: int, noise: float, lam: float | None) -> None:
    ppi = pytest.importorskip("ppi_py")
    labels, predicted, unlabeled = _draw(seed, 40, 400, noise)
    found = ppi_mean(labels, predicted, unlabeled, confidence=0.9, lam=lam)
    low, high = ppi.ppi_mean_ci(labels, predicted, unlabeled, alpha=0.1, lam=lam)
    point = ppi.ppi_mean_pointestimate(labels, predicted, unlabeled, lam=lam)
    assert found.estimate == pytest.approx(float(np.ravel(point)[0]), abs=1e-8)
    assert found.ci_low == pytest.approx(float(np.ravel(low)[0]), abs=1e-8)
    assert found.ci_high == pytest.approx(float(np.ravel(high)[0]), abs=1e-8)


def test_hand_worked_original_ppi() -> None:
    # people 1, 0, 1, 1 where the judge said 1, 1, 1, 0; the judge says 1, 0 on two more items
    found = ppi_mean([1, 0, 1, 1], [1, 1, 1, 0], [1, 0], lam=1.0)
    # mean(judge on unlabelled) 0.5 + mean(people - judge) = 0.5 + (0 - 1 + 0 + 1) / 4 = 0.5
    assert found.estimate == pytest.approx(0.5)
    # variance: var(1, 0) / 2 + var(0, -1, 0, 1) / 4 = 0.25 / 2 + 0.5 / 4 = 0.25
    assert found.ci_high - found.estimate == pytest.approx(1.959963985 * 0.5, rel=1e-8)
    assert found.classical_estimate == pytest.approx(0.75)


def test_power_tuning_drops_a_useless_judge_and_keeps_a_good_one() -> None:
    labels, predicted, unlabeled = _draw(4, 60, 600, 0.05)
    good = ppi_mean(labels, predicted, unlabeled)
    assert good.lam > 0.8 and good.width_ratio < 0.5
    rng = np.random.default_rng(5)
    useless = ppi_mean(labels, rng.normal(size=60), rng.normal(size=600))
    assert useless.lam < 0.2 and useless.width_ratio < 1.05


def test_covers_the_truth_at_its_level() -> None:
    rng = np.random.default_rng(6)
    hits = 0
    for _ in range(400):
        truth = rng.binomial(1, 0.3, size=500).astype(float)
        judge = np.where(rng.random(500) < 0.8, truth, 1 - truth)
        labeled = rng.choice(500, size=50, replace=False)
        rest = np.setdiff1d(np.arange(500), labeled)
        found = ppi_mean(truth[labeled], judge[labeled], judge[rest])
        hits += found.ci_low <= 0.3 <= found.ci_high
    assert 0.92 <= hits / 400 <= 0.98


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        ppi_mean([1, 0], [1], [1])
    with pytest.raises(ValueError, match="finite"):
        ppi_mean([1, np.nan], [1, 0], [1])
    with pytest.raises(ValueError, match=">= 2 labelled"):
        ppi_mean([1], [1], [1])


def test_means_by_group_is_tidy_and_signed() -> None:
    labels, predicted, unlabeled = _draw(7, 30, 90, 0.2)
    frame = pd.DataFrame(
        {
            "system": ["a"] * 60 + ["b"] * 60,
            "judge": np.concatenate([predicted, unlabeled]),
            "human": np.concatenate([labels, np.full(90, np.nan)]),
        }
    )
    frame = frame.sample(frac=1.0, random_state=0)
    table = ppi_means_by(frame, group="system")
    assert list(table["group"]) == ["a", "b"]
    assert table.loc[0, "n_labeled"] == 30 and table.loc[0, "n_unlabeled"] == 30
    assert table.loc[0, "signature"].startswith("ppi_mean|method:ppi++")
    assert np.isnan(table.loc[1, "estimate"])


def test_ppi_command_on_judged_and_unjudged_items(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(8)
    humans, judge = [], []
    for system in ("x", "y"):
        for item in range(80):
            truth = float(rng.random() < (0.7 if system == "x" else 0.3))
            said = truth if rng.random() < 0.85 else 1 - truth
            name = f"{system}{item}"
            judge.append(
                {
                    "item_id": name,
                    "rater_id": "llm",
                    "criterion": "pass",
                    "value": said,
                    "system": system,
                }
            )
            if item < 30:
                humans.append(
                    {
                        "item_id": name,
                        "rater_id": "p1",
                        "criterion": "pass",
                        "value": truth,
                        "system": system,
                    }
                )
    (tmp_path / "h.jsonl").write_text("".join(json.dumps(r) + "\n" for r in humans))
    (tmp_path / "j.jsonl").write_text("".join(json.dumps(r) + "\n" for r in judge))
    out = tmp_path / "ppi.csv"
    run_cli(
        "ppi",
        "--humans",
        str(tmp_path / "h.jsonl"),
        "--judge",
        str(tmp_path / "j.jsonl"),
        "-o",
        str(out),
    )
    table = pd.read_csv(out)
    assert set(table["group"]) == {"x", "y"}
    assert (table["n_labeled"] == 30).all() and (table["n_unlabeled"] == 50).all()
    assert (table["width_ratio"] < 1.0).all()
    assert table["estimate"].iloc[0] > table["estimate"].iloc[1]
