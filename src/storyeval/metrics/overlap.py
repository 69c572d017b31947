"""N-gram overlap metrics: BLEU (sacrebleu), unigram BLEU, ROUGE (rouge-score), self-BLEU.

Per-item BLEU values are sacrebleu's sentence BLEU; the per-item sufficient statistics
(matching and total n-gram counts, hypothesis and closest reference lengths) give corpus BLEU
in per-system tables, exactly as ``sacrebleu.corpus_bleu`` computes it.
"""

from __future__ import annotations

import functools
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from storyeval.metrics.registry import (
    CorpusStatistic,
    MetricBatch,
    MetricOption,
    MetricOutput,
    register_metric,
)

_TOKENIZERS = ("13a", "intl", "none", "char")
_SMOOTHING = ("exp", "floor", "add-k", "none")


def _bleu_options(default_order: int) -> list[MetricOption]:
    return [
        MetricOption("tokenize", str, "13a", "sacrebleu tokenizer", choices=_TOKENIZERS),
        MetricOption("lowercase", bool, False, "lower-case before matching"),
        MetricOption(
            "smooth", str, "exp", "smoothing of sentence BLEU (sacrebleu's)", choices=_SMOOTHING
        ),
        MetricOption("max_order", int, default_order, "largest n-gram order", minimum=1, maximum=9),
    ]


@functools.lru_cache(maxsize=32)
def _bleu(tokenize: str, lowercase: bool, smooth: str, max_order: int, effective: bool) -> Any:
    from sacrebleu.metrics import BLEU

    return BLEU(
        tokenize=tokenize,
        lowercase=lowercase,
        smooth_method=smooth,
        max_ngram_order=max_order,
        effective_order=effective,
    )


def bleu_stats(
    hypothesis: str, references: Sequence[str], *, options: Mapping[str, Any]
) -> tuple[float, list[float]]:
    """Sentence BLEU of one hypothesis and its sufficient statistics
    ``[correct_1..n, total_1..n, sys_len, ref_len]`` (sacrebleu's, closest reference length).

    >>> score, stats = bleu_stats("the cat sat on the mat", ["the cat sat on a mat"],
    ...                           options={"tokenize": "13a", "lowercase": False, "smooth": "exp", "max_order": 4})
    >>> round(score, 2), stats
    (53.73, [5, 3, 2, 1, 6, 5, 4, 3, 6, 6])
    """
    metric = _bleu(
        options["tokenize"], options["lowercase"], options["smooth"], options["max_order"], True
    )
    result = metric.sentence_score(hypothesis, list(references))
    return float(result.score), [
        *result.counts,
        *result.totals,
        result.sys_len,
        result.ref_len,
    ]


def corpus_bleu_from_stats(stats: np.ndarray, options: Mapping[str, Any]) -> float:
    """Corpus BLEU from summed per-item statistics (what ``sacrebleu.corpus_bleu`` does)."""
    order = int(options["max_order"])
    total = np.asarray(stats, dtype=np.float64).sum(axis=0)
    metric = _bleu(options["tokenize"], options["lowercase"], options["smooth"], order, False)
    return float(
        metric.compute_bleu(
            [int(x) for x in total[:order]],
            [int(x) for x in total[order : 2 * order]],
            int(total[2 * order]),
            int(total[2 * order + 1]),
            smooth_method=options["smooth"],
            smooth_value=None,
            effective_order=False,
            max_ngram_order=order,
        ).score
    )


def _bleu_metric(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    values, stats = [], []
    for story in batch.stories:
        score, row = bleu_stats(story.story, story.references, options=options)
        values.append(score)
        stats.append(row)
    return MetricOutput(
        np.asarray(values),
        np.asarray(stats, dtype=np.float64),
        fields={"refs": max(len(s.references) for s in batch.stories)},
    )


def _corpus_bleu(stats: np.ndarray, options: Mapping[str, Any]) -> float:
    return corpus_bleu_from_stats(stats, options)


_BLEU_VARIANTS = (
    (
        "bleu",
        4,
        "Sentence BLEU of the story against its reference(s) (sacrebleu defaults); corpus BLEU "
        "per system",
        "BLEU of the system's stories as one corpus",
    ),
    (
        "bleu1",
        1,
        "Unigram BLEU (clipped unigram precision with brevity penalty), as Callan & Foster "
        "(2023) report",
        "unigram BLEU of the system's stories as one corpus",
    ),
)

for _name, _order, _description, _corpus_description in _BLEU_VARIANTS:
    register_metric(
        _name,
        description=_description,
        families=("overlap",),
        needs_reference=True,
        higher_is_better=True,
        value_range=(0.0, 100.0),
        options=_bleu_options(_order),
        backends=("sacrebleu",),
        corpus=(CorpusStatistic(f"corpus_{_name}", _corpus_bleu, _corpus_description),),
    )(_bleu_metric)


# --------------------------------------------------------------------------- ROUGE


_ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@functools.lru_cache(maxsize=2)
def _rouge_scorer(stemmer: bool) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(_ROUGE_TYPES), use_stemmer=stemmer)


