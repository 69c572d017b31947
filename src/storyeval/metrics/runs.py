"""What a scoring run is made of and returns: the run's records and tables, the metrics a
corpus can run, a story's prompt id and the lines of a story file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from storyeval.base.signature import Signature
from storyeval.corpus import Score, Story
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.registry import (
    MetricSpec,
    all_metrics,
)

MissingPolicy = Literal["error", "skip"]
#: Metric model roles that run a neural network (their signatures say where and how).
NEURAL_ROLES = ("encoder", "causal-lm", "nsp", "checkpoint")
NO_SYSTEM = "(none)"

#: Columns of the per-system table, in order.
SYSTEM_COLUMNS = (
    "system",
    "metric",
    "statistic",
    "estimate",
    "ci_low",
    "ci_high",
    "sd",
    "n",
    "n_undefined",
    "n_missing",
    "method",
    "higher_is_better",
    "signature",
)


@dataclass
class MetricRun:
    """What happened to one metric in a run."""

    name: str
    signature: Signature
    n_scored: int
    n_missing: int
    missing_reason: str
    seconds: float
    notes: list[str] = field(default_factory=list)


@dataclass
class ScoreRun:
    """The result of :func:`score_stories`.

    Attributes
    ----------
    scores : list of Score
        One per story and metric (value NaN where undefined), with ``system`` and
        ``prompt_id`` in ``extra``.
    systems : pandas.DataFrame
        Per-system aggregates; columns :data:`SYSTEM_COLUMNS`.
    metrics : dict of str to MetricRun
        Per metric: signature, number scored, number skipped for a missing input, seconds.
    skipped : dict of str to str
        Metrics of the default suite that were not run, and why.
    timings : dict of str to float
        Seconds spent encoding (``encoder``) and loading/computing each metric.
    details : dict
        ``(metric, statistic, system)`` -> further results of corpus-level metrics (e.g.
        MAUVE's divergence curves), for reports.
    """

    scores: list[Score]
    systems: Any
    metrics: dict[str, MetricRun]
    skipped: dict[str, str]
    timings: dict[str, float]
    context: ScoringContext | None = None
    details: dict[tuple[str, str, str], Any] = field(default_factory=dict)

    def frame(self) -> Any:
        """The per-item scores as a tidy DataFrame (item_id, metric, value, signature,
        system, prompt_id)."""
        import pandas as pd

        return pd.DataFrame(
            [{**s.to_dict(), "value": s.value} for s in self.scores],
            columns=["item_id", "metric", "value", "signature", "system", "prompt_id"],
        )


@dataclass
class CorpusPresence:
    """What the stories of a corpus have, for choosing the default suite without holding the
    stories (an engine merges the presence of its partitions).

    >>> from storyeval.corpus import Story
    >>> p = corpus_presence([Story("a", "P.", "S.", reference="R.", system="x", extra={"o": "t"})])
    >>> p.has_reference, p.has_prompt, sorted(p.text_fields), sorted(p.systems)
    (True, True, ['id', 'o', 'prompt', 'reference', 'story', 'system'], ['x'])
    """

    has_reference: bool = False
    has_prompt: bool = False
    text_fields: set[str] = field(default_factory=set)
    systems: set[str] = field(default_factory=set)

    def merge(self, other: CorpusPresence) -> CorpusPresence:
        """The presence of both corpora."""
        return CorpusPresence(
            self.has_reference or other.has_reference,
            self.has_prompt or other.has_prompt,
            self.text_fields | other.text_fields,
            self.systems | other.systems,
        )


def corpus_presence(stories: Sequence[Story]) -> CorpusPresence:
    """The :class:`CorpusPresence` of ``stories``."""
    fields: set[str] = set()
    for story in stories:
        fields.update(
            key
            for key, value in story.to_dict().items()
            if isinstance(value, str) and value.strip()
        )
    return CorpusPresence(
        any(s.references for s in stories),
        any(s.prompt.strip() for s in stories),
        fields,
        {s.system for s in stories if s.system},
    )


def default_suite(
    stories: Sequence[Story] | CorpusPresence,
) -> tuple[list[str], dict[str, str]]:
    """The metrics that can run with the offline defaults on the fields present in
    ``stories`` (or a :class:`CorpusPresence`), and the reasons the others are left out.

    A metric needing a reference (prompt, field) runs when at least one story has one; the
    stories without it are then skipped and counted.
    """
    presence = stories if isinstance(stories, CorpusPresence) else corpus_presence(stories)
    chosen: list[str] = []
    skipped: dict[str, str] = {}
    for spec in all_metrics():
        if not spec.default:
            skipped[spec.name] = "not in the default suite (ask for it with --metrics)"
            continue
        ok, why = spec.runnable_offline()
        if not ok:
            skipped[spec.name] = why
            continue
        lacking = _missing_everywhere(spec, presence, spec.defaults())
        if lacking:
            skipped[spec.name] = lacking
            continue
        chosen.append(spec.name)
    return chosen, skipped


def _missing_everywhere(
    spec: MetricSpec, presence: CorpusPresence, options: Mapping[str, Any]
) -> str:
    if spec.needs_reference and not presence.has_reference:
        return "no story has a reference"
    if spec.needs_prompt and not presence.has_prompt:
        return "no story has a prompt"
    for key in spec.field_options:
        name = options.get(key)
        if not name or str(name) not in presence.text_fields:
            return f"no story has the field {name!r} (set {spec.name}.{key})"
    reference = options.get("reference_system")
    if reference is not None and reference not in presence.systems:
        return f"no story of the reference system {reference!r} (set {spec.name}.reference_system)"
    return ""


def _field_text(story: Story, name: Any) -> str:
    if not name:
        return ""
    value = story.to_dict().get(str(name))
    return value if isinstance(value, str) and value.strip() else ""


def _lacks(spec: MetricSpec, story: Story, options: Mapping[str, Any]) -> str:
    if spec.needs_reference and not story.references:
        return "has no 'reference'"
    if spec.needs_prompt and not story.prompt.strip():
        return "has an empty 'prompt'"
    for key in spec.field_options:
        name = options.get(key)
        if not _field_text(story, name):
            return f"has no field {name!r}"
    return ""


def story_lines(path: str | Path) -> dict[str, int]:
    """Map each story id of a JSONL/CSV file to the line it starts on (for error messages)."""
    from storyeval.corpus import iter_raw_records

    lines: dict[str, int] = {}
    for number, record in iter_raw_records(path, required=("id", "story")):
        if isinstance(record, dict) and record.get("id") is not None:
            lines.setdefault(str(record["id"]), number)
    return lines
