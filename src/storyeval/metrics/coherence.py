"""Unreferenced coherence metrics (Callan & Foster 2023) and embedding coherence.

* ``bertscore_prompt`` (BERTScore-1): BERTScore F1 of each story sentence against the prompt,
  averaged over the sentences.
* ``bertscore_prev`` (BERTScore-2): the first sentence against the prompt, then each sentence
  against the one before it, averaged.
* ``nsp_prompt`` / ``nsp_prev`` (BERT-NSP-1/2) are metrics of a trained next-sentence head:
  :mod:`storyeval.learn.metrics` registers them with the other trained models' metrics.
* ``embedding_coherence``: mean cosine similarity of consecutive sentence embeddings
  (mean-pooled last-layer token embeddings, the sentence-transformers recipe).

Sentences are encoded alone (as in the paper), through the run's encoder cache.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.metrics.cards import BASELINE_NOTE, BERTSCORE_LIMITS, CF, MetricCard
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
    encoder_cache,
    idf_weights,
    rescaler,
)
from storyeval.metrics.function import INJECTED, Opt, Prompts, Scores, Texts, metric, undefined_note
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
    cache = encoder_cache(scoring, options["model"], options["batch_tokens"])
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


def _bertscore_coherence_family(
    texts: Texts,
    prompts: Prompts,
    *,
    mode: Literal["prompt", "prev"] = "prompt",
    model: EncoderName = None,
    layer: Layer = None,
    idf: Idf = False,
    rescale: Rescale = False,
    baseline: Baseline = None,
    batch_tokens: BatchTokens = 4096,
    split: Split = "pysbd",
    component: BertComponent = "f",
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> CoherenceScores:
    """The mean BERTScore of each sentence of a text against its prompt (``mode="prompt"``) or
    the sentence before it (``"prev"``): the family registered as ``bertscore_prompt`` and
    ``bertscore_prev`` (Callan and Foster 2023)."""
    options = dict(model=model, layer=layer, idf=idf, rescale=rescale, baseline=baseline)
    options.update(split=split, component=component, batch_tokens=batch_tokens)
    return _bertscore_coherence(mode, texts, prompts, options, scoring)


bertscore_prompt = metric(
    "bertscore_prompt",
    **_coherence_metric("prompt", "BERTScore-1", "each story sentence against the prompt"),
    card=MetricCard(
        measures="BERTScore-1 (Callan & Foster 2023): BERTScore F1 between the prompt and "
        "each sentence of the story (each encoded alone), averaged over the sentences. An "
        "unreferenced measure of how much the story stays related to its prompt.",
        read="Higher = sentences semantically closer to the prompt. Callan & Foster used "
        "rescaled scores (`--option bertscore.rescale=true`).",
        papers=f"{CF}, Table 2: Pearson-style correlation of BERTScore-1 with story/prompt "
        "relatedness (Q1) 0.41, coherence (Q2) 0.25, story interest (Q4) 0.28; with "
        "BERTScore-2 0.66. Rescaled values ranged from -0.187 to 0.365 (mean 0.074) on 100 "
        "GPT-Neo stories. Their highest BERTScore-1 went to a highly repetitive story.",
        limits=BERTSCORE_LIMITS + " Rewards repeating the prompt's words.",
        refs=f"{CF}; Zhang et al. (2020).",
        notes=BASELINE_NOTE,
    ),
    fixed={"mode": "prompt"},
    doc="""BERTScore-1 (Callan and Foster 2023): the mean BERTScore of each sentence of a text
    against its prompt (sentences encoded alone, as in the paper).""",
)(_bertscore_coherence_family)


bertscore_prev = metric(
    "bertscore_prev",
    **_coherence_metric(
        "prev",
        "BERTScore-2",
        "each story sentence against the previous one (the first against the prompt)",
    ),
    card=MetricCard(
        measures="BERTScore-2 (Callan & Foster 2023): BERTScore F1 of the first sentence "
        "against the prompt and of each later sentence against the one before it, averaged.",
        read="Higher = consecutive sentences semantically closer (local cohesion).",
        papers=f"{CF}, Table 2: correlation with Q1 0.29, Q2 0.21, Q4 0.23. Rescaled values "
        "ranged from -0.168 to 0.439 (mean 0.138), slightly above BERTScore-1.",
        limits=BERTSCORE_LIMITS + " Rewards repetition between adjacent sentences.",
        refs=f"{CF}; Zhang et al. (2020).",
        notes=BASELINE_NOTE,
    ),
    fixed={"mode": "prev"},
    doc="""BERTScore-2 (Callan and Foster 2023): the mean BERTScore of each sentence of a text
    against the previous one (the first against the prompt).""",
)(_bertscore_coherence_family)


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
    card=MetricCard(
        measures="Mean cosine similarity of consecutive sentence embeddings of the story "
        "(each sentence encoded alone; mean-pooled last-layer token embeddings, the "
        "sentence-transformers recipe for all-MiniLM-L6-v2, which it reproduces).",
        read="-1..1; higher = adjacent sentences about the same thing. Undefined for a "
        "one-sentence story.",
        papers="Not in the source documents; a common embedding-based cohesion proxy "
        "(cf. the Q2 coherence question of Callan & Foster). Example corpus values: see the "
        "per-system table of `make demo`.",
        limits="Topical similarity is not narrative coherence: repetition scores high and "
        "a well-motivated scene change scores low.",
        refs="Reimers & Gurevych (2019), Sentence-BERT.",
    ),
)
def embedding_coherence(
    texts: Texts,
    *,
    model: EncoderName = None,
    layer: Annotated[int, Opt("hidden layer to mean-pool (-1 = last)")] = -1,
    split: Split = "pysbd",
    batch_tokens: BatchTokens = 4096,
    scoring: ScoringContext = INJECTED,
    device: Device = None,
    precision: Precision = None,
    progress: bool = False,
) -> CoherenceScores:
    """The mean cosine of consecutive sentence embeddings of each text (undefined below two
    sentences)."""
    cache = encoder_cache(scoring, model, batch_tokens)
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
