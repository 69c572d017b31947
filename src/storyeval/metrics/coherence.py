"""Unreferenced coherence metrics (Callan & Foster 2023, seed 004) and embedding coherence.

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
from pathlib import Path
from typing import Any

import numpy as np

from storyeval.errors import ModelLoadError
from storyeval.metrics.context import resolve_layer
from storyeval.metrics.embedding import (
    Greedy,
    default_layer,
    encoder_options,
    idf_weights,
    rescaler,
)
from storyeval.metrics.registry import MetricBatch, MetricOption, MetricOutput, register_metric

_SPLIT = MetricOption("split", str, "pysbd", "sentence splitter", choices=("pysbd", "spacy"))


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


def _story_pairs(
    batch: MetricBatch, options: Mapping[str, Any], mode: str
) -> list[list[tuple[str, str]]]:
    context = batch.context
    return [
        sentence_pairs(s.prompt.strip(), context.sentences(s.story, options["split"]), mode)
        for s in batch.stories
    ]


# --------------------------------------------------------------------------- BERTScore-1/2


def _bertscore_plan(mode: str) -> Any:
    def plan(
        batch: MetricBatch, options: Mapping[str, Any]
    ) -> Iterable[tuple[str | None, list[str], list[int]]]:
        cache = batch.context.cache(options["model"])
        layer = default_layer(cache.encoder, options["layer"])
        texts = [
            text for pairs in _story_pairs(batch, options, mode) for pair in pairs for text in pair
        ]
        yield options["model"], texts, [layer]

    return plan


def _bertscore_coherence(mode: str) -> Any:
    def compute(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
        cache = batch.context.cache(options["model"])
        layer = default_layer(cache.encoder, options["layer"])
        stories = _story_pairs(batch, options, mode)
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
            p, r, f = rescale(scores[:, 0], scores[:, 1], scores[:, 2])
            values.append(
                float(np.nanmean((p, r, f)[component]))
                if not np.isnan((p, r, f)[component]).all()
                else math.nan
            )
        return MetricOutput(
            np.asarray(values, dtype=np.float64),
            models={"model": cache.identity},
            fields={"layer": layer, **fields},
            omit=() if options.get("rescale") else ("baseline",),
        )

    return compute


for _mode, _name, _label, _what in (
    ("prompt", "bertscore_prompt", "BERTScore-1", "each story sentence against the prompt"),
    (
        "prev",
        "bertscore_prev",
        "BERTScore-2",
        "each story sentence against the previous one (the first against the prompt)",
    ),
):
    register_metric(
        _name,
        description=f"{_label} (Callan & Foster 2023): mean BERTScore F1 of {_what}",
        families=("bertscore", "coherence", "encoder"),
        needs_prompt=True,
        model="encoder",
        higher_is_better=True,
        value_range=(None, 1.0),
        options=[
            *encoder_options(),
            _SPLIT,
            MetricOption(
                "component", str, "f", "BERTScore F1, precision or recall", choices=("f", "p", "r")
            ),
        ],
        plan=_bertscore_plan(_mode),
        corpus_wide=lambda options: bool(options.get("idf")),
    )(_bertscore_coherence(_mode))


# --------------------------------------------------------------------------- embedding coherence


def _embedding_plan(
    batch: MetricBatch, options: Mapping[str, Any]
) -> Iterable[tuple[str | None, list[str], list[int]]]:
    cache = batch.context.cache(options["model"])
    layer = resolve_layer(cache.encoder.model, options["layer"])
    texts = [t for s in batch.stories for t in batch.context.sentences(s.story, options["split"])]
    yield options["model"], texts, [layer]


@register_metric(
    "embedding_coherence",
    description="Mean cosine similarity of consecutive sentence embeddings of the story "
    "(mean-pooled contextual token embeddings)",
    families=("coherence", "encoder"),
    model="encoder",
    higher_is_better=True,
    value_range=(-1.0, 1.0),
    options=[
        MetricOption(
            "model", str, None, "encoder: hub name or local directory (default: offline MiniLM)"
        ),
        MetricOption("layer", int, -1, "hidden layer to mean-pool (-1 = last)"),
        _SPLIT,
        MetricOption(
            "batch_tokens", int, 4096, "tokens per encoder batch", minimum=64, in_signature=False
        ),
    ],
    plan=_embedding_plan,
)
def embedding_coherence(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Mean cosine of consecutive sentence embeddings of the story."""
    cache = batch.context.cache(options["model"])
    layer = resolve_layer(cache.encoder.model, options["layer"])
    values = []
    short = 0
    for story in batch.stories:
        sentences = batch.context.sentences(story.story, options["split"])
        if len(sentences) < 2:
            short += 1
            values.append(math.nan)
            continue
        vectors = np.array(
            [cache.sentence_embedding(s, layer) for s in sentences], dtype=np.float64
        )
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        values.append(float((vectors[:-1] * vectors[1:]).sum(axis=1).mean()))
    notes = [f"{short} stories have fewer than two sentences: undefined"] if short else []
    return MetricOutput(
        np.asarray(values, dtype=np.float64),
        models={"model": cache.identity},
        fields={"layer": layer, "pooling": "mean"},
        notes=notes,
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


def _nsp(mode: str) -> Any:
    def compute(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
        model = load_nsp_model(options["model"])
        stories = _story_pairs(batch, options, mode)
        flat = [(context, sentence) for pairs in stories for sentence, context in pairs]
        contexts, sentences = nsp_cuts(model, flat)
        from storyeval.models.devices import autocast, on_device, place

        device, precision = batch.context.device, batch.context.precision
        place(model, device)
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
        with on_device(device), autocast(device, precision):
            probabilities = nsp_probabilities(model, flat, batch_size=options["batch_size"])
        if options["score"] == "label":
            probabilities = (probabilities > 0.5).astype(np.float64)
        values = []
        position = 0
        for pairs in stories:
            chunk = probabilities[position : position + len(pairs)]
            position += len(pairs)
            values.append(float(chunk.mean()) if len(chunk) else math.nan)
        return MetricOutput(
            np.asarray(values, dtype=np.float64), models={"model": model.identity}, notes=notes
        )

    return compute


for _mode, _name, _label, _what in (
    ("prompt", "nsp_prompt", "BERT-NSP-1", "each story sentence follows the prompt"),
    (
        "prev",
        "nsp_prev",
        "BERT-NSP-2",
        "each story sentence follows the previous one (the first: the prompt)",
    ),
):
    register_metric(
        _name,
        description=f"{_label} (Callan & Foster 2023): mean probability, under a BERT NSP head, "
        f"that {_what}",
        families=("nsp", "coherence"),
        needs_prompt=True,
        model="nsp",
        higher_is_better=True,
        value_range=(0.0, 1.0),
        offline=False,
        unavailable_offline="needs a trained NSP head: `storyeval train nsp` makes one, then "
        "--option nsp.model=DIR",
        options=[
            MetricOption("model", str, None, NSP_HELP),
            _SPLIT,
            MetricOption(
                "score",
                str,
                "probability",
                "average the probability, or the share of sentences predicted to follow",
                choices=("probability", "label"),
            ),
            MetricOption("batch_size", int, 32, "pairs per batch", minimum=1, in_signature=False),
        ],
    )(_nsp(_mode))
