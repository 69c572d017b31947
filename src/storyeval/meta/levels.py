"""Which correlation levels (pooled, story, system; within_system when asked for) a
meta-evaluation table supports, and a note for each it does not."""

from __future__ import annotations

from collections.abc import Sequence

from storyeval.meta.correlation import LEVELS
from storyeval.meta.data import MetaTable


def available_levels(
    table: MetaTable, wanted: Sequence[str] | None, *, stories_given: bool = False
) -> tuple[list[str], list[str]]:
    """The wanted levels (default: all) that the data support, and a note for each other
    (``stories_given``: a story file was read, so what it lacks is said)."""
    notes = []
    keep = []
    for level in list(wanted) if wanted else list(LEVELS):
        if level == "story" and not table.has_prompts:
            where = (
                "the story file's records have no prompt or prompt_id"
                if stories_given
                else "no item has a prompt id (pass --stories)"
            )
            notes.append(f"The story level is left out: {where}.")
        elif level in ("system", "within_system") and not table.has_systems:
            where = (
                "the story file's records have no system field"
                if stories_given
                else "no item has a system (pass --stories)"
            )
            notes.append(f"The {level.replace('_', '-')} level is left out: {where}.")
        else:
            keep.append(level)
            if level == "system":
                notes += _few_systems(table)
    return keep, notes


def _few_systems(table: MetaTable) -> list[str]:
    """A note naming the metrics that score fewer than 3 systems (their system level is
    undefined) and the systems they leave out (reference-based metrics do not score the
    stories that have no reference, often the human ones)."""
    systems = table.items["system"]
    every = sorted({str(s) for s in systems.dropna()})
    few: dict[tuple[str, ...], list[str]] = {}
    for name in table.metric_names:
        scored = sorted({str(s) for s in systems[table.metrics[name].notna()].dropna()})
        if len(scored) < 3:
            missing = tuple(s for s in every if s not in scored)
            few.setdefault(missing, []).append(name)
    notes = []
    for missing, names in few.items():
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        left = f"; they score no story of {', '.join(missing)}" if missing else ""
        notes.append(
            f"The system level needs 3 or more systems with scores and ratings; {shown} "
            f"score{'s' if len(names) == 1 else ''} {len(every) - len(missing)} of the "
            f"{len(every)} systems{left} (reference-based metrics leave out stories without a "
            "reference), so their system-level correlations are undefined."
        )
    return notes
