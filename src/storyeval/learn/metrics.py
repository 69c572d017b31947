"""Learned metrics trained with ``storyeval train``: UNION (Guan & Huang 2020), NUBIA (Kane et
al. 2020) and BERT-NSP-1/2 (Callan and Foster 2023: the probability, under a BERT model with a
trained next-sentence-prediction head, that each sentence follows the prompt / the previous
sentence, averaged; the offline encoder has no trained head, so these metrics refuse with an
error naming a hub model that has one and the storyeval command that trains one), registered in the metric registry as a plug-in of this package (the entry
point ``learned`` of the group ``storyeval.metrics``), so the metrics layer needs nothing of
the training code.

``union`` scores each story with a UNION model trained on human-written stories
(``storyeval train union --stories HUMAN.jsonl -o DIR``): the probability, in [0, 1], that the
story is human-written rather than a perturbation. ``nubia`` scores a story against its
reference with a NUBIA aggregator (``storyeval train nubia``). Both need the trained model
directory (``--option union.model=DIR``), so neither is in the default suite.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.errors import ModelLoadError
from storyeval.metrics.coherence import CoherenceScores, Split, text_pairs
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.embedding import Device, Precision
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


# --------------------------------------------------------------------------- BERT-NSP-1/2

NSP_HELP = (
    "a BERT model with a trained next-sentence-prediction head: bert-base-uncased (hub; needs "
    "network access or a local copy), or a directory written by "
    "`storyeval train nsp --stories HUMAN.jsonl -o DIR`"
)


@functools.lru_cache(maxsize=4)
def _siamese_scorer(path: str, stamp: float) -> Any:
    from storyeval.learn.nsp import NspScorer

    return NspScorer(path)


def load_nsp_model(name: str | None) -> Any:
    """Load an NSP model for ``name`` (None: the offline encoder): a directory with a siamese
    head from ``storyeval train nsp`` loads as an :class:`~storyeval.learn.nsp.NspScorer`,
    anything else as ``BertForNextSentencePrediction``, refusing a model whose NSP head would be
    randomly initialised.

    Raises
    ------
    ModelLoadError
        When the checkpoint has no trained NSP head (the offline MiniLM has none).
    """
    from transformers import BertForNextSentencePrediction

    from storyeval.learn.nsp import HEAD_FILE, has_trained_nsp_head
    from storyeval.models import load_pretrained, resolve_model_path

    display, path, _ = resolve_model_path(name, "encoder")
    head = Path(path) / HEAD_FILE
    if head.is_file():  # a siamese head trained by `storyeval train nsp`
        return _siamese_scorer(str(Path(path).resolve()), head.stat().st_mtime)
    status = has_trained_nsp_head(path)
    if status is False:
        raise ModelLoadError(
            f"the encoder {display} has no trained next-sentence-prediction head (its checkpoint "
            "lacks cls.seq_relationship, which transformers would initialise at random); the NSP "
            f"metrics need {NSP_HELP}; pass it with --option nsp.model=NAME_OR_DIR"
        )
    return load_pretrained(name, "encoder", BertForNextSentencePrediction, option="nsp.model")


def nsp_probabilities(
    model: Any, pairs: Sequence[tuple[str, str]], *, batch_size: int = 32
) -> np.ndarray:
    """P(second text follows first) for ``(first, second)`` pairs, from the NSP head
    (label 0 = "is next") or a siamese head (an :class:`~storyeval.learn.nsp.NspScorer`)."""
    import torch

    from storyeval.learn.nsp import NspScorer

    if isinstance(model, NspScorer):
        return np.asarray(model.probabilities(pairs, batch_size=batch_size), dtype=np.float64)

    tokenizer = model.tokenizer
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
    result = np.zeros(len(pairs))
    limit = int(model.max_length)
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            encoded = tokenizer(
                [pairs[i][0] for i in chunk],
                [pairs[i][1] for i in chunk],
                padding=True,
                truncation="only_first",
                max_length=limit,
                return_tensors="pt",
            )
            logits = model.model(**encoded.to(model.model.device)).logits.float()
            probabilities = torch.softmax(logits, dim=-1)[:, 0].double().cpu().numpy()
            result[chunk] = probabilities
    return result


def nsp_cuts(model: Any, pairs: Sequence[tuple[str, str]]) -> tuple[int, int]:
    """How many ``(context, sentence)`` pairs the NSP model reads in part: contexts longer
    than it keeps, and sentences longer than it keeps (counted, reported, never silent)."""
    from storyeval.learn.nsp import NspScorer

    tokenizer = model.tokenizer
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    contexts = sentences = 0
    for context, sentence in pairs:
        a, b = count(context), count(sentence)
        if isinstance(model, NspScorer) and model.architecture == "siamese":
            keep_a = keep_b = model.max_length - 2  # each text on its own
        elif isinstance(model, NspScorer):  # encode_pair: the context keeps its last tokens
            keep_a = max(1, model.max_length // 2 - 2)
            keep_b = model.max_length - 3 - min(a, keep_a)
        else:  # truncation="only_first": the sentence whole, the context cut to fit
            keep_b = int(model.max_length) - 3
            keep_a = max(0, keep_b - b)
        contexts += a > keep_a
        sentences += b > keep_b
    return contexts, sentences


def _nsp(
    mode: str,
    texts: Sequence[str],
    prompts: Sequence[str],
    options: Mapping[str, Any],
    scoring: ScoringContext,
) -> CoherenceScores:
    from storyeval.models.devices import autocast, on_device, place

    model = scoring.given(options["model"]) or load_nsp_model(options["model"])
    stories = text_pairs(scoring, texts, prompts, options["split"], mode)
    flat = [(context, sentence) for pairs in stories for sentence, context in pairs]
    contexts, sentences = nsp_cuts(model, flat)
    place(model, scoring.device)
    notes = []
    if contexts:
        notes.append(
            f"{contexts} of {len(flat)} contexts (prompt or previous sentence) are longer "
            "than the NSP model reads beside a sentence and were read in part"
        )
    if sentences:
        notes.append(
            f"{sentences} of {len(flat)} sentences are longer than the NSP model reads and "
            "were read in part (their first tokens)"
        )
    with on_device(scoring.device), autocast(scoring.device, scoring.precision):
        probabilities = nsp_probabilities(model, flat, batch_size=options["batch_size"])
    if options["score"] == "label":
        probabilities = (probabilities > 0.5).astype(np.float64)
    values = []
    position = 0
    for pairs in stories:
        chunk = probabilities[position : position + len(pairs)]
        position += len(pairs)
        values.append(float(chunk.mean()) if len(chunk) else math.nan)
    return CoherenceScores(
        np.asarray(values, dtype=np.float64), models={"model": model.identity}, notes=tuple(notes)
    )


NspModel = Annotated[str | None, Opt(NSP_HELP, model=True)]
NspScore = Annotated[
    Literal["probability", "label"],
    Opt("average the probability, or the share of sentences predicted to follow"),
]
NspBatch = Annotated[int, Opt("pairs per batch", minimum=1, in_signature=False)]


def _nsp_metric(label: str, what: str) -> dict[str, Any]:
    return {
        "description": f"{label} (Callan & Foster 2023): mean probability, under a BERT NSP "
        f"head, that {what}",
        "families": ("nsp", "coherence"),
        "model": "nsp",
        "value_range": (0.0, 1.0),
        "offline": False,
        "unavailable_offline": "needs a trained NSP head: `storyeval train nsp` makes one, then "
        "--option nsp.model=DIR",
    }


@metric("nsp_prompt", **_nsp_metric("BERT-NSP-1", "each story sentence follows the prompt"))
def nsp_prompt(
    texts: Texts,
    prompts: Prompts,
    *,
    model: NspModel = None,
    split: Split = "pysbd",
    score: NspScore = "probability",
    batch_size: NspBatch = 32,
    scoring: ScoringContext | None = None,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> CoherenceScores:
    """BERT-NSP-1 (Callan and Foster 2023): the mean probability, under a trained next-sentence
    head, that each sentence of a text follows the prompt."""
    assert scoring is not None
    options = {"model": model, "split": split, "score": score, "batch_size": batch_size}
    return _nsp("prompt", texts, prompts, options, scoring)


@metric(
    "nsp_prev",
    **_nsp_metric(
        "BERT-NSP-2", "each story sentence follows the previous one (the first: the prompt)"
    ),
)
def nsp_prev(
    texts: Texts,
    prompts: Prompts,
    *,
    model: NspModel = None,
    split: Split = "pysbd",
    score: NspScore = "probability",
    batch_size: NspBatch = 32,
    scoring: ScoringContext | None = None,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> CoherenceScores:
    """BERT-NSP-2 (Callan and Foster 2023): the mean probability that each sentence of a text
    follows the previous one (the first: the prompt)."""
    assert scoring is not None
    options = {"model": model, "split": split, "score": score, "batch_size": batch_size}
    return _nsp("prev", texts, prompts, options, scoring)
