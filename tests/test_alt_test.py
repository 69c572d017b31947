"""The alternative annotator test (Calderon et al. 2025): hand-worked numbers, its verdicts on
simulated judges, and judge-eval's table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from storyeval.meta.alt_test import alt_test, alt_test_table


def _people(ratings: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"item_id": f"i{n}", "rater_id": rater, "value": value}
            for rater, values in ratings.items()
            for n, value in enumerate(values)
        ]
    )


def test_hand_worked_example() -> None:
    people = _people({"a": [1, 1, 0, 0], "b": [1, 0, 0, 1], "c": [1, 1, 0, 1]})
    judge = {"i0": 1.0, "i1": 1.0, "i2": 0.0, "i3": 1.0}
    found = alt_test(people, judge, epsilon=0.2, min_items=1)
    raters = found.raters.set_index("rater_id")
    # rater a: the judge matches both others on every item where a does, and on i3 where a
    # does not: wins 1,1,1,1 against a's 1,1,1,0; differences 0,0,0,1 shifted by 0.2 have
    # mean 0.45 and sd 0.5, so t = 0.45 / (0.5 / 2) = 1.8 on 3 degrees of freedom
    assert raters.loc["a", "judge_winning_rate"] == 1.0
    assert raters.loc["a", "rater_winning_rate"] == 0.75
    assert raters.loc["a", "p_value"] == pytest.approx(stats.t.sf(1.8, 3))
    assert raters.loc["b", "p_value"] == pytest.approx(stats.t.sf(1.8, 3))
    assert raters.loc["c", "p_value"] == 0.0  # every item a tie: differences all 0 > -0.2
    # Benjamini-Yekutieli, m = 3, c(m) = 1 + 1/2 + 1/3: the largest p times 3 c(m) / 3
    by = stats.t.sf(1.8, 3) * (1 + 1 / 2 + 1 / 3)
    assert raters.loc["a", "p_adjusted"] == pytest.approx(by)
    assert list(raters["rejected"]) == [False, False, True]
    assert found.winning_rate == pytest.approx(1 / 3) and not found.passed
    assert found.advantage_probability == 1.0


def _simulated(seed: int, judge_noise: float) -> tuple[pd.DataFrame, dict[str, float]]:
    """Six raters, each rating 60 of 120 items (binary): each flips the truth 20% of the time;
    the judge flips it ``judge_noise`` of the time."""
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 2, size=120)
    rows = []
    for rater in range(6):
        for item in rng.choice(120, size=60, replace=False):
            value = truth[item] if rng.random() > 0.2 else 1 - truth[item]
            rows.append({"item_id": f"i{item}", "rater_id": f"r{rater}", "value": float(value)})
    judge = {
        f"i{i}": float(t if rng.random() > judge_noise else 1 - t) for i, t in enumerate(truth)
    }
    return pd.DataFrame(rows), judge


def test_a_judge_as_good_as_a_rater_passes_and_a_coin_fails() -> None:
    people, good = _simulated(0, 0.1)
    assert alt_test(people, good, epsilon=0.2).passed
    _, coin = _simulated(0, 0.5)
    found = alt_test(people, coin, epsilon=0.2)
    assert not found.passed and found.advantage_probability < 0.75


def test_rejects_bad_input_and_reports_what_it_cannot_test() -> None:
    people = _people({"a": [1, 0], "b": [1, 0]})
    with pytest.raises(ValueError, match="three or more raters"):
        alt_test(people, {"i0": 1.0, "i1": 0.0})
    with pytest.raises(ValueError, match="epsilon"):
        alt_test(people, {"i0": 1.0}, epsilon=1.5)
    table = alt_test_table(
        people.assign(criterion="x"),
        pd.DataFrame({"item_id": ["i0"], "criterion": ["x"], "value": [1.0]}),
    )
    assert table.loc[0, "verdict"].startswith("not testable")
    assert table.loc[0, "signature"].startswith("alt_test|epsilon:0.2")


def test_judge_eval_writes_the_alt_test(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    people, judge = _simulated(1, 0.1)
    humans = [r | {"criterion": "quality"} for r in people.to_dict("records")]
    answers = [
        {"item_id": i, "rater_id": "llm", "criterion": "quality", "value": v}
        for i, v in judge.items()
    ]
    (tmp_path / "h.jsonl").write_text("".join(json.dumps(r) + "\n" for r in humans))
    (tmp_path / "j.jsonl").write_text("".join(json.dumps(r) + "\n" for r in answers))
    code, out, err = run_cli(
        "judge-eval", "--judge", str(tmp_path / "j.jsonl"), "--humans", str(tmp_path / "h.jsonl"),
        "--bootstrap", "50", "-o", str(tmp_path / "eval"),
    )  # fmt: skip
    assert code == 0, err
    table = pd.read_csv(tmp_path / "eval" / "alt_test.csv")
    assert table.loc[0, "verdict"] == "may replace a rater"
    assert "alternative annotator test" in out
