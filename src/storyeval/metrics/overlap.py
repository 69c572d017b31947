"""N-gram overlap metrics: BLEU (sacrebleu), unigram BLEU, ROUGE (rouge-score), self-BLEU.

Per-item BLEU values are sacrebleu's sentence BLEU; the per-item sufficient statistics
(matching and total n-gram counts, hypothesis and closest reference lengths) give corpus BLEU
in per-system tables, exactly as ``sacrebleu.corpus_bleu`` computes it.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.metrics.cards import BLEU_LIMITS, CF, CLARK, ROUGE_LIMITS, MetricCard
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.function import (
    INJECTED,
    Groups,
    Opt,
    References,
    Scores,
    Texts,
    metric,
    undefined_note,
)
from storyeval.metrics.registry import CorpusStatistic

_TOKENIZERS = ("13a", "intl", "none", "char")
_SMOOTHING = ("exp", "floor", "add-k", "none")

Tokenize = Annotated[Literal["13a", "intl", "none", "char"], Opt("sacrebleu tokenizer")]
Lowercase = Annotated[bool, Opt("lower-case before matching")]
Smooth = Annotated[
    Literal["exp", "floor", "add-k", "none"], Opt("smoothing of sentence BLEU (sacrebleu's)")
]
MaxOrder = Annotated[int, Opt("largest n-gram order", minimum=1, maximum=9)]


@dataclass(frozen=True)
class BleuScores(Scores):
    """Sentence BLEU per text (``values``, 0-100), with sacrebleu's sufficient statistics per
    text (``stats``: matching and total n-gram counts, hypothesis length, closest reference
    length) and corpus BLEU of all texts (``corpus``, equal to ``sacrebleu.corpus_bleu``)."""

    @property
    def scores(self) -> np.ndarray:
        """Sentence BLEU of each text (0-100)."""
        return self.values

    @property
    def max_order(self) -> int:
        """The largest n-gram order."""
        return 0 if self.stats is None else (self.stats.shape[1] - 2) // 2

    @property
    def counts(self) -> np.ndarray:
        """Matching n-grams of each text, shape ``(n, max_order)``."""
        assert self.stats is not None
        return self.stats[:, : self.max_order]

    @property
    def totals(self) -> np.ndarray:
        """N-grams of each text, shape ``(n, max_order)``."""
        assert self.stats is not None
        return self.stats[:, self.max_order : 2 * self.max_order]

    @property
    def sys_len(self) -> np.ndarray:
        """Tokens of each text."""
        assert self.stats is not None
        return self.stats[:, -2]

    @property
    def ref_len(self) -> np.ndarray:
        """Tokens of each text's closest reference."""
        assert self.stats is not None
        return self.stats[:, -1]

    @property
    def corpus(self) -> float:
        """Corpus BLEU of all texts (``corpus_bleu`` or ``corpus_bleu1``)."""
        return float(next(iter(self.corpus_values.values()), math.nan))


@dataclass(frozen=True)
class RougeScores(Scores):
    """ROUGE of each text against its best reference (0-1)."""


@dataclass(frozen=True)
class SelfBleuScores(Scores):
    """Self-BLEU of each text against the others of its group (0-100; NaN when alone)."""


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


def _bleu_scores(
    texts: list[str], references: list[list[str]], options: Mapping[str, Any]
) -> BleuScores:
    values, stats = [], []
    for text, refs in zip(texts, references, strict=True):
        score, row = bleu_stats(text, refs, options=options)
        values.append(score)
        stats.append(row)
    return BleuScores(
        np.asarray(values),
        np.asarray(stats, dtype=np.float64),
        fields={"refs": max(len(r) for r in references)},
    )


def _corpus_bleu(stats: np.ndarray, options: Mapping[str, Any]) -> float:
    return corpus_bleu_from_stats(stats, options)


def _sentence_bleu(
    texts: Texts,
    references: References,
    *,
    tokenize: Tokenize = "13a",
    lowercase: Lowercase = False,
    smooth: Smooth = "exp",
    max_order: MaxOrder = 4,
) -> BleuScores:
    """Sentence BLEU per text and corpus BLEU: the family registered as ``bleu`` and ``bleu1``."""
    options = {
        "tokenize": tokenize,
        "lowercase": lowercase,
        "smooth": smooth,
        "max_order": max_order,
    }
    return _bleu_scores(list(texts), [list(r) for r in references], options)