def _rouge(kind: str) -> Any:
    def compute(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
        # one scorer computes the three ROUGE types at once; the others of the run reuse it
        memo = batch.context.memo.setdefault(("rouge", bool(options["stemmer"])), {})
        scorer = _rouge_scorer(bool(options["stemmer"]))
        component = {"f": "fmeasure", "p": "precision", "r": "recall"}[options["component"]]
        values = []
        for story in batch.stories:
            key = (story.story, tuple(story.references))
            if key not in memo:
                memo[key] = scorer.score_multi(story.references, story.story)
            values.append(getattr(memo[key][kind], component))
        return MetricOutput(np.asarray(values, dtype=np.float64))

    return compute


for _kind, _what in (
    ("rouge1", "unigram overlap"),
    ("rouge2", "bigram overlap"),
    ("rougeL", "longest common subsequence"),
):
    register_metric(
        _kind,
        description=f"ROUGE ({_what}) F-measure against the reference(s), rouge-score package; "
        "the best reference counts",
        families=("overlap", "rouge"),
        backends=("rouge-score", "nltk"),
        needs_reference=True,
        higher_is_better=True,
        value_range=(0.0, 1.0),
        options=[
            MetricOption("stemmer", bool, False, "Porter-stem words before matching"),
            MetricOption(
                "component", str, "f", "f-measure, precision or recall", choices=("f", "p", "r")
            ),
        ],
    )(_rouge(_kind))


# --------------------------------------------------------------------------- self-BLEU


def self_bleu_values(
    texts: Sequence[str],
    groups: Sequence[Any],
    *,
    max_order: int = 4,
    tokenize: str = "13a",
    lowercase: bool = False,
    smooth: str = "exp",
) -> np.ndarray:
    """Self-BLEU (Zhu et al. 2018): each text's sentence BLEU against every *other* text of
    its group as references; NaN for a text alone in its group.

    Computed in one pass: each n-gram's clipping count is the largest count among the
    other texts (the top count, or the second one when the text itself holds the top), which
    gives exactly sacrebleu's multi-reference sentence BLEU without re-reading the references
    for every text.

    >>> v = self_bleu_values(["a b c d e", "a b c d e", "v w x y z"], ["s", "s", "s"])
    >>> [round(float(x), 1) for x in v]
    [100.0, 100.0, 0.0]
    """
    from sacrebleu.metrics.helpers import extract_all_word_ngrams

    metric = _bleu(tokenize, lowercase, smooth, max_order, True)
    values = np.full(len(texts), np.nan)
    by_group: dict[Any, list[int]] = defaultdict(list)
    for index, group in enumerate(groups):
        by_group[group].append(index)
    for members in by_group.values():
        if len(members) < 2:
            continue
        grams: list[Counter[tuple[str, ...]]] = []
        lengths: list[int] = []
        for index in members:
            tokens = metric._preprocess_segment(texts[index])
            counter, length = extract_all_word_ngrams(tokens, 1, max_order)
            grams.append(counter)
            lengths.append(length)
        length_counts = Counter(lengths)
        unique_lengths = sorted(length_counts)
        top: dict[tuple[str, ...], list[tuple[int, int]]] = defaultdict(list)
        for position, counter in enumerate(grams):
            for gram, count in counter.items():
                best = top[gram]
                best.append((count, position))
                best.sort(reverse=True)
                del best[2:]
        for position, index in enumerate(members):
            correct = [0] * max_order
            total = [0] * max_order
            for gram, count in grams[position].items():
                n = len(gram) - 1
                total[n] += count
                best = top[gram]
                clip = 0
                for other_count, other in best:
                    if other != position:
                        clip = other_count
                        break
                correct[n] += min(count, clip)
            hyp_len = lengths[position]
            ref_len = _closest_other_length(hyp_len, length_counts, unique_lengths)
            score = metric.compute_bleu(
                correct,
                total,
                hyp_len,
                ref_len,
                smooth_method=smooth,
                smooth_value=None,
                effective_order=True,
                max_ngram_order=max_order,
            )
            values[index] = float(score.score)
    return values


def _closest_other_length(length: int, counts: Counter[int], unique: list[int]) -> int:
    """The length of another text closest to ``length`` (ties: the shorter), as sacrebleu
    picks the reference length; O(log n) with the sorted distinct lengths and their counts.

    >>> _closest_other_length(5, Counter([5, 3, 8]), [3, 5, 8])
    3
    >>> _closest_other_length(5, Counter([5, 5, 9]), [5, 9])
    5
    """
    import bisect

    if counts[length] > 1:
        return length
    at = bisect.bisect_left(unique, length)
    candidates = [
        unique[i]
        for i in (at - 1, at + 1 if at < len(unique) and unique[at] == length else at)
        if 0 <= i < len(unique)
    ]
    return min(candidates, key=lambda other: (abs(other - length), other))


@register_metric(
    "self_bleu",
    description="Self-BLEU: BLEU of each story against the other stories of its system "
    "(lower = more diverse); the per-system mean is the system's Self-BLEU",
    families=("diversity",),
    higher_is_better=False,
    value_range=(0.0, 100.0),
    level="system",
    backends=("sacrebleu",),
    options=[
        MetricOption(
            "max_order", int, 4, "largest n-gram order (Self-BLEU-n)", minimum=1, maximum=9
        ),
        MetricOption("tokenize", str, "13a", "sacrebleu tokenizer", choices=_TOKENIZERS),
        MetricOption("lowercase", bool, False, "lower-case before matching"),
    ],
)
def self_bleu(batch: MetricBatch, options: Mapping[str, Any]) -> MetricOutput:
    """Self-BLEU of each story against the other stories of its system."""
    values = self_bleu_values(
        [s.story for s in batch.stories],
        [s.system for s in batch.stories],
        max_order=options["max_order"],
        tokenize=options["tokenize"],
        lowercase=options["lowercase"],
    )
    notes = []
    if np.isnan(values).any():
        notes.append(f"{int(np.isnan(values).sum())} stories are alone in their system: undefined")
    return MetricOutput(values, notes=notes)
