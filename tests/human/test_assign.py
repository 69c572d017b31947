"""Assignment plans: Williams squares, slot coverage, left/right counterbalancing, batch order."""

from __future__ import annotations

from collections import Counter

import pytest

from storyeval.human.assign import (
    build_slots,
    check_positions,
    condition_preferences,
    order_batch,
    participants_needed,
    williams_square,
)
from storyeval.human.study import load_study


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_williams_square_balances_positions_and_carry_over(n):
    rows = williams_square(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    for position in range(n):
        assert Counter(row[position] for row in rows) == {c: len(rows) // n for c in range(n)}
    pairs = Counter((row[i], row[i + 1]) for row in rows for i in range(n - 1))
    assert len(set(pairs.values())) == 1 and len(pairs) == n * (n - 1), (
        "each ordered pair equally often"
    )


def test_slots_cover_every_item_replicate_by_replicate(examples_dir):
    study = load_study(examples_dir / "studies" / "likert.yaml")
    slots = build_slots(study)
    assert len(slots) == len(study.items) * 3
    first_round = slots[: len(study.items)]
    assert {s.item_key for s in first_round} == {i.key for i in study.items}, (
        "everyone gets a first rater first"
    )
    assert [s.seq for s in slots] == list(range(1, len(slots) + 1))


def test_two_text_pages_alternate_sides(examples_dir):
    study = load_study(examples_dir / "studies" / "pairwise.yaml")
    slots = build_slots(study)
    assert Counter(s.layout for s in slots) == {(0, 1): 90, (1, 0): 90}
    by_item: dict[str, list[tuple[int, ...]]] = {}
    for s in slots:
        by_item.setdefault(s.item_key, []).append(s.layout)
    assert all(len(set(layouts)) == 2 for layouts in by_item.values()), (
        "raters of an item see both sides"
    )


def test_balanced_batches_interleave_conditions():
    entries = ["human"] * 3 + ["model"] * 3
    first = order_batch(
        entries, conditions=["human", "model"], mode="balanced", participant_seq=0, seed=1
    )
    second = order_batch(
        entries, conditions=["human", "model"], mode="balanced", participant_seq=1, seed=1
    )
    assert [entries[i] for i in first] == ["human", "model"] * 3
    assert [entries[i] for i in second] == ["model", "human"] * 3
    assert sorted(first) == list(range(6))
    shuffled = order_batch(
        entries, conditions=["human", "model"], mode="random", participant_seq=4, seed=1
    )
    assert sorted(shuffled) == list(range(6))
    with pytest.raises(ValueError, match="mode must be one of"):
        order_batch(entries, conditions=["human"], mode="sorted", participant_seq=0, seed=0)


def test_preferences_and_check_positions():
    assert condition_preferences(["a", "b", "c"], 0, 4) == ["a", "b", "c", "a"]
    positions = [check_positions(5, [None], seed=0, participant_seq=p)[0] for p in range(50)]
    assert min(positions) >= 1 and max(positions) <= 5, "a check is never first"
    assert check_positions(5, [9], seed=0, participant_seq=0) == [5]


def test_participants_needed(examples_dir):
    study = load_study(examples_dir / "studies" / "detection.yaml")
    assert participants_needed(study) == 50 * 3 // 5
