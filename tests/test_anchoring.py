"""Leaderboards that survive a judge change: a new judge, a monotone distortion of the old one
plus noise, re-anchored from a hundred shared items."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from storyeval.meta.anchoring import anchor_board


def _judges(seed: int, shared: int = 100) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    """Ten systems of spaced quality, 60 stories each; the old judge sees quality plus noise on
    every story; the new judge a monotone distortion (compressed, shifted) of the old score plus
    noise, on every story; only ``shared`` stories are scored by both (the rest of the old
    judge's are another set of stories)."""
    rng = np.random.default_rng(seed)
    quality = np.linspace(1.0, 4.0, 10)
    systems = np.repeat([f"s{k}" for k in range(10)], 60)
    truth = np.repeat(quality, 60) + rng.normal(0, 0.8, size=600)
    old_score = truth + rng.normal(0, 0.3, size=600)
    new_score = 2.0 / (1 + np.exp(-(old_score - 2.5))) + 7 + rng.normal(0, 0.05, size=600)
    ids = np.array([f"i{k}" for k in range(600)])
    chosen = rng.choice(600, size=shared, replace=False)
    mask = np.zeros(600, dtype=bool)
    mask[chosen] = True
    old = pd.DataFrame({"item_id": ids, "system": systems, "value": old_score})
    new = pd.DataFrame({"item_id": ids, "system": systems, "value": new_score})
    # the old board's other items: scored by the old judge only, under other ids
    old.loc[~mask, "item_id"] = [f"old-{k}" for k in range(int((~mask).sum()))]
    return old, new, quality


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reanchored_board_agrees_with_the_old_one(seed: int) -> None:
    old, new, _ = _judges(seed)
    found = anchor_board(old, new, n_boot=200, seed=seed)
    assert found.shared_items == 100
    assert found.kendall >= 0.95
    board = found.board.set_index("system")
    # on the old scale (about 1 to 4), not the new judge's (about 7 to 9)
    assert board["anchored_mean"].between(0, 5).all() and board["new_mean"].gt(6).all()
    assert (board["ci_low"] <= board["anchored_mean"]).all()
    assert (board["anchored_mean"] <= board["ci_high"]).all()
    assert not found.changes["beyond_uncertainty"].any()  # swaps of near neighbours are noise


def test_a_real_reversal_is_reported_beyond_the_uncertainty() -> None:
    old, new, _ = _judges(0)
    new.loc[new["system"] == "s0", "value"] += 1.5  # the new judge loves the worst system
    found = anchor_board(old, new, n_boot=200)
    flagged = found.changes[found.changes["beyond_uncertainty"]]
    assert set(flagged["system_a"]) == {"s0"} and len(flagged) >= 5


def test_refuses_too_few_shared_items() -> None:
    old, new, _ = _judges(0, shared=5)
    with pytest.raises(ValueError, match="share 5 items"):
        anchor_board(old, new)


def test_rank_anchor_command(tmp_path: Path, run_cli) -> None:  # type: ignore[no-untyped-def]
    old, new, _ = _judges(1)
    for name, frame in (("old", old), ("new", new)):
        records = [
            {
                "item_id": r.item_id,
                "rater_id": name,
                "criterion": "quality",
                "value": r.value,
                "system": r.system,
            }
            for r in frame.itertuples(index=False)
        ]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    code, out, err = run_cli(
        "rank", str(tmp_path / "new.jsonl"), "--anchor", str(tmp_path / "old.jsonl"),
        "--bootstrap", "100", "-o", str(tmp_path / "board.csv"),
    )  # fmt: skip
    assert code == 0, err
    board = pd.read_csv(tmp_path / "board.csv")
    assert stats.kendalltau(board["old_mean"], board["anchored_mean"]).statistic >= 0.95
    assert board["signature"].iloc[0].startswith("anchored_board|map:isotonic|shared_items:100")
    assert "Kendall tau, old board vs anchored" in out
