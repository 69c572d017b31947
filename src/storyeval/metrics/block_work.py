"""The unit of scoring work: a block of consecutive stories, scored in a fresh context by every
metric that can read it (the same blocks in this process and on a Dask cluster)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from storyeval.base.errors import MissingInputError
from storyeval.corpus import Score, Story, prompt_id
from storyeval.engine.blocks import block_plan
from storyeval.metrics.context import ScoringContext, windowed_texts
from storyeval.metrics.registry import (
    MetricBatch,
    MetricOutput,
    MetricSpec,
    get_metric,
)
from storyeval.metrics.runs import MissingPolicy, _lacks

# --------------------------------------------------------------------------- blocks


def corpus_wide(spec: MetricSpec, options: Mapping[str, Any]) -> bool:
    """Whether a metric's value of a story depends on the other stories of the run (system
    level, or idf weights computed on the corpus): such a metric runs on all stories at once."""
    return spec.level == "system" or bool(spec.corpus_wide and spec.corpus_wide(options))


@dataclass
class BlockTask:
    """The metrics to run on one block of stories (the unit of work of every engine)."""

    start: int
    end: int
    names: list[str]


def block_tasks(
    n_stories: int,
    specs: Mapping[str, MetricSpec],
    resolved: Mapping[str, Mapping[str, Any]],
    block_size: int,
) -> list[BlockTask]:
    """The blocks of a run: with one block, every metric on it (one shared encoder pass); with
    several, the per-story metrics on each block and the corpus-wide ones on all stories."""
    plan = block_plan(n_stories, block_size)
    if len(plan) == 1:
        return [BlockTask(0, n_stories, list(specs))]
    wide = [name for name, spec in specs.items() if corpus_wide(spec, resolved[name])]
    local = [name for name in specs if name not in wide]
    tasks = [BlockTask(start, end, local) for start, end in plan] if local else []
    return tasks + ([BlockTask(0, n_stories, wide)] if wide else [])


def run_block(
    stories: Sequence[Story],
    offset: int,
    names: Sequence[str],
    resolved: Mapping[str, Mapping[str, Any]],
    eligible: Mapping[str, Sequence[int]],
    context: ScoringContext,
) -> tuple[dict[str, MetricOutput], dict[str, float]]:
    """Run ``names`` on a block of stories (``stories[i]`` is story ``offset + i`` of the
    run; ``eligible`` holds run indices): each text encoded once, then every metric."""
    specs = {name: get_metric(name) for name in names}
    batches = {}
    for name in names:
        mine = [i - offset for i in eligible[name] if offset <= i < offset + len(stories)]
        batches[name] = MetricBatch([stories[i] for i in mine], context, list(stories))
    with windowed_texts() as encoded:
        timings = {"encoder": _encode_once(specs, batches, resolved, context)}
    outputs = {}
    for name, spec in specs.items():
        started = time.perf_counter()
        with windowed_texts() as windowed:
            outputs[name] = _compute(spec, batches[name], resolved[name])
        timings[name] = time.perf_counter() - started
        count = len(windowed) + (len(encoded) if spec.plan is not None else 0)
        if count:
            outputs[name].notes.append(
                f"{count} text(s) longer than the model's input were read in overlapping "
                "windows (never truncated)"
            )
    return outputs, timings


def merge_outputs(parts: Sequence[MetricOutput]) -> MetricOutput:
    """One metric's outputs of consecutive blocks as one output (values and statistics in
    block order; models, fields and omitted options from the first block that scored)."""
    scored = [p for p in parts if len(p.values)] or list(parts[:1])
    values = np.concatenate([np.asarray(p.values, dtype=np.float64) for p in parts])
    stats = None
    if any(p.stats is not None for p in parts):
        stats = np.vstack(
            [
                np.asarray(p.stats, dtype=np.float64)
                for p in parts
                if p.stats is not None and len(p.values)
            ]
        )
    notes = list(dict.fromkeys(note for p in parts for note in p.notes))
    first = scored[0]
    return MetricOutput(values, stats, dict(first.models), dict(first.fields), notes, first.omit)


def lacking_inputs(
    specs: Mapping[str, MetricSpec],
    stories: Sequence[Story],
    resolved: Mapping[str, Mapping[str, Any]],
    offset: int = 0,
) -> dict[str, list[tuple[int, str]]]:
    """Per metric, ``(index + offset, reason)`` of the stories lacking an input it needs."""
    result: dict[str, list[tuple[int, str]]] = {}
    for name, spec in specs.items():
        result[name] = [
            (offset + index, reason)
            for index, story in enumerate(stories)
            if (reason := _lacks(spec, story, resolved[name]))
        ]
    return result


def eligibility(
    specs: Mapping[str, MetricSpec],
    resolved: Mapping[str, Mapping[str, Any]],
    lacking: Mapping[str, Sequence[tuple[int, str]]],
    n_stories: int,
    policy: MissingPolicy,
    locate: Any,
    where: str,
) -> tuple[dict[str, list[int]], dict[str, tuple[int, str]]]:
    """Per metric, the indices of the stories that have its inputs, and how many lack them;
    a missing input is an error naming the file and line (``locate(index)`` gives the
    story's id and line), unless skipped."""
    eligible: dict[str, list[int]] = {}
    missing_count: dict[str, tuple[int, str]] = {}
    for name, spec in specs.items():
        found = sorted(lacking[name])
        needs = _needs_text(spec, resolved[name])
        if found and policy == "error":
            index, reason = found[0]
            story_id, line = locate(index)
            raise MissingInputError(
                f"metric {name} needs {needs}: {where}:{line}: story "
                f"{story_id!r} {reason} ({len(found)} of {n_stories} "
                "stories lack it); skip and count them with --skip-missing, or leave the metric out"
            )
        out = {index for index, _ in found}
        eligible[name] = [index for index in range(n_stories) if index not in out]
        missing_count[name] = (len(found), needs if found else "")
    return eligible, missing_count


def _encode_once(
    specs: Mapping[str, MetricSpec],
    batches: Mapping[str, MetricBatch],
    resolved: Mapping[str, Mapping[str, Any]],
    context: ScoringContext,
) -> float:
    """Every embedding metric announces what it will read; each encoder encodes each text
    once. Returns the seconds spent."""
    started = time.perf_counter()
    for name, spec in specs.items():
        if spec.plan is None or not batches[name].stories:
            continue
        for encoder_name, texts, layers in spec.plan(batches[name], resolved[name]):
            context.cache(encoder_name).request(texts, layers)
    for cache in context.caches:
        cache.run()
    return time.perf_counter() - started


def _compute(spec: MetricSpec, batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Run one metric on its batch, checking it returned one value per story."""
    if not batch.stories:
        return MetricOutput(np.zeros(0))
    output = spec.compute(batch, options)
    values = np.asarray(output.values, dtype=np.float64)
    if values.shape != (len(batch.stories),):
        raise RuntimeError(
            f"metric {spec.name} returned {values.shape} values for {len(batch.stories)} stories"
        )
    output.values = values
    return output


def _score_records(
    name: str, stories: Sequence[Story], output: MetricOutput, signature: str
) -> list[Score]:
    return [
        Score(
            story.id,
            name,
            float(value),
            signature,
            {"system": story.system, "prompt_id": prompt_id(story)},
        )
        for story, value in zip(stories, output.values, strict=True)
    ]


def _needs_text(spec: MetricSpec, options: Mapping[str, Any]) -> str:
    needs = []
    if spec.needs_reference:
        needs.append("a reference")
    if spec.needs_prompt:
        needs.append("a prompt")
    needs += [f"the field {options.get(key)!r}" for key in spec.field_options]
    return " and ".join(needs) or "nothing"
