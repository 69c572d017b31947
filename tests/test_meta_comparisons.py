"""Rankings from comparisons (recovery of known strengths, bootstrap over prompts, the file
format and its errors, the adaptive plan) and paired tests between two systems."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from storyeval.base.errors import DataFileError
from storyeval.meta.comparisons import (
    minimum_detectable_effect,
    next_pairs,
    paired_test,
    prompts_needed,
    rank_systems,
    read_comparisons,
    win_rate_matrix,
)

TRUE = {"strong": 1.0, "middle": 0.0, "weak": -1.0}


def _simulated(prompts: int, seed: int = 0) -> pd.DataFrame:
    """Each prompt: every pair of systems compared three times under Bradley-Terry."""
    rng = np.random.default_rng(seed)
    rows = []
    names = list(TRUE)
    for p in range(prompts):
        for i in range(3):
            for j in range(i + 1, 3):
                a, b = names[i], names[j]
                for r in range(3):
                    p_a = 1 / (1 + math.exp(TRUE[b] - TRUE[a]))
                    winner = a if rng.random() < p_a else b
                    rows.append(
                        {
                            "item_id": f"{p}-{a}-{b}-{r}",
                            "prompt_id": f"p{p}",
                            "system_a": a,
                            "system_b": b,
                            "winner": winner,
                            "rater_id": f"r{r}",
                            "criterion": "overall",
                        }
                    )
    return pd.DataFrame(rows)


def test_bradley_terry_recovers_known_strengths_with_intervals_that_cover_them() -> None:
    table = rank_systems(_simulated(150), n_boot=200, seed=1)
    bt = table[table["method"] == "bradley-terry"].set_index("system")
    assert bt.index.tolist() == ["strong", "middle", "weak"]
    for system, value in TRUE.items():
        assert bt.loc[system, "estimate"] == pytest.approx(value, abs=0.2)
        assert bt.loc[system, "ci_low"] <= value <= bt.loc[system, "ci_high"]
    elo = table[table["method"] == "elo"]["system"].tolist()
    assert elo == ["strong", "middle", "weak"]
    assert (bt["comparisons"] == 2 * 150 * 3).all()
    assert "resample:prompts" in bt["signature"].iloc[0]


def test_comparison_files_are_checked_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        '{"item_id": "a", "prompt_id": "p", "system_a": "x", "system_b": "y", "winner": "x"}\n'
        '{"item_id": "b", "prompt_id": "p", "system_a": "x", "system_b": "x", "winner": "x"}\n'
        '{"item_id": "c", "prompt_id": "p", "system_a": "x", "system_b": "y", "winner": "z"}\n'
        '{"item_id": "d", "prompt_id": "p", "system_a": "x", "winner": "x"}\n'
    )
    with pytest.raises(DataFileError) as info:
        read_comparisons(path)
    text = str(info.value)
    assert f"{path}:2: system 'x' is compared with itself" in text
    assert f"{path}:3: winner must be 'x', 'y' or 'tie'; got 'z'" in text
    assert f"{path}:4: missing field(s) system_b" in text


def test_win_rates_and_the_adaptive_plan() -> None:
    frame = pd.DataFrame(
        {"system_a": ["a", "a", "b"], "system_b": ["b", "b", "c"], "winner": ["a", "tie", "b"]}
    )
    rates = win_rate_matrix(frame)
    assert (
        rates.loc["a", "b"] == 0.75
        and rates.loc["b", "a"] == 0.25
        and math.isnan(rates.loc["a", "c"])
    )
    plan = next_pairs(frame, budget=2, systems=["a", "b", "c", "d"])
    never = {frozenset(p) for p in zip(plan["system_a"], plan["system_b"], strict=True)}
    assert all(count == 0 for count in plan["comparisons"])  # never-compared pairs first
    assert frozenset({"a", "b"}) not in never


def test_paired_tests_detect_a_real_shift_and_not_noise() -> None:
    rng = np.random.default_rng(0)
    base = rng.normal(3, 1, 60)
    better = base + 0.5 + rng.normal(0, 0.5, 60)
    same = base + rng.normal(0, 0.5, 60)
    for method in ("bootstrap", "permutation", "sign"):
        assert paired_test(better, base, method=method, n_resamples=2000)["p_value"] < 0.01  # type: ignore[arg-type]
        assert paired_test(same, base, method=method, n_resamples=2000)["p_value"] > 0.05  # type: ignore[arg-type]
    boot = paired_test(better, base, n_resamples=2000)
    assert boot["ci_low"] < 0.5 < boot["ci_high"]
    from scipy.stats import binomtest

    exact = binomtest(int((better > base).sum()), 60, 0.5).pvalue
    assert paired_test(better, base, method="sign")["p_value"] == pytest.approx(exact)
    with pytest.raises(ValueError, match="one length"):
        paired_test([1, 2, 3], [1, 2])


def test_power_planning_matches_statsmodels() -> None:
    from statsmodels.stats.power import TTestPower

    n = prompts_needed(0.3, 1.2, alpha=0.05, power=0.9)
    exact = TTestPower().solve_power(effect_size=0.25, alpha=0.05, power=0.9)
    assert n == math.ceil(exact)
    assert minimum_detectable_effect(n, 1.2, power=0.9) <= 0.3 + 1e-9


def test_study_exports_are_read_as_comparisons(tmp_path: Path) -> None:
    import json

    pairwise = tmp_path / "pairwise.jsonl"
    pairwise.write_text(
        json.dumps(
            {
                "item_id": "p1",
                "rater_id": "r1",
                "criterion": "overall",
                "value": 1.0,
                "system_a": "x",
                "system_b": "y",
                "chosen": "x",
            }
        )
        + "\n"
        + json.dumps(
            {
                "item_id": "p2",
                "rater_id": "r1",
                "criterion": "overall",
                "value": 0.5,
                "system_a": "x",
                "system_b": "y",
                "chosen": "tie",
            }
        )
        + "\n"
    )
    frame = read_comparisons(pairwise)
    assert frame["winner"].tolist() == ["x", "tie"] and frame["prompt_id"].tolist() == ["p1", "p2"]
    bws = tmp_path / "bws.jsonl"
    roles = {
        "s1": ("a", "best"),
        "s2": ("b", "neither"),
        "s3": ("c", "neither"),
        "s4": ("d", "worst"),
    }
    bws.write_text(
        "".join(
            json.dumps(
                {
                    "item_id": f"t1:{story}",
                    "rater_id": "r1",
                    "criterion": "overall",
                    "value": 0,
                    "story": story,
                    "system": system,
                    "role": role,
                    "item_key": "t1",
                }
            )
            + "\n"
            for story, (system, role) in roles.items()
        )
    )
    implied = read_comparisons(bws)
    wins = implied.groupby("winner").size().to_dict()
    assert wins == {"a": 3, "b": 1, "c": 1}  # best beats 3; the two others beat the worst
    assert set(implied["prompt_id"]) == {"t1"}
    table = rank_systems(implied, n_boot=0)
    assert table[table["method"] == "bradley-terry"]["system"].iloc[0] == "a"


def test_margin_weighted_comparisons_let_clear_preferences_count_more() -> None:
    from storyeval.meta.comparisons import rank_systems

    rows = []
    for k in range(30):  # x wins 20 slight preferences, y wins 10 clear ones
        x_wins = k < 20
        rows.append(
            {
                "item_id": f"c{k}",
                "prompt_id": f"p{k}",
                "system_a": "x",
                "system_b": "y",
                "winner": "x" if x_wins else "y",
                "margin": 0.1 if x_wins else 1.0,
                "p_first": 0.55 if x_wins else 0.0,
            }
        )
    frame = pd.DataFrame(rows)

    def order(table: pd.DataFrame) -> list[str]:
        return table[table["method"] == "bradley-terry"]["system"].tolist()

    assert order(rank_systems(frame, n_boot=0)) == ["x", "y"]
    weighted = rank_systems(frame, n_boot=0, weights="margin")
    assert order(weighted) == ["y", "x"] and "weights:margin" in weighted["signature"].iloc[0]
    assert order(rank_systems(frame, n_boot=0, weights="strength")) == ["y", "x"]
    with pytest.raises(ValueError, match="no column 'effort'"):
        rank_systems(frame, n_boot=0, weights="effort")


def test_an_anchored_pool_keeps_its_numbers_when_a_system_joins(tmp_path, run_cli) -> None:
    """A pool of three systems is ranked once; a fourth joins with a few comparisons against
    two of them: the pool's strengths do not move, and the newcomer lands between the systems
    it beat and lost to."""
    import json

    from storyeval.meta.comparisons import rank_systems

    rng = np.random.default_rng(0)
    strength = {"a": -1.0, "b": 0.0, "c": 1.0, "new": 0.5}

    def play(x: str, y: str, n: int, start: int) -> list[dict]:
        rows = []
        for k in range(n):
            p = 1 / (1 + np.exp(strength[y] - strength[x]))
            rows.append(
                {
                    "item_id": f"{x}{y}{start + k}",
                    "prompt_id": f"p{start + k}",
                    "system_a": x,
                    "system_b": y,
                    "winner": x if rng.random() < p else y,
                }
            )
        return rows

    pool = play("a", "b", 60, 0) + play("b", "c", 60, 100) + play("a", "c", 60, 200)
    first = rank_systems(pd.DataFrame(pool), n_boot=0)
    stored = tmp_path / "pool.csv"
    first.to_csv(stored, index=False)
    anchors = {r.system: r.estimate for r in first[first["method"] == "bradley-terry"].itertuples()}
    joining = play("new", "b", 40, 300) + play("new", "c", 40, 400)
    second = rank_systems(pd.DataFrame(joining), n_boot=20, anchors=anchors)
    bt = second[second["method"] == "bradley-terry"].set_index("system")["estimate"]
    assert bt["b"] == anchors["b"] and bt["c"] == anchors["c"]  # the pool did not move
    assert anchors["b"] < bt["new"] < anchors["c"] + 0.5
    assert "anchored:2" in second["signature"].iloc[0]
    pairs = tmp_path / "joining.jsonl"
    pairs.write_text("".join(json.dumps(r) + "\n" for r in joining))
    code, _, err = run_cli(
        "rank",
        str(pairs),
        "-o",
        str(tmp_path / "r.csv"),
        "--anchors",
        str(stored),
        "--bootstrap",
        "0",
    )
    assert code == 0, err
    again = pd.read_csv(tmp_path / "r.csv")
    assert again.set_index(["method", "system"]).loc[
        ("bradley-terry", "c"), "estimate"
    ] == pytest.approx(anchors["c"])
