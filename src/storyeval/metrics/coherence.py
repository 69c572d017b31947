"""Unreferenced coherence metrics (Callan & Foster 2023) and embedding coherence.

* ``bertscore_prompt`` (BERTScore-1): BERTScore F1 of each story sentence against the prompt,
  averaged over the sentences.
* ``bertscore_prev`` (BERTScore-2): the first sentence against the prompt, then each sentence
  against the one before it, averaged.
* ``nsp_prompt`` / ``nsp_prev`` (BERT-NSP-1/2): the probability, under a BERT model with a
  trained next-sentence-prediction head, that each sentence follows the prompt / the
  previous sentence (the first: the prompt), averaged. The offline encoder has no trained
  head: these metrics then refuse with an error naming a hub model that has one and the
  storyeval command that trains one.
* ``embedding_coherence``: mean cosine similarity of consecutive sentence embeddings
  (mean-pooled last-layer token embeddings, the sentence-transformers recipe).

Sentences are encoded alone (as in the paper), through the run's encoder cache.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.errors import ModelLoadError
from storyeval.metrics.context import ScoringContext, resolve_layer
from storyeval.metrics.embedding import (
    Baseline,
    BatchTokens,
    Device,
    EncoderName,
    Greedy,
    Idf,
    Layer,
    Precision,
    Rescale,
    default_layer,
    idf_weights,
    rescaler,
)
from storyeval.metrics.function import Opt, Prompts, Scores, Texts, metric, undefined_note
from storyeval.metrics.registry import MetricBatch


def sentence_pairs(prompt: str, sentences: Sequence[str], mode: str) -> list[tuple[str, str]]:
    """``(sentence, context)`` pairs: every sentence with the prompt (``mode="prompt"``), or
    the first with the prompt and each later one with the one before (``mode="prev"``).

    >>> sentence_pairs("P.", ["A.", "B.", "C."], "prev")
    [('A.', 'P.'), ('B.', 'A.'), ('C.', 'B.')]
    """
    if mode == "prompt":
        return [(s, prompt) for s in sentences]
    if mode == "prev":
        return [(s, prompt if i == 0 else sentences[i - 1]) for i, s in enumerate(sentences)]
    raise ValueError(f"mode must be prompt or prev; got {mode!r}")


def text_pairs(
    scoring: ScoringContext, texts: Sequence[str], prompts: Sequence[str], split: str, mode: str
) -> list[list[tuple[str, str]]]:
    """Per text, its ``(sentence, context)`` pairs (see :func:`sentence_pairs`)."""
    return [
        sentence_pairs(prompt.strip(), scoring.sentences(text, split), mode)
        for text, prompt in zip(texts, prompts, strict=True)
    ]


Split = Annotated[Literal["pysbd", "spacy"], Opt("sentence splitter")]
BertComponent = Annotated[Literal["f", "p", "r"], Opt("BERTScore F1, precision or recall")]


@dataclass(frozen=True)
class CoherenceScores(Scores):
    """The mean, over a text's sentences, of how well each fits its context (the prompt or
    the previous sentence)."""


# --------------------------------------------------------------------------- BERTScore-1/2


def _bertscore_plan(mode: str) -> Any:
    def plan(
        batch: MetricBatch, options: Mapping[str, Any]
    ) -> Iterable[tuple[str | None, list[str], list[int]]]:
        cache = batch.context.cache(options["model"])
        layer = default_layer(cache.encoder, options["layer"])
        stories = text_pairs(
            batch.context,
            [s.story for s in batch.stories],
            [s.prompt for s in batch.stories],
            options["split"],
            mode,
        )
        yield (
            options["model"],
            [text for pairs in stories for pair in pairs for text in pair],
            [layer],
        )

    return plan


def _bertscore_coherence(
    mode: str,
    texts: Sequence[str],
    prompts: Sequence[str],
    options: Mapping[str, Any],
    scoring: ScoringContext,
) -> CoherenceScores:
    cache = scoring.cache(options["model"])
    layer = default_layer(cache.encoder, options["layer"])
    stories = text_pairs(scoring, texts, prompts, options["split"], mode)
    cache.request([text for pairs in stories for pair in pairs for text in pair], [layer])
    cache.run()
    idf = None
    if options["idf"]:
        idf = idf_weights(cache.token_ids(ref) for pairs in stories for _, ref in pairs)
    greedy = Greedy(cache, layer, idf=idf)
    rescale, fields = rescaler(cache.encoder, layer, options)
    component = "prf".index(options["component"])
    values = []
    for pairs in stories:
        if not pairs:
            values.append(math.nan)
            continue
        scores = np.array([greedy.pair(sentence, ref) for sentence, ref in pairs])
        chosen = rescale(scores[:, 0], scores[:, 1], scores[:, 2])[component]
        values.append(float(np.nanmean(chosen)) if not np.isnan(chosen).all() else math.nan)
    return CoherenceScores(
        np.asarray(values, dtype=np.float64),
        models={"model": cache.identity},
        fields={"layer": layer, **fields},
        omit=() if options.get("rescale") else ("baseline",),
    )


def _coherence_metric(mode: str, label: str, what: str) -> dict[str, Any]:
    return {
        "description": f"{label} (Callan & Foster 2023): mean BERTScore F1 of {what}",
        "families": ("bertscore", "coherence", "encoder"),
        "model": "encoder",
        "value_range": (None, 1.0),
        "plan": _bertscore_plan(mode),
        "corpus_wide": lambda options: bool(options.get("idf")),
    }


@metric(
    "bertscore_prompt",
    **_coherence_metric("prompt", "BERTScore-1", "each story sentence against the prompt"),
)
def bertscore_prompt(
    texts: Texts,
    prompts: Prompts,
    *,
    model: EncoderName = None,
    layer: Layer = None,
    idf: Idf = False,
    rescale: Rescale = False,
    baseline: Baseline = None,
    batch_tokens: BatchTokens = 4096,
    split: Split = "pysbd",
    component: BertComponent = "f",
    scoring: ScoringContext | None = None,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> CoherenceScores:
    """BERTScore-1 (Callan and Foster 2023): the mean BERTScore of each sentence of a text
    against its prompt (sentences encoded alone, as in the paper)."""
    assert scoring is not None
    options = dict(model=model, layer=layer, idf=idf, rescale=rescale, baseline=baseline)
    options.update(split=split, component=component)
    return _bertscore_coherence("prompt", texts, prompts, options, scoring)


@metric(
    "bertscore_prev",
    **_coherence_metric(
        "prev",
        "BERTScore-2",
        "each story sentence against the previous one (the first against the prompt)",
    ),
)
def bertscore_prev(
    texts: Texts,
    prompts: Prompts,
    *,
    model: EncoderName = None,
    layer: Layer = None,
    idf: Idf = False,
    rescale: Rescale = False,
    baseline: Baseline = None,
    batch_tokens: BatchTokens = 4096,
    split: Split = "pysbd",
    component: BertComponent = "f",
    scoring: ScoringContext | None = None,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> CoherenceScores:
    """BERTScore-2 (Callan and Foster 2023): the mean BERTScore of each sentence of a text
    against the previous one (the first against the prompt)."""
    assert scoring is not None
    options = dict(model=model, layer=layer, idf=idf, rescale=rescale, baseline=baseline)
    options.update(split=split, component=component)
    return _bertscore_coherence("prev", texts, prompts, options, scoring)


# --------------------------------------------------------------------------- embedding coherence


def _embedding_plan(
    batch: MetricBatch, options: Mapping[str, Any]
) -> Iterable[tuple[str | None, list[str], list[int]]]:
    cache = batch.context.cache(options["model"])
    layer = resolve_layer(cache.encoder.model, options["layer"])
    texts = [t for s in batch.stories for t in batch.context.sentences(s.story, options["split"])]
    yield options["model"], texts, [layer]


@metric(
    "embedding_coherence",
    description="Mean cosine similarity of consecutive sentence embeddings of the story "
    "(mean-pooled contextual token embeddings)",
    families=("coherence", "encoder"),
    model="encoder",
    value_range=(-1.0, 1.0),
    plan=_embedding_plan,
)
def embedding_coherence(
    texts: Texts,
    *,
    model: EncoderName = None,
    layer: Annotated[int, Opt("hidden layer to mean-pool (-1 = last)")] = -1,
    split: Split = "pysbd",
    batch_tokens: BatchTokens = 4096,
    scoring: ScoringContext | None = None,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> CoherenceScores:
    """The mean cosine of consecutive sentence embeddings of each text (undefined below two
    sentences)."""
    assert scoring is not None
    cache = scoring.cache(model)
    index = resolve_layer(cache.encoder.model, layer)
    sentences_of = [scoring.sentences(text, split) for text in texts]
    cache.request([s for sentences in sentences_of for s in sentences], [index])
    cache.run()
    values = []
    for sentences in sentences_of:
        if len(sentences) < 2:
            values.append(math.nan)
            continue
        vectors = np.array(
            [cache.sentence_embedding(s, index) for s in sentences], dtype=np.float64
        )
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        values.append(float((vectors[:-1] * vectors[1:]).sum(axis=1).mean()))
    array = np.asarray(values, dtype=np.float64)
    return CoherenceScores(
        array,
        models={"model": cache.identity},
        fields={"layer": index, "pooling": "mean"},
        notes=tuple(undefined_note(array, "stories have fewer than two sentences")),
    )


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
