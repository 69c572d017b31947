"""Learned metrics trained with ``storyeval train``: UNION (Guan & Huang 2020) and NUBIA
(Kane et al. 2020).

``union`` scores each story with a UNION model trained on human-written stories
(``storyeval train union --stories HUMAN.jsonl -o DIR``): the probability, in [0, 1], that the
story is human-written rather than a perturbation. ``nubia`` scores a story against its
reference with a NUBIA aggregator (``storyeval train nubia``). Both need the trained model
directory (``--option union.model=DIR``), so neither is in the default suite.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Annotated

import numpy as np

from storyeval.metrics.context import ScoringContext
from storyeval.metrics.function import Ids, Opt, Prompts, References, Scores, Texts, metric


@dataclass(frozen=True)
class LearnedScores(Scores):
    """A trained model's score of each text (its identity and training settings signed)."""


@metric(
    "union",
    description="UNION: probability that the story is human-written, from a model trained on "
    "human stories and their perturbations (Guan & Huang 2020)",
    families=("union", "learned"),
    model="checkpoint",
    value_range=(0.0, 1.0),
    unavailable_offline="needs a trained UNION model: storyeval train union --stories HUMAN.jsonl -o DIR",
)
def union(
    texts: Texts,
    prompts: Prompts | None = None,
    *,
    model: Annotated[
        str | None,
        Opt("directory written by `storyeval train union`", model=True, required=True),
    ] = None,
    batch_size: Annotated[int, Opt("stories per forward pass", minimum=1, in_signature=False)] = 32,
    scoring: ScoringContext | None = None,
    device: str | None = None,
    precision: str | None = None,
    progress: bool = False,
) -> LearnedScores:
    """UNION (Guan and Huang 2020): the probability that each text (read after its prompt, as
    the model was trained) is human-written; long texts are scored in sentence windows.

    Parameters
    ----------
    model : str or UnionScorer
        A directory written by ``storyeval train union``, or
        :func:`storyeval.learn.union.load_union`'s result.
    """
    from storyeval.corpus import Story
    from storyeval.learn.union import load_union
    from storyeval.models.devices import autocast, on_device, place
    from storyeval.text import TruncationWarning

    assert scoring is not None
    scorer = scoring.given(model) or load_union(str(model))
    place(scorer.model, scoring.device)
    heads = prompts if prompts is not None else [""] * len(texts)
    stories = [Story(str(i), p, t) for i, (p, t) in enumerate(zip(heads, texts, strict=True))]
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncationWarning)
        with on_device(scoring.device), autocast(scoring.device, scoring.precision):
            values = scorer.score(stories, batch_size=batch_size)
    for warning in caught:
        if issubclass(warning.category, TruncationWarning):
            notes.append(str(warning.message))
        else:
            warnings.warn(warning.message, warning.category, stacklevel=2)
    fields = {k: v for k, v in scorer.signature.fields.items() if k != "model"}
    return LearnedScores(
        np.asarray(values, dtype=float),
        models={"model": scorer.identity},
        fields=fields,
        notes=tuple(notes),
    )


@metric(
    "nubia",
    description="NUBIA: a learned aggregate of semantic similarity, NLI in both directions and "
    "LM likelihood against the reference, calibrated to [0, 1] (Kane et al. 2020)",
    families=("nubia", "learned"),
    model="checkpoint",
    value_range=(0.0, 1.0),
    unavailable_offline="needs a trained NUBIA model: storyeval train nubia --stories S --judgments J -o DIR",
)
def nubia(
    candidates: Texts,
    references: References,
    ids: Ids | None = None,
    *,
    model: Annotated[
        str | None,
        Opt("directory written by `storyeval train nubia`", model=True, required=True),
    ] = None,
    features: Annotated[
        str | None,
        Opt(
            "also write every feature of every story to this CSV (why a score is low)",
            in_signature=False,
        ),
    ] = None,
    scoring: ScoringContext | None = None,
    device: str | None = None,
    precision: str | None = None,
    progress: bool = False,
) -> LearnedScores:
    """NUBIA (Kane et al. 2020): the calibrated interchangeability of each text with its
    (first) reference, in [0, 1].

    Parameters
    ----------
    model : str or NubiaModel
        A directory written by ``storyeval train nubia`` or
        :meth:`storyeval.learn.nubia.NubiaModel.load`'s result.
    ids : sequence of str, optional
        The texts' ids, for the features file.
    features : str, optional
        A CSV file to write every text's features to.
    """
    import hashlib
    from pathlib import Path

    from storyeval.io import write_table
    from storyeval.learn.nubia import NubiaModel

    assert scoring is not None
    given = scoring.given(model)
    scorer = given or NubiaModel.load(str(model))
    values, table = scorer.score(
        list(candidates),
        [refs[0] for refs in references],
        device=scoring.device,
        precision=scoring.precision,
    )
    if features:
        names = list(ids) if ids is not None else [str(i) for i in range(len(candidates))]
        write_table(Path(features), table.assign(item_id=names))
    if given is not None:  # a model object: its numbers are its identity
        identity = scorer.identity
    else:
        directory = Path(str(model))
        saved = directory / "nubia.json" if directory.is_dir() else directory
        identity = f"{directory.name}@{hashlib.sha256(saved.read_bytes()).hexdigest()[:12]}"
    fields = {k: v for k, v in scorer.signature.fields.items() if k not in ("n", "seed")}
    return LearnedScores(np.asarray(values, dtype=float), models={"model": identity}, fields=fields)
