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


@pytest.mark.parametrize("lam", [None, 1.0])
def test_logistic_matches_ppi_python(lam: float | None) -> None:
    ppi = pytest.importorskip("ppi_py")
    from storyeval.meta.ppi import ppi_logistic

    rng = np.random.default_rng(11)
    x = rng.normal(size=(600, 3))
    truth = rng.random(600) < 1 / (1 + np.exp(-(x @ np.array([1.0, -0.5, 0.2]))))
    judge = np.where(rng.random(600) < 0.85, truth, ~truth).astype(float)
    y = truth.astype(float)
    labeled, rest = slice(0, 120), slice(120, None)
    theta, low, high, _ = ppi_logistic(
        x[labeled], y[labeled], judge[labeled], x[rest], judge[rest], confidence=0.9, lam=lam
    )
    point = ppi.ppi_logistic_pointestimate(
        x[labeled], y[labeled], judge[labeled], x[rest], judge[rest], lam=lam
    )
    ref_low, ref_high = ppi.ppi_logistic_ci(
        x[labeled], y[labeled], judge[labeled], x[rest], judge[rest], alpha=0.1, lam=lam
    )
    np.testing.assert_allclose(theta, point, atol=1e-8)
    np.testing.assert_allclose(low, ref_low, atol=1e-8)
    np.testing.assert_allclose(high, ref_high, atol=1e-8)


def _tournament(seed: int, judge_accuracy: float) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Five systems of known strength, 400 prompts with every pair compared once by a judge
    that copies people's outcome with probability ``judge_accuracy``; people on 80 prompts."""
    rng = np.random.default_rng(seed)
    strength = np.array([0.0, 0.4, 0.8, 1.2, 1.6])
    people, judge = [], []
    for prompt in range(400):
        for a in range(5):
            for b in range(a + 1, 5):
                p_a = 1 / (1 + np.exp(-(strength[a] - strength[b])))
                truth = f"s{a}" if rng.random() < p_a else f"s{b}"
                other = f"s{b}" if truth == f"s{a}" else f"s{a}"
                said = truth if rng.random() < judge_accuracy else other
                record = {"prompt_id": f"p{prompt}", "item_id": f"p{prompt}", "system_a": f"s{a}",
                          "system_b": f"s{b}", "criterion": "q"}  # fmt: skip
                judge.append(record | {"winner": said, "rater_id": "llm"})
                if prompt < 80:
                    people.append(record | {"winner": truth, "rater_id": "p"})
    return pd.DataFrame(people), pd.DataFrame(judge), strength


def test_bradley_terry_is_narrower_with_a_good_judge_and_covers_the_truth() -> None:
    from storyeval.meta.ppi import ppi_bradley_terry

    people, judge, strength = _tournament(12, 0.9)
    table = ppi_bradley_terry(people, judge).set_index("system")
    assert table.loc["s0", "estimate"] == 0.0 and table["lam"].iloc[0] > 0.5
    width = table["ci_high"] - table["ci_low"]
    classical = table["classical_ci_high"] - table["classical_ci_low"]
    assert (width.iloc[1:] < 0.8 * classical.iloc[1:]).all()
    covered = []
    for seed in range(20):  # the interval covers the true strengths at about its level
        found = ppi_bradley_terry(*_tournament(100 + seed, 0.9)[:2])
        covered += list((found["ci_low"] <= strength) & (strength <= found["ci_high"]))[1:]
    assert np.mean(covered) >= 0.85
    _, coin, _ = _tournament(12, 0.5)
    assert ppi_bradley_terry(people, coin)["lam"].iloc[0] < 0.2


