"""People's labels with uncertainty in the bootstrap: draws from a competence model's posterior
replace the point labels in every replicate. Draws without spread give the plain bootstrap's
interval exactly; uncertain labels widen it; the signature says so."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from storyeval.meta.correlation import correlate, level_correlation
from storyeval.meta.data import build_meta_table, posterior_draws


@pytest.mark.parametrize("level", ["pooled", "story", "system"])
@pytest.mark.parametrize("method", ["pearson", "spearman", "kendall"])
def test_draws_without_spread_give_the_plain_interval(level: str, method: str) -> None:
    rng = np.random.default_rng(0)
    n = 60
    x = rng.normal(size=n)
    y = x + rng.normal(size=n)
    prompts = np.repeat(np.arange(20), 3).astype(str)
    systems = np.tile(["a", "b", "c"], 20)
    common = dict(level=level, method=method, prompts=prompts, systems=systems, n_boot=200, seed=4)
    plain = level_correlation(x, y, **common)
    drawn = level_correlation(x, y, y_draws=np.tile(y, (200, 1)), **common)
    assert drawn["estimate"] == plain["estimate"]
    assert drawn["ci_low"] == pytest.approx(plain["ci_low"], abs=1e-12)
    assert drawn["ci_high"] == pytest.approx(plain["ci_high"], abs=1e-12)
    with pytest.raises(ValueError, match="y_draws must have shape"):
        level_correlation(x, y, y_draws=np.tile(y, (10, 1)), **common)


def _study(raters: int, noise: float, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    items = [f"s{i:03d}" for i in range(80)]
    truth = rng.normal(size=len(items))
    scores = pd.DataFrame(
        {"item_id": items, "metric": "m", "value": truth + rng.normal(0, 0.7, len(items)),
         "system": np.tile(["a", "b", "c", "d"], 20), "prompt_id": np.repeat(np.arange(20), 4).astype(str)}
    )  # fmt: skip
    rows = []
    for item, t in zip(items, truth, strict=True):
        for r in range(raters):
            value = int(np.clip(np.round(3 + t + rng.normal(0, noise)), 1, 5))
            rows.append({"item_id": item, "rater_id": f"r{r}", "criterion": "q", "value": value})
    return scores, pd.DataFrame(rows)


def test_uncertain_labels_widen_the_interval() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        noisy = build_meta_table(*_study(raters=3, noise=1.5), aggregation="ordinal")
        out = correlate(noisy, levels=["pooled"], methods=["pearson"], n_boot=400)
        plain = noisy.subset(np.ones(len(noisy.items), dtype=bool))
        plain.posteriors = {}
        base = correlate(plain, levels=["pooled"], methods=["pearson"], n_boot=400)
    width = float(out["ci_high"].iloc[0] - out["ci_low"].iloc[0])
    base_width = float(base["ci_high"].iloc[0] - base["ci_low"].iloc[0])
    assert out["estimate"].iloc[0] == base["estimate"].iloc[0]
    assert width > 1.1 * base_width
    assert "labels:posterior-draws" in out["signature"].iloc[0]
    assert "labels:" not in base["signature"].iloc[0]


def test_categorical_and_ordinal_draws() -> None:
    post = pd.DataFrame({"p_0.0": [0.9, 0.2], "p_1.0": [0.1, 0.8]}, index=["a", "b"])
    draws = posterior_draws(post, ["a", "b"], 4000, seed=1)
    assert set(np.unique(draws)) == {0.0, 1.0}
    assert draws.mean(axis=0) == pytest.approx([0.1, 0.8], abs=0.03)
    ordinal = pd.DataFrame(
        {"location": [-1.0, 0.0, 1.0], "ci_low": [-1.0, -0.5, 1.0], "ci_high": [-1.0, 0.5, 1.0],
         "expected_rating": [1.5, 3.0, 4.5]},
        index=["a", "b", "c"],
    )  # fmt: skip
    drawn = posterior_draws(ordinal, ["a", "b", "c"], 2000, seed=2)
    assert (drawn[:, 0] == 1.5).all() and (drawn[:, 2] == 4.5).all()  # no spread: the value
    assert 2.5 < drawn[:, 1].mean() < 3.5 and drawn[:, 1].std() > 0.2
    assert drawn.min() >= 1.5 and drawn.max() <= 4.5  # within the items' curve
