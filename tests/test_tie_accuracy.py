"""Pairwise accuracy with tie calibration (Deutsch et al. 2023) and soft pairwise accuracy
(Thompson et al. 2024): hand-worked examples, the definitions, and correlate's rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from storyeval.meta.tie_accuracy import pairwise_meta_row, tie_calibrated_accuracy


def _gaps(values: list[float]) -> np.ndarray:
    first, second = np.triu_indices(len(values), k=1)
    array = np.asarray(values, dtype=float)
    return array[first] - array[second]


def test_hand_worked_without_ties_to_gain() -> None:
    # pairs: three concordant, one tied by both (metric 2 and 2, people 3 and 3), two discordant
    accuracy, epsilon = tie_calibrated_accuracy(_gaps([1, 2, 2, 4]), _gaps([1, 3, 3, 2]))
    assert accuracy == pytest.approx(4 / 6) and epsilon == 0.0
    # a larger epsilon ties two concordant pairs: 2 of 6
    assert tie_calibrated_accuracy(_gaps([1, 2, 2, 4]), _gaps([1, 3, 3, 2]), epsilon=1.0)[
        0
    ] == pytest.approx(2 / 6)


def test_calibration_finds_the_metric_s_tie() -> None:
    # people tie the first two texts; the metric differs by 0.1 there: epsilon 0.1 gets all 3
    metric, people = _gaps([1.0, 1.1, 3.0]), _gaps([2, 2, 5])
    assert tie_calibrated_accuracy(metric, people, epsilon=0.0)[0] == pytest.approx(2 / 3)
    accuracy, epsilon = tie_calibrated_accuracy(metric, people)
    assert accuracy == pytest.approx(1.0) and epsilon == pytest.approx(0.1)


def test_calibrated_matches_a_brute_force_search() -> None:
    rng = np.random.default_rng(0)
    metric = np.round(rng.normal(size=30), 1)
    people = rng.integers(1, 4, size=30).astype(float)
    gm, gh = _gaps(list(metric)), _gaps(list(people))
    candidates = np.unique(np.r_[0.0, np.abs(gm)])
    brute = max(tie_calibrated_accuracy(gm, gh, epsilon=e)[0] for e in candidates)
    assert tie_calibrated_accuracy(gm, gh)[0] == pytest.approx(brute)


def _systems(noise: float, sign: float = 1.0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(1)
    prompts = np.repeat(np.arange(20), 4)
    systems = np.tile(np.array(["a", "b", "c", "d"], dtype=object), 20)
    quality = np.tile([0.0, 0.3, 0.6, 0.9], 20) + rng.normal(0, 0.5, size=80)
    metric = sign * quality + rng.normal(0, noise, size=80)
    return metric, quality, prompts.astype(object), systems


def test_soft_pairwise_accuracy_rewards_a_metric_as_sure_as_people() -> None:
    _, people, prompts, systems = _systems(0.0)
    same = pairwise_meta_row(
        2 * people + 3, people, level="system", method="spa", prompts=prompts, systems=systems,
        n_boot=0, confidence=0.95, seed=0,
    )  # fmt: skip
    assert same["estimate"] == pytest.approx(1.0)  # identical p-values on every pair
    reversed_ = pairwise_meta_row(
        -people, people, level="system", method="spa", prompts=prompts, systems=systems,
        n_boot=0, confidence=0.95, seed=0,
    )  # fmt: skip
    assert reversed_["estimate"] < 0.5 and same["n"] == 4
    with pytest.raises(ValueError, match="system level only"):
        pairwise_meta_row(people, people, level="pooled", method="spa", prompts=prompts,
                          systems=systems, n_boot=0, confidence=0.95, seed=0)  # fmt: skip


def test_levels_and_interval() -> None:
    metric, people, prompts, systems = _systems(0.3)
    rows = {
        level: pairwise_meta_row(
            metric,
            people,
            level=level,
            method="acc_eq",
            prompts=prompts,
            systems=systems,
            n_boot=100,
            confidence=0.9,
            seed=0,
        )
        for level in ("pooled", "story", "system", "within_system")
    }
    assert rows["pooled"]["n"] == 80 * 79 // 2
    assert rows["story"]["n"] == 20 * 6  # pairs within each prompt only
    assert rows["system"]["n"] == 6
    assert rows["within_system"]["n"] == 4 * 20 * 19 // 2
    for row in rows.values():
        assert row["ci_low"] <= row["estimate"] <= row["ci_high"]
        assert row["resample"] == "prompts" and row["n_groups"] == 20


def test_correlate_command_writes_acc_eq_and_spa(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    metric, people, prompts, systems = _systems(0.3)
    scores = [{"item_id": f"s{i}", "metric": "m", "value": float(v), "system": str(systems[i]),
               "prompt_id": f"p{prompts[i]}"} for i, v in enumerate(metric)]  # fmt: skip
    judgments = [{"item_id": f"s{i}", "rater_id": "r", "criterion": "q", "value": float(v)}
                 for i, v in enumerate(np.round(people, 1))]  # fmt: skip
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scores))
    (tmp_path / "j.jsonl").write_text("".join(json.dumps(r) + "\n" for r in judgments))
    code, _out, err = run_cli(
        "correlate", "-s", str(tmp_path / "s.jsonl"), "-j", str(tmp_path / "j.jsonl"),
        "-m", "acc_eq", "-m", "spa", "-m", "kendall", "--level", "pooled", "--level", "system",
        "--n-boot", "50", "-o", str(tmp_path / "c.csv"),
    )  # fmt: skip
    assert code == 0, err
    table = pd.read_csv(tmp_path / "c.csv")
    pairs = set(zip(table["level"], table["method"], strict=True))
    assert ("system", "spa") in pairs and ("pooled", "spa") not in pairs
    assert ("pooled", "acc_eq") in pairs and ("pooled", "kendall") in pairs
    acc = table[(table["method"] == "acc_eq") & (table["level"] == "pooled")].iloc[0]
    assert 0.5 < acc["estimate"] < 1 and "ties:calibrated" in acc["signature"]
    assert np.isfinite(acc["epsilon"])


def test_permutation_test_tells_a_good_metric_from_noise(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    from storyeval.meta.tie_accuracy import acc_eq_test

    metric, people, prompts, systems = _systems(0.2)
    noise = np.random.default_rng(3).normal(size=80)
    better = acc_eq_test(
        metric, noise, people, level="pooled", prompts=prompts, systems=systems, n_perm=200
    )
    assert better["estimate"] > 0.1 and better["p_value"] < 0.05
    worse = acc_eq_test(
        noise, metric, people, level="pooled", prompts=prompts, systems=systems, n_perm=200
    )
    assert worse["p_value"] > 0.9
    scores = [{"item_id": f"s{i}", "metric": name, "value": float(v), "system": str(systems[i]),
               "prompt_id": f"p{prompts[i]}"}
              for name, values in (("good", metric), ("noise", noise)) for i, v in enumerate(values)]  # fmt: skip
    judgments = [{"item_id": f"s{i}", "rater_id": "r", "criterion": "q", "value": float(v)}
                 for i, v in enumerate(people)]  # fmt: skip
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scores))
    (tmp_path / "j.jsonl").write_text("".join(json.dumps(r) + "\n" for r in judgments))
    code, _out, err = run_cli(
        "compare", "-s", str(tmp_path / "s.jsonl"), "-j", str(tmp_path / "j.jsonl"),
        "-m", "acc_eq", "--level", "story", "-o", str(tmp_path / "t.csv"),
    )  # fmt: skip
    assert code == 0, err
    table = pd.read_csv(tmp_path / "t.csv").set_index(["metric_a", "metric_b"])
    assert table.loc[("good", "noise"), "p_adjusted"] < 0.05
    assert table.loc[("good", "noise"), "signature"].startswith("acc_eq_permutation|level:story")
