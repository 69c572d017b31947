"""Assignment plans: who sees which item, in which order, with which text on which side.

A study is turned into *slots*: one slot per item and rater (``raters_per_item`` slots per
item; one per triad for the triangle test). A slot is claimed by at most one participant, so
the quota of every item holds by construction, whatever the number of participants working at
once (the server claims slots inside a locked transaction).

* Coverage: slots are ordered replicate by replicate (every item gets its first rater before
  any item gets its second), randomly within a replicate.
* Position: for two-text pages (side-by-side, pairwise) the left/right position alternates
  over items and over the raters of one item, so each system is shown left half of the time.
* Order within a participant's batch (``assignment.order``): ``fixed`` (story-file order),
  ``random`` (a per-participant shuffle), or ``balanced``: the conditions follow a row of a
  Williams Latin square chosen by the participant's number, so each condition appears in each
  position, and after each other condition, equally often across participants.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from storyeval.base.validation import check_choice
from storyeval.human.model import Study
from storyeval.human.protocols import get_protocol


@dataclass(frozen=True)
class SlotSpec:
    """One (item, rater) assignment unit before anyone claims it.

    ``layout`` lists the item's text indices in display order (``(1, 0)`` shows the second
    canonical text on the left).
    """

    seq: int
    item_key: str
    condition: str
    replicate: int
    layout: tuple[int, ...]
    group: str


def williams_square(n: int) -> list[list[int]]:
    """Rows of a Williams design for ``n`` conditions (balanced for first-order carry-over).

    Each condition appears once in each position per row set and follows every other condition
    equally often. For odd ``n`` the mirrored rows are added (``2n`` rows).

    >>> williams_square(2)
    [[0, 1], [1, 0]]
    >>> williams_square(4)
    [[0, 1, 3, 2], [1, 2, 0, 3], [2, 3, 1, 0], [3, 0, 2, 1]]
    >>> len(williams_square(3))
    6
    """
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    first = [0]
    low, high = 1, n - 1
    take_low = True
    while len(first) < n:
        if take_low:
            first.append(low)
            low += 1
        else:
            first.append(high)
            high -= 1
        take_low = not take_low
    rows = [[(value + shift) % n for value in first] for shift in range(n)]
    if n % 2 == 1 and n > 1:
        rows += [list(reversed(row)) for row in rows]
    return rows


def build_slots(study: Study) -> list[SlotSpec]:
    """All slots of a study, in claiming order (see the module docstring); the protocol lays
    out each slot's texts (left/right alternation for two texts, a shuffle for tuples)."""
    rng = random.Random(study.config.assignment.seed)
    protocol = get_protocol(study.protocol)
    items = list(study.items)
    index = {item.key: i for i, item in enumerate(items)}
    slots: list[SlotSpec] = []
    if protocol.one_slot_per_item():  # triads, already in balanced groups of six orders
        for item in items:
            layout = protocol.layout(item, index[item.key], 0, rng)
            slots.append(SlotSpec(len(slots) + 1, item.key, item.condition, 0, layout, item.group))
        return slots
    for replicate in range(study.raters_per_item):
        order = list(items)
        rng.shuffle(order)
        for item in order:
            layout = protocol.layout(item, index[item.key], replicate, rng)
            slots.append(
                SlotSpec(len(slots) + 1, item.key, item.condition, replicate, layout, item.group)
            )
    return slots


def condition_preferences(conditions: Sequence[str], participant_seq: int, count: int) -> list[str]:
    """The condition to prefer for each of ``count`` claims, so a batch mixes conditions evenly.

    >>> condition_preferences(["human", "model"], 0, 5)
    ['human', 'model', 'human', 'model', 'human']
    >>> condition_preferences(["human", "model"], 1, 3)
    ['model', 'human', 'model']
    """
    if not conditions:
        return []
    rows = williams_square(len(conditions))
    row = rows[participant_seq % len(rows)]
    return [conditions[row[i % len(row)]] for i in range(count)]


def order_batch(
    entry_conditions: Sequence[str],
    *,
    conditions: Sequence[str],
    mode: str,
    participant_seq: int,
    seed: int,
) -> list[int]:
    """The display order of a participant's batch, as indices into ``entry_conditions``.

    ``entry_conditions`` gives the condition of each claimed entry, in story-file order;
    ``mode`` is ``fixed`` (that order), ``random`` (a per-participant shuffle) or ``balanced``
    (conditions follow the participant's Williams-square row, entries shuffled within a
    condition).

    >>> order_batch(["h", "h", "m", "m"], conditions=["h", "m"], mode="fixed", participant_seq=0, seed=0)
    [0, 1, 2, 3]
    >>> order = order_batch(["h", "h", "m", "m"], conditions=["h", "m"], mode="balanced", participant_seq=1, seed=0)
    >>> [["h", "h", "m", "m"][i] for i in order]
    ['m', 'h', 'm', 'h']
    """
    positions = list(range(len(entry_conditions)))
    rng = random.Random(f"{seed}:{participant_seq}:{len(positions)}")
    if mode == "fixed":
        return positions
    if mode == "random":
        rng.shuffle(positions)
        return positions
    check_choice(mode, ("fixed", "random", "balanced"), "mode")
    buckets: dict[str, list[int]] = {}
    for i in positions:
        buckets.setdefault(entry_conditions[i], []).append(i)
    for bucket in buckets.values():
        rng.shuffle(bucket)
    ordered: list[int] = []
    for condition in condition_preferences(list(conditions), participant_seq, len(positions)):
        if buckets.get(condition):
            ordered.append(buckets[condition].pop())
    leftovers = [i for bucket in buckets.values() for i in bucket]
    rng.shuffle(leftovers)
    return ordered + leftovers


def check_positions(
    n_items: int, requested: Sequence[int | None], *, seed: int, participant_seq: int
) -> list[int]:
    """0-based positions at which attention checks are inserted into a batch of ``n_items``.

    A requested 1-based position is honoured (clipped to the batch); otherwise the check goes
    to a random position that is never the first, so no participant starts with a check.

    >>> check_positions(5, [3], seed=0, participant_seq=0)
    [2]
    """
    rng = random.Random(f"checks:{seed}:{participant_seq}")
    total = n_items + len(requested)
    positions: list[int] = []
    for wanted in requested:
        if wanted is not None:
            positions.append(min(wanted, total) - 1)
        else:
            low = 1 if total > 1 else 0
            positions.append(rng.randint(low, max(low, total - 1)))
    return positions


def participants_needed(study: Study) -> int:
    """Participants needed to fill every slot when each rates ``items_per_participant`` items.

    Each participant rates each item at most once, so with fewer items than
    ``items_per_participant`` a participant's batch is the whole item set.
    """
    slots = len(study.items) * study.raters_per_item
    per_person = min(study.items_per_participant, max(1, len(study.items)))
    if get_protocol(study.protocol).one_slot_per_item():
        per_person = study.items_per_participant
    return -(-slots // per_person)