bleu = metric(
    "bleu",
    description="Sentence BLEU of the story against its reference(s) (sacrebleu defaults); corpus "
    "BLEU per system",
    families=("overlap",),
    value_range=(0.0, 100.0),
    backends=("sacrebleu",),
    corpus=(
        CorpusStatistic("corpus_bleu", _corpus_bleu, "BLEU of the system's stories as one corpus"),
    ),
    card=MetricCard(
        measures="Modified n-gram precision (n = 1..4) of the story against its reference(s) "
        "with a brevity penalty (Papineni et al. 2002), computed by sacrebleu with its "
        "defaults (13a tokenizer, exp smoothing, effective order for sentences). The "
        "per-system table adds corpus BLEU (`corpus_bleu`), computed from the summed "
        "per-story n-gram statistics exactly as `sacrebleu.corpus_bleu` does.",
        read="0-100. Near 0 for open-ended continuations is normal; differences of a point "
        "or two between story generators are rarely meaningful. Prefer `corpus_bleu` with its "
        "bootstrap interval to the mean of sentence BLEU.",
        papers="The source documents report no BLEU-4 for stories. Example corpus "
        "(SmolLM2-135M continuations vs the human continuation, `make demo`): see the "
        "per-system table; values around 1-2 are expected.",
        limits=BLEU_LIMITS,
        refs="Papineni et al. (2002); Post (2018), sacrebleu.",
    ),
    doc="""BLEU (Papineni et al. 2002, sacrebleu): sentence BLEU per text and corpus BLEU.

    Examples
    --------
    >>> result = bleu(["the cat sat on the mat", "a dog ran"], ["the cat sat on a mat", "a dog ran away"])
    >>> result.scores.round(2).tolist(), round(result.corpus, 2), result.counts[0].tolist()
    ([53.73, 71.65], 53.42, [5.0, 3.0, 2.0, 1.0])
    """,
)(_sentence_bleu)


bleu1 = metric(
    "bleu1",
    description="Unigram BLEU (clipped unigram precision with brevity penalty), as Callan & "
    "Foster (2023) report",
    families=("overlap",),
    value_range=(0.0, 100.0),
    backends=("sacrebleu",),
    corpus=(
        CorpusStatistic(
            "corpus_bleu1", _corpus_bleu, "unigram BLEU of the system's stories as one corpus"
        ),
    ),
    card=MetricCard(
        measures="Unigram BLEU: clipped unigram precision with the brevity penalty, the "
        '"1-gram BLEU" Callan & Foster report beside BERTScore. Corpus value `corpus_bleu1` '
        "in the per-system table.",
        read="0-100 (Callan & Foster write 0-1: their 0.1226 is 12.26 here). It measures "
        "shared words, not coherence: their example prompt/sentence pair has a low BLEU-1 but a "
        "high rescaled BERTScore.",
        papers=f'{CF}: the prompt "You are born with the ability to stop time..." and the '
        'story sentence "Your brain takes over and tells you to move, but you cannot." have '
        "1-gram BLEU 0.1226 (12.26 on this scale) and rescaled BERTScore 0.287.",
        limits=BLEU_LIMITS,
        refs=f"{CF}; Papineni et al. (2002).",
    ),
    defaults={"max_order": 1},
    doc="""Unigram BLEU: :func:`bleu` with ``max_order=1`` by default.

    >>> round(float(bleu1(["the cat sat"], ["the cat sat down"]).values[0]), 2)
    71.65
    """,
)(_sentence_bleu)


# --------------------------------------------------------------------------- ROUGE


_ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@functools.lru_cache(maxsize=2)
def _rouge_scorer(stemmer: bool) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(_ROUGE_TYPES), use_stemmer=stemmer)


Stemmer = Annotated[bool, Opt("Porter-stem words before matching")]
Component = Annotated[Literal["f", "p", "r"], Opt("f-measure, precision or recall")]


def _rouge(
    kind: str,
    texts: list[str],
    references: list[list[str]],
    stemmer: bool,
    component: str,
    scoring: ScoringContext,
) -> RougeScores:
    """ROUGE ``kind`` of each text; one scorer computes the three types at once and the other
    ROUGE metrics of a run reuse its results."""
    memo = scoring.memo.setdefault(("rouge", bool(stemmer)), {})
    scorer = _rouge_scorer(bool(stemmer))
    attribute = {"f": "fmeasure", "p": "precision", "r": "recall"}[component]
    values = []
    for text, refs in zip(texts, references, strict=True):
        key = (text, tuple(refs))
        if key not in memo:
            memo[key] = scorer.score_multi(refs, text)
        values.append(getattr(memo[key][kind], attribute))
    return RougeScores(np.asarray(values, dtype=np.float64))


_ROUGE = {
    "families": ("overlap", "rouge"),
    "backends": ("rouge-score", "nltk"),
    "value_range": (0.0, 1.0),
}


def _rouge_description(what: str) -> str:
    return (
        f"ROUGE ({what}) F-measure against the reference(s), rouge-score package; the best "
        "reference counts"
    )


def _rouge_family(
    texts: Texts,
    references: References,
    *,
    kind: Literal["rouge1", "rouge2", "rougeL"] = "rougeL",
    stemmer: Stemmer = False,
    component: Component = "f",
    scoring: ScoringContext = INJECTED,
) -> RougeScores:
    """ROUGE of ``kind`` of each text against its best reference: the family registered as
    ``rouge1``, ``rouge2`` and ``rougeL``."""
    return _rouge(kind, list(texts), list(references), stemmer, component, scoring)  # type: ignore[arg-type]


