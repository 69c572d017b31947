"""Per-system tables of a scoring run: item means, corpus statistics and system statistics
against a reference system, with bootstrap intervals."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from storyeval.metrics.registry import (
    MetricBatch,
    MetricOutput,
    MetricSpec,
)
from storyeval.metrics.runs import NO_SYSTEM, SYSTEM_COLUMNS, MetricRun

# --------------------------------------------------------------------------- aggregation


def aggregate(
    specs: Mapping[str, MetricSpec],
    batches: Mapping[str, MetricBatch],
    outputs: Mapping[str, MetricOutput],
    runs: Mapping[str, MetricRun],
    options: Mapping[str, Mapping[str, Any]],
    *,
    bootstrap: int,
    confidence: float,
    seed: int,
    details: dict[tuple[str, str, str], Any] | None = None,
) -> Any:
    """Per-system aggregates of a run (see :data:`SYSTEM_COLUMNS`).

    For each system and metric: the mean of the defined item values (statistic ``mean``, or
    the metric's ``item_statistic`` such as ``mean_item_perplexity``) with its sd and a
    percentile bootstrap interval over items, and each corpus statistic of the metric
    computed from summed sufficient statistics, with an interval from the same resamples.
    Corpus-level metrics (MAUVE) give each system's value against the reference system
    instead; their further results go into ``details`` when given.
    """
    import pandas as pd

    rows: list[dict[str, Any]] = []
    settings = _Bootstrap(bootstrap, confidence, seed)
    for name, spec in specs.items():
        batch, output, run = batches[name], outputs[name], runs[name]
        systems = [s.system or NO_SYSTEM for s in batch.stories]
        missing_by_system = _missing_by_system(batch, run)
        if spec.level == "corpus":
            rows += _against_reference(
                spec, batch, output, run, options[name], missing_by_system, details
            )
            continue
        for system in sorted(set(systems) | set(missing_by_system)):
            index = np.array([i for i, s in enumerate(systems) if s == system], dtype=np.int64)
            common = {
                "system": system,
                "metric": name,
                "n_missing": missing_by_system.get(system, 0),
                "higher_is_better": spec.higher_is_better,
            }
            item, sample_index = _item_row(spec, run, output, index, common, settings)
            rows.append(item)
            if output.stats is not None and len(index):
                stats = np.asarray(output.stats, dtype=np.float64)[index]
                common["n_undefined"] = item["n_undefined"]
                rows += _corpus_rows(
                    spec, run, stats, options[name], sample_index, common, settings
                )
    return pd.DataFrame(rows, columns=list(SYSTEM_COLUMNS))


@dataclass(frozen=True)
class _Bootstrap:
    """The bootstrap of the per-system intervals."""

    resamples: int
    confidence: float
    seed: int

    def method(self, low: float) -> str:
        """The method column of an interval (``none`` when there is none)."""
        if not self.resamples or math.isnan(low):
            return "none"
        return f"percentile bootstrap, {self.resamples} resamples, seed {self.seed}"


def _item_row(
    spec: MetricSpec,
    run: MetricRun,
    output: MetricOutput,
    index: np.ndarray,
    common: Mapping[str, Any],
    boot: _Bootstrap,
) -> tuple[dict[str, Any], np.ndarray | None]:
    """One system's mean of the defined item values with its sd and bootstrap interval, and
    the resamples' indices (shared with the corpus statistics)."""
    from storyeval.base.stats import bootstrap_indices, percentile_interval

    values = output.values[index] if len(index) else np.zeros(0)
    defined = np.isfinite(values)
    n = int(defined.sum())
    low = high = math.nan
    sample_index = None
    if boot.resamples and len(index) > 1:
        sample_index = bootstrap_indices(len(index), boot.resamples, boot.seed)
        if n > 1:
            resampled = values[sample_index]
            with np.errstate(invalid="ignore"):
                finite = np.isfinite(resampled)
                sums = np.where(finite, resampled, 0).sum(axis=1)
                counts = finite.sum(axis=1)
                means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
            label = f"{common['metric']}, {common['system']}"
            low, high = percentile_interval(means, confidence=boot.confidence, label=label)
    signature = run.signature.with_fields(
        statistic=spec.item_statistic, n=n, bootstrap=boot.resamples, seed=boot.seed
    )
    row = {
        **common,
        "n_undefined": int(len(values) - n),
        "statistic": spec.item_statistic,
        "estimate": float(values[defined].mean()) if n else math.nan,
        "ci_low": low,
        "ci_high": high,
        "sd": float(values[defined].std(ddof=1)) if n > 1 else math.nan,
        "n": n,
        "method": boot.method(low),
        "signature": signature.render(),
    }
    return row, sample_index


def _corpus_rows(
    spec: MetricSpec,
    run: MetricRun,
    stats: np.ndarray,
    options: Mapping[str, Any],
    sample_index: np.ndarray | None,
    common: Mapping[str, Any],
    boot: _Bootstrap,
) -> list[dict[str, Any]]:
    """One system's corpus statistics (from its summed sufficient statistics), each with an
    interval from the item resamples."""
    from storyeval.base.stats import percentile_interval

    rows = []
    for corpus in spec.corpus:
        value = float(corpus.compute(stats, options))
        low = high = math.nan
        if sample_index is not None:
            samples = np.array([corpus.compute(stats[row], options) for row in sample_index])
            low, high = percentile_interval(
                samples, confidence=boot.confidence, label=f"{corpus.name}, {common['system']}"
            )
        signature = run.signature.with_fields(
            statistic=corpus.name, n=len(stats), bootstrap=boot.resamples, seed=boot.seed
        )
        rows.append(
            {
                **common,
                "statistic": corpus.name,
                "estimate": value,
                "ci_low": low,
                "ci_high": high,
                "sd": math.nan,
                "n": len(stats),
                "method": boot.method(low),
                "signature": signature.render(),
            }
        )
    return rows


def _missing_by_system(batch: MetricBatch, run: MetricRun) -> dict[str, int]:
    """Per system, the stories skipped for lacking an input of the metric."""
    counts: dict[str, int] = {}
    if run.n_missing:
        eligible_ids = {s.id for s in batch.stories}
        for story in batch.all_stories:
            if story.id not in eligible_ids:
                key = story.system or NO_SYSTEM
                counts[key] = counts.get(key, 0) + 1
    return counts


def _against_reference(
    spec: MetricSpec,
    batch: MetricBatch,
    output: MetricOutput,
    run: MetricRun,
    options: Mapping[str, Any],
    missing_by_system: Mapping[str, int],
    details: dict[tuple[str, str, str], Any] | None,
) -> list[dict[str, Any]]:
    """The rows of a corpus-level metric: each system against the reference system."""
    from storyeval.base.errors import StoryevalError

    reference = str(options["reference_system"])
    systems = [s.system or NO_SYSTEM for s in batch.stories]
    if not batch.stories:
        return []
    if output.stats is None:
        raise RuntimeError(f"metric {spec.name} is corpus-level but returned no statistics")
    stats = np.asarray(output.stats, dtype=np.float64)
    # each system's stories in id order: the value must not depend on the order of the file
    # (k-means initialisation does) nor on how an engine partitioned it
    by_id = sorted(range(len(systems)), key=lambda i: batch.stories[i].id)
    ref_index = [i for i in by_id if systems[i] == reference]
    if not ref_index:
        present = ", ".join(sorted(set(systems)))
        raise StoryevalError(
            f"metric {spec.name} compares each system with the reference system {reference!r}, "
            f"but no story has that system; set {spec.name}.reference_system to one of {present}"
        )
    others = sorted(set(systems) - {reference})
    if not others:
        raise StoryevalError(
            f"metric {spec.name} compares other systems with the reference system "
            f"{reference!r}, but every story is the reference's"
        )
    rows = []
    for system in others:
        index = [i for i in by_id if systems[i] == system]
        for statistic in spec.system_statistics:
            value = statistic.compute(
                stats[index],
                stats[ref_index],
                [batch.stories[i] for i in index],
                [batch.stories[i] for i in ref_index],
                options,
            )
            run.notes.extend(f"{system}: {note}" for note in value.notes)
            if details is not None:
                details[(spec.name, statistic.name, system)] = value.details
            signature = run.signature.with_fields(
                statistic=statistic.name, reference=reference, n=value.n, **dict(value.fields)
            )
            rows.append(
                {
                    "system": system,
                    "metric": spec.name,
                    "statistic": statistic.name,
                    "estimate": value.estimate,
                    "ci_low": value.ci_low,
                    "ci_high": value.ci_high,
                    "sd": value.sd,
                    "n": value.n,
                    "n_undefined": 0,
                    "n_missing": missing_by_system.get(system, 0),
                    "method": value.method,
                    "higher_is_better": spec.higher_is_better,
                    "signature": signature.render(),
                }
            )
    return rows
