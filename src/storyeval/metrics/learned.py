"""Learned metrics trained with ``storyeval train``: UNION (Guan & Huang 2020).

``union`` scores each story with a UNION model trained on human-written stories
(``storyeval train union --stories HUMAN.jsonl -o DIR``): the probability, in [0, 1], that the
story is human-written rather than a perturbation. It needs the trained model directory
(``--option union.model=DIR``), so it is not in the default suite.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from storyeval.metrics.registry import MetricBatch, MetricOption, MetricOutput, register_metric


@register_metric(
    "union",
    description="UNION: probability that the story is human-written, from a model trained on "
    "human stories and their perturbations (Guan & Huang 2020)",
    families=("union", "learned"),
    model="checkpoint",
    higher_is_better=True,
    value_range=(0.0, 1.0),
    options=[
        MetricOption(
            "model",
            str,
            None,
            "directory written by `storyeval train union`",
            required=True,
        ),
        MetricOption(
            "batch_size", int, 32, "stories per forward pass", minimum=1, in_signature=False
        ),
    ],
    unavailable_offline="needs a trained UNION model: storyeval train union --stories HUMAN.jsonl -o DIR",
)
def union(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Score stories with a trained UNION model (prompt and story, as it was trained)."""
    import numpy as np

    from storyeval.learn.union import load_union
    from storyeval.models.devices import autocast, on_device, place
    from storyeval.text import TruncationWarning

    scorer = batch.context.given(options["model"]) or load_union(options["model"])
    device, precision = batch.context.device, batch.context.precision
    place(scorer.model, device)
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        with on_device(device), autocast(device, precision):
            values = scorer.score(batch.stories, batch_size=int(options.get("batch_size") or 32))
    for warning in caught:
        if issubclass(warning.category, TruncationWarning):
            notes.append(str(warning.message))
        else:
            warnings.warn(warning.message, warning.category, stacklevel=2)
    signature = scorer.signature
    fields = {k: v for k, v in signature.fields.items() if k != "model"}
    return MetricOutput(
        np.asarray(values, dtype=float),
        models={"model": scorer.identity},
        fields=fields,
        notes=notes,
    )


@register_metric(
    "nubia",
    description="NUBIA: a learned aggregate of semantic similarity, NLI in both directions and "
    "LM likelihood against the reference, calibrated to [0, 1] (Kane et al. 2020)",
    families=("nubia", "learned"),
    needs_reference=True,
    model="checkpoint",
    higher_is_better=True,
    value_range=(0.0, 1.0),
    options=[
        MetricOption(
            "model", str, None, "directory written by `storyeval train nubia`", required=True
        ),
        MetricOption(
            "features",
            str,
            None,
            "also write every feature of every story to this CSV (why a score is low)",
            in_signature=False,
        ),
    ],
    unavailable_offline="needs a trained NUBIA model: storyeval train nubia --stories S --judgments J -o DIR",
)
def nubia(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Score stories against their first reference with a trained NUBIA model."""
    import hashlib
    from pathlib import Path

    from storyeval.io import write_table
    from storyeval.learn.nubia import NubiaModel

    given = batch.context.given(options["model"])
    model = given or NubiaModel.load(options["model"])
    stories = batch.stories
    values, table = model.score([s.story for s in stories], [s.references[0] for s in stories])
    if options.get("features"):
        write_table(Path(options["features"]), table.assign(item_id=[s.id for s in stories]))
    if given is not None:  # a model object: its numbers are its identity
        identity = model.identity
    else:
        directory = Path(options["model"])
        saved = directory / "nubia.json" if directory.is_dir() else directory
        identity = f"{directory.name}@{hashlib.sha256(saved.read_bytes()).hexdigest()[:12]}"
    fields = {k: v for k, v in model.signature.fields.items() if k not in ("n", "seed")}
    return MetricOutput(values, models={"model": identity}, fields=fields)