def test_rank_ppi_judge_writes_the_strengths(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    people, judge, _ = _tournament(13, 0.9)
    people.to_json(tmp_path / "people.jsonl", orient="records", lines=True)
    judge.to_json(tmp_path / "judge.jsonl", orient="records", lines=True)
    code, out, err = run_cli(
        "rank", str(tmp_path / "people.jsonl"), "--ppi-judge", str(tmp_path / "judge.jsonl"),
        "--bootstrap", "20", "-o", str(tmp_path / "rank.csv"),
    )  # fmt: skip
    assert code == 0, err
    table = pd.read_csv(tmp_path / "rank-ppi.csv")
    assert list(table["system"]) == ["s0", "s1", "s2", "s3", "s4"]
    assert table["estimate"].is_monotonic_increasing
    assert table["signature"].iloc[0].startswith("ppi_bradley_terry|method:ppi++")
    assert table["n_labeled"].iloc[0] == 800 and table["n_unlabeled"].iloc[0] == 3200
    assert "prediction-powered Bradley-Terry" in out


@pytest.mark.parametrize("lam", [None, 1.0])
def test_correlation_matches_ppboot(lam: float | None) -> None:
    ppi = pytest.importorskip("ppi_py")
    from storyeval.meta.ppi import ppi_correlation

    rng = np.random.default_rng(21)
    x = rng.normal(size=500)
    y = 0.6 * x + rng.normal(size=500)
    judge = y + rng.normal(0, 0.5, size=500)
    labeled, rest = slice(0, 80), slice(80, None)

    def pearson(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.corrcoef(a, b)[0, 1])

    found = ppi_correlation(x[labeled], y[labeled], judge[labeled], x[rest], judge[rest],
                            lam=lam, n_boot=200, confidence=0.9, seed=5)  # fmt: skip
    np.random.seed(5)
    low, high = ppi.ppboot(pearson, y[labeled], judge[labeled], judge[rest], X=x[labeled],
                           X_unlabeled=x[rest], lam=lam, n_resamples=200, alpha=0.1)  # fmt: skip
    assert found["ci_low"] == pytest.approx(float(low), abs=1e-10)
    assert found["ci_high"] == pytest.approx(float(high), abs=1e-10)
    assert 0.3 < found["estimate"] < 0.7 and found["ci_low"] < found["estimate"] < found["ci_high"]
    if lam is None:  # a judge close to people: narrower than people alone
        assert (
            found["ci_high"] - found["ci_low"]
            < found["classical_ci_high"] - found["classical_ci_low"]
        )


def test_correlate_ppi_judge(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(31)
    x = rng.normal(size=300)
    truth = 0.5 * x + rng.normal(size=300)
    judge = truth + rng.normal(0, 0.4, size=300)
    scores = [{"item_id": f"s{i}", "metric": "m", "value": float(v)} for i, v in enumerate(x)]
    people = [
        {"item_id": f"s{i}", "rater_id": "p", "criterion": "q", "value": float(truth[i])}
        for i in range(60)
    ]
    said = [
        {"item_id": f"s{i}", "rater_id": "llm", "criterion": "q", "value": float(v)}
        for i, v in enumerate(judge)
    ]
    for name, rows in (("s", scores), ("p", people), ("j", said)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run_cli(
        "correlate", "-s", str(tmp_path / "s.jsonl"), "-j", str(tmp_path / "p.jsonl"),
        "--ppi-judge", str(tmp_path / "j.jsonl"), "-m", "pearson", "--level", "pooled",
        "--n-boot", "200", "-o", str(tmp_path / "c.csv"),
    )  # fmt: skip
    assert code == 0, err
    table = pd.read_csv(tmp_path / "c-ppi.csv").iloc[0]
    assert table["n_labeled"] == 60 and table["n_unlabeled"] == 240 and table["method"] == "pearson"
    assert (
        table["ci_high"] - table["ci_low"] < table["classical_ci_high"] - table["classical_ci_low"]
    )
    assert table["signature"].startswith("ppi_correlation|method:ppboot")
    assert "prediction-powered correlations" in out


def test_paired_ppi_judge(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(41)
    people, said = [], []
    for prompt in range(200):
        for system, shift in (("a", 0.3), ("b", 0.0)):
            truth = shift + rng.normal()
            record = {
                "item_id": f"{system}{prompt}",
                "criterion": "q",
                "system": system,
                "prompt_id": f"p{prompt}",
            }
            said.append(record | {"rater_id": "llm", "value": truth + rng.normal(0, 0.3)})
            if prompt < 40:
                people.append(record | {"rater_id": "p", "value": truth})
    for name, rows in (("p", people), ("j", said)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run_cli(
        "paired", str(tmp_path / "p.jsonl"), "--metric", "q", "--system-a", "a", "--system-b", "b",
        "--ppi-judge", str(tmp_path / "j.jsonl"), "--resamples", "200",
    )  # fmt: skip
    assert code == 0, err
    assert (
        "prediction-powered a - b" in out and "people on 40 prompts, the judge alone on 160" in out
    )


def test_study_analyse_ppi_judge(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(51)
    humans, said = [], []
    for condition, level in (("human", 4.0), ("model", 3.0)):
        for item in range(60):
            truth = level + rng.normal(0, 0.5)
            name = f"{condition}{item}"
            said.append({"item_id": name, "rater_id": "llm", "criterion": "quality",
                         "value": round(truth + rng.normal(0, 0.2), 2), "condition": condition})  # fmt: skip
            if item < 20:
                for rater in ("a", "b"):
                    humans.append({"item_id": name, "rater_id": rater, "criterion": "quality",
                                   "value": float(np.clip(round(truth + rng.normal(0, 0.3)), 1, 5)),
                                   "condition": condition, "time_s": 60.0})  # fmt: skip
    for name, rows in (("h", humans), ("j", said)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, _, err = run_cli(
        "study", "analyse", "--judgments", str(tmp_path / "h.jsonl"), "--ppi-judge",
        str(tmp_path / "j.jsonl"), "--bootstrap", "0", "-o", str(tmp_path / "analysis"),
    )  # fmt: skip
    assert code == 0, err
    table = pd.read_csv(tmp_path / "analysis" / "ppi.csv").set_index("group")
    assert list(table.index) == ["quality / human", "quality / model"]
    assert (table["n_labeled"] == 20).all() and (table["n_unlabeled"] == 40).all()
    assert (table["width_ratio"] < 1.0).all()  # a judge that tracks people: narrower
