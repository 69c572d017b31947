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


def _with_spammer(seed: int = 1) -> pd.DataFrame:
    """60 items, five raters who follow the truth and one who answers at random."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(60):
        truth = rng.normal()
        for r in range(6):
            value = (
                rng.integers(1, 6)
                if r == 5
                else np.clip(np.round(3 + truth + rng.normal(0, 0.6)), 1, 5)
            )
            rows.append(
                {"item_id": f"s{i:02d}", "rater_id": f"r{r}", "criterion": "q", "value": int(value)}
            )
    return pd.DataFrame(rows)


def test_a_model_based_ceiling_compares_each_rater_with_the_others_labels() -> None:
    from storyeval.meta.agreement import human_ceiling

    frame = _with_spammer()
    common = dict(methods=["pearson"], n_boot=200, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = human_ceiling(frame, **common)
        model = human_ceiling(frame, aggregation="ordinal", **common)
    per_rater = model[model["rater"] != "mean"].set_index("rater")
    plain_rater = plain[plain["rater"] != "mean"].set_index("rater")
    good = [f"r{r}" for r in range(5)]
    # the others' label discounts the spammer: a good rater agrees with it more than with
    # the plain mean of the others, which carries the spammer's noise
    assert (per_rater.loc[good, "estimate"] > plain_rater.loc[good, "estimate"]).mean() >= 0.8
    assert per_rater.loc["r5", "estimate"] < 0.3 < per_rater.loc[good, "estimate"].min()
    assert per_rater["signature"].str.contains("labels:posterior-draws").all()
    assert per_rater["signature"].str.contains("leave-one-rater-out-ordinal").all()
    assert not plain_rater["signature"].str.contains("posterior-draws").any()
    assert (per_rater["ci_low"] <= per_rater["estimate"]).all()
    with pytest.raises(ValueError, match="aggregation must be mean or one of"):
        human_ceiling(frame, aggregation="median", **common)


def test_ceiling_command_takes_a_competence_model(tmp_path) -> None:
    from typer.testing import CliRunner

    from storyeval.cli import app

    path = tmp_path / "people.jsonl"
    path.write_text(_with_spammer().to_json(orient="records", lines=True), encoding="utf-8")
    out = tmp_path / "ceiling.csv"
    result = CliRunner().invoke(
        app,
        [
            "ceiling",
            "-j",
            str(path),
            "-o",
            str(out),
            "--aggregate",
            "mace",
            "--n-boot",
            "50",
            "-m",
            "spearman",
        ],
    )
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out)
    assert table[table["rater"] != "mean"]["signature"].str.contains("posterior-draws").all()
    refused = CliRunner().invoke(
        app, ["ceiling", "-j", str(path), "-o", str(out), "--aggregate", "median"]
    )
    assert refused.exit_code != 0 and "--aggregate" in refused.output


def _pairwise_with_spammers(seed: int = 2) -> pd.DataFrame:
    """Four systems of known strength; each pair of stories judged by three careful raters
    and two who pick at random."""
    rng = np.random.default_rng(seed)
    strength = {"w": 1.5, "x": 0.5, "y": -0.5, "z": -1.5}
    systems = list(strength)
    rows = []
    for prompt in range(40):
        for i, a in enumerate(systems):
            for b in systems[i + 1 :]:
                p_a = 1 / (1 + np.exp(strength[b] - strength[a]))
                for r in range(5):
                    shown = (a, b) if rng.random() < 0.5 else (b, a)
                    if r >= 3:
                        winner = shown[int(rng.integers(0, 2))]
                    else:
                        winner = a if rng.random() < p_a else b
                    rows.append(
                        {"item_id": f"p{prompt}-{a}{b}", "prompt_id": f"p{prompt}", "system_a": shown[0],
                         "system_b": shown[1], "winner": winner, "rater_id": f"r{r}", "criterion": "q"}
                    )  # fmt: skip
    return pd.DataFrame(rows)


def test_rank_combines_each_pairs_raters_by_a_competence_model() -> None:
    from storyeval.meta.comparisons import draw_outcomes, model_based_comparisons, rank_systems

    frame = _pairwise_with_spammers()
    combined = model_based_comparisons(frame, "dawid-skene")
    assert combined.groupby("_pair")["_weight"].sum().round(9).eq(1).all()
    assert combined["_pair"].nunique() == 40 * 6
    rng = np.random.default_rng(0)
    counts = pd.concat([draw_outcomes(combined, rng) for _ in range(400)])
    share = counts.groupby(["_pair", "winner"]).size() / 400
    expected = combined.set_index(["_pair", "winner"])["_weight"]
    assert (share - expected.reindex(share.index)).abs().max() < 0.1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = rank_systems(frame, n_boot=40, seed=0)
        model = rank_systems(frame, n_boot=40, seed=0, aggregate="dawid-skene")
    bt = model[model["method"] == "bradley-terry"].set_index("system")
    bt_plain = plain[plain["method"] == "bradley-terry"].set_index("system")
    assert list(bt.index) == ["w", "x", "y", "z"]
    # the random raters pull the plain strengths toward 0; the model discounts them
    assert bt.loc["w", "estimate"] - bt.loc["z", "estimate"] > (
        bt_plain.loc["w", "estimate"] - bt_plain.loc["z", "estimate"]
    )
    assert (bt["ci_low"] <= bt["estimate"]).all() and (bt["estimate"] <= bt["ci_high"]).all()
    assert bt["signature"].str.contains("aggregate:dawid-skene").all()
    assert bt["signature"].str.contains("labels:posterior-draws").all()
    assert int(bt["comparisons"].sum()) // 2 == 40 * 6  # tallies: one outcome per pair
    with pytest.raises(ValueError, match="cannot be combined"):
        rank_systems(frame, n_boot=0, aggregate="mace", weights="strength")


def test_rank_command_takes_a_competence_model(tmp_path) -> None:
    from typer.testing import CliRunner

    from storyeval.cli import app

    path = tmp_path / "pairs.jsonl"
    path.write_text(
        _pairwise_with_spammers().head(600).to_json(orient="records", lines=True), encoding="utf-8"
    )
    out = tmp_path / "rank.csv"
    args = ["rank", str(path), "-o", str(out), "--bootstrap", "10", "--aggregate", "mace"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert pd.read_csv(out)["signature"].str.contains("aggregate:mace").all()
    refused = CliRunner().invoke(app, [*args[:-1], "ordinal"])
    assert refused.exit_code != 0 and "--aggregate" in refused.output