rouge1 = metric(
    "rouge1",
    description=_rouge_description("unigram overlap"),
    **_ROUGE,  # type: ignore[arg-type]
    card=MetricCard(
        measures="ROUGE-1 F-measure: unigram overlap between story and reference "
        "(rouge-score package; with several references the best one counts).",
        read="0-1, higher means more shared words with the reference.",
        papers=f"{CLARK}, Table 5.4 (CNN/Daily Mail summaries, x100): re-trained MLE+Pgen "
        "baseline ROUGE-1 36.95; with an SMS reward 38.52.",
        limits=ROUGE_LIMITS,
        refs="Lin (2004); Google's rouge-score.",
    ),
    fixed={"kind": "rouge1"},
    doc="""ROUGE-1 (Lin 2004, the rouge-score package) of each text against its best reference.

    >>> rouge1(["the cat sat"], [["a dog", "the cat sat down"]]).values.round(3).tolist()
    [0.857]
    """,
)(_rouge_family)


rouge2 = metric(
    "rouge2",
    description=_rouge_description("bigram overlap"),
    **_ROUGE,  # type: ignore[arg-type]
    card=MetricCard(
        measures="ROUGE-2 F-measure: bigram overlap between story and reference "
        "(rouge-score; best reference).",
        read="0-1; for open-ended stories values are near 0.",
        papers=f"{CLARK}, Table 5.4 (summaries, x100): MLE+Pgen baseline ROUGE-2 15.56; "
        "with WMS or SMS rewards 16.52.",
        limits=ROUGE_LIMITS,
        refs="Lin (2004).",
    ),
    fixed={"kind": "rouge2"},
    doc="""ROUGE-2 (bigrams) of each text against its best reference.""",
)(_rouge_family)


rougeL = metric(
    "rougeL",
    description=_rouge_description("longest common subsequence"),
    **_ROUGE,  # type: ignore[arg-type]
    card=MetricCard(
        measures="ROUGE-L F-measure: longest common subsequence of story and reference "
        "(rouge-score; best reference).",
        read="0-1; sensitive to the order of shared words.",
        papers=f"{CLARK}: Table 5.1, a human summary scores ROUGE-L 39.30 (x100) and 31.44 "
        "once its clauses are reordered; Table 5.3, Spearman correlation with human judgments "
        "0.117 (summaries) and 0.441 (essays), below the sentence mover's metrics.",
        limits=ROUGE_LIMITS,
        refs="Lin (2004); Clark et al. (2019).",
    ),
    fixed={"kind": "rougeL"},
    doc="""ROUGE-L (longest common subsequence) of each text against its best reference.

    >>> rougeL(["the cat sat"], ["the cat sat down"]).values.round(3).tolist()
    [0.857]
    """,
)(_rouge_family)


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


@metric(
    "self_bleu",
    description="Self-BLEU: BLEU of each story against the other stories of its system "
    "(lower = more diverse); the per-system mean is the system's Self-BLEU",
    families=("diversity",),
    higher_is_better=False,
    value_range=(0.0, 100.0),
    level="system",
    backends=("sacrebleu",),
    card=MetricCard(
        measures="Self-BLEU (Zhu et al. 2018): each story's BLEU (sacrebleu, n = 4) against "
        "all the other stories of the same system as references; the system's value is the "
        "mean. A per-system measure: per-story values exist but depend on the system's other "
        "stories.",
        read="0-100; lower = the system's stories differ more from each other (more "
        "diverse). Undefined for a story alone in its system.",
        papers=f"Cited as a diversity measure in {CLARK} (ch. 1); no values reported.",
        limits="Grows with the number of stories (more references, more matches): compare "
        "systems on the same number of stories. Uses sacrebleu's exp smoothing, unlike Texygen's "
        "NLTK smoothing, so values differ from papers that used Texygen.",
        refs="Zhu et al. (2018), Texygen.",
    ),
)
def self_bleu(
    texts: Texts,
    groups: Groups | None = None,
    *,
    max_order: Annotated[int, Opt("largest n-gram order (Self-BLEU-n)", minimum=1, maximum=9)] = 4,
    tokenize: Tokenize = "13a",
    lowercase: Lowercase = False,
) -> SelfBleuScores:
    """Self-BLEU (Zhu et al. 2018) of each text against the other texts of its group (all
    texts are one group when ``groups`` is not given).

    >>> self_bleu(["the cat sat on the mat", "the cat sat on the mat", "a dog ran away fast"]).values.round(1).tolist()
    [100.0, 100.0, 0.0]
    """
    labels = list(groups) if groups is not None else ["all"] * len(texts)
    values = self_bleu_values(
        list(texts), labels, max_order=max_order, tokenize=tokenize, lowercase=lowercase
    )
    return SelfBleuScores(
        values, notes=tuple(undefined_note(values, "stories are alone in their system"))
    )
