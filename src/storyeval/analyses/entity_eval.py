"""The entity evaluation tasks of Clark's thesis (Clark 2021, sections 3.5 and 3.6), for any
language model.

**Mention generation** (section 3.5): at every mention slot of a text, the model ranks the
correct mention against every earlier mention (duplicates collapsed) by its score given the
text before the slot; the average precision of the correct candidate (one correct candidate:
``1 / rank``; ties count as their expected rank) is averaged over all slots (MAP). Three
variants: *cluster and mention* (candidates are (words, entity) pairs), *cluster only* (the
entities) and *mention only* (the words). A plain causal LM scores words only, so it takes the
*mention only* task (as the thesis' S2SA); an entity-aware model can score all three through
:class:`MentionScorer`. The *reverse order* baseline ranks candidates by recency (most recent
first; a candidate never mentioned before comes last).

**Pairwise sentence selection** (section 3.6): given up to ``context_sentences`` (49)
sentences of context, the model chooses between the true next sentence and a distractor drawn
from the next ``distractor_window`` (50) sentences of the same text, by the higher log
probability given the context. Repeated over ``rounds`` (5) rounds of distractors: accuracy
per round, the mean and standard deviation over rounds, and an exact binomial test of the
first round's decisions against chance (one decision per context: independent).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pandas as pd

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.entities import AnnotatedText, Mention
from storyeval.perturb.base import story_rng

TASKS = ("cluster_and_mention", "cluster_only", "mention_only")
RECENCY = "reverse_order"


class MentionScorer(Protocol):
    """Scores mention candidates for a slot given the text before it (higher is better)."""

    name: str
    tasks: tuple[str, ...]

    def score_mentions(self, requests: Sequence[tuple[str, str, str]]) -> list[float]:
        """The score of each ``(context, words, cluster)`` candidate (``words`` is empty in
        the cluster-only task, ``cluster`` in the mention-only task)."""


def average_precision(scores: Sequence[float], correct: int) -> float:
    """``1 / rank`` of the correct candidate, with ties at their expected value.

    >>> average_precision([0.1, 0.5, 0.3], 2), average_precision([0.2, 0.2], 0)
    (0.5, 0.75)
    """
    values = np.asarray(scores, dtype=float)
    target = values[correct]
    above = int((values > target).sum())
    tied = int((values == target).sum())
    return float(np.mean([1.0 / (above + k) for k in range(1, tied + 1)]))


# --------------------------------------------------------------------------- the LM


class LanguageModelScorer:
    """A causal LM's log probability of a continuation given its context (summed over its
    tokens; the first token of a text is scored after the model's BOS or EOS token)."""

    tasks = ("mention_only",)

    def __init__(
        self, model: Any = None, *, batch_tokens: int = 4096, progress: bool = False
    ) -> None:
        from storyeval.models import LoadedModel, load_causal_lm

        self.lm = (
            model if isinstance(model, LoadedModel) else load_causal_lm(model, option="--model")
        )
        self.name = f"lm:{self.lm.identity}"
        self.batch_tokens = batch_tokens
        self.progress = progress

    def _ids(self, text: str) -> list[int]:
        return [int(i) for i in self.lm.tokenizer(text, add_special_tokens=False)["input_ids"]]

    def score(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        """Log P(continuation | context) of each pair. Whitespace between the two belongs to
        the continuation (as BPE tokenizers attach it to the following word). Requests that
        share a context are scored after one reading of it, and a context that extends the
        one before is read from where that one ended
        (:func:`storyeval.models.nll.continuation_nll`)."""
        from storyeval.models.nll import continuation_nll, start_token

        start = start_token(self.lm)
        prefix = [start] if start is not None else []
        groups: dict[str, tuple[list[int], list[list[int]], list[int]]] = {}
        for position, (context, continuation) in enumerate(requests):
            stripped = context.rstrip()
            gap = " " if stripped != context and stripped else ""
            group = groups.setdefault(context, (prefix + self._ids(stripped), [], []))
            group[1].append(self._ids(gap + continuation))
            group[2].append(position)
        ordered = list(groups.values())
        nll = continuation_nll(
            self.lm,
            [(ids, continuations) for ids, continuations, _ in ordered],
            progress=self.progress,
            description="scoring with the LM",
        )
        scores = [0.0] * len(requests)
        for (_, _, positions), values in zip(ordered, nll, strict=True):
            for position, value in zip(positions, values, strict=True):
                scores[position] = -float(value)
        return scores

    def score_mentions(self, requests: Sequence[tuple[str, str, str]]) -> list[float]:
        """Log P(words | context); the LM does not see clusters."""
        return self.score([(context, words) for context, words, _ in requests])


# --------------------------------------------------------------------------- mention generation


@dataclass(frozen=True)
class MentionSlot:
    """One slot of the mention generation task and its candidate lists."""

    text_id: str
    index: int
    context: str
    mention: str
    cluster: str
    candidates: dict[str, list[tuple[str, str]]]  # task -> (words, cluster) in recency order
    correct: dict[str, int]


def _key(task: str, words: str, cluster: str) -> tuple[str, str]:
    if task == "mention_only":
        return (words, "")
    if task == "cluster_only":
        return ("", cluster)
    return (words, cluster)


def mention_slots(text: AnnotatedText) -> list[MentionSlot]:
    """Every mention slot of ``text`` with the candidates of each task: the earlier mentions
    (collapsed, most recent first) and the correct one (last if it is new)."""
    slots = []
    earlier: list[Mention] = []
    for index, mention in enumerate(text.mentions):
        words = text.words(mention)
        candidates: dict[str, list[tuple[str, str]]] = {}
        correct: dict[str, int] = {}
        for task in TASKS:
            ordered = list(
                dict.fromkeys(_key(task, text.words(m), m.cluster) for m in reversed(earlier))
            )
            target = _key(task, words, mention.cluster)
            if target not in ordered:
                ordered.append(target)
            candidates[task] = ordered
            correct[task] = ordered.index(target)
        slots.append(
            MentionSlot(
                text.id,
                index,
                text.text[: mention.start],
                words,
                mention.cluster,
                candidates,
                correct,
            )
        )
        earlier.append(mention)
    return slots


@dataclass
class EntityTaskResult:
    """The per-item rows, the summary table, the signature and notes of a task run."""

    items: pd.DataFrame
    summary: pd.DataFrame
    signature: Signature
    notes: list[str] = field(default_factory=list)
    comparisons: pd.DataFrame = field(default_factory=pd.DataFrame)


def _summary(items: pd.DataFrame, value: str, by: list[str], confidence: float) -> pd.DataFrame:
    from storyeval.base.stats import mean_interval

    rows = []
    for keys, group in items.groupby(by, sort=False):
        mean, sd, low, high = mean_interval(
            group[value].to_numpy(dtype=float), confidence=confidence
        )
        rows.append(
            {
                **dict(zip(by, keys if isinstance(keys, tuple) else (keys,), strict=True)),
                "estimate": mean,
                "ci_low": low,
                "ci_high": high,
                "sd": sd,
                "n": len(group),
            }
        )
    return pd.DataFrame(rows)


def mention_generation(
    texts: Sequence[AnnotatedText],
    *,
    scorers: Sequence[MentionScorer] = (),
    baseline: bool = True,
    confidence: float = 0.95,
    source: str = "annotated",
) -> EntityTaskResult:
    """MAP of each scorer (and the reverse-order baseline) on every task it supports.

    Returns per-slot rows (``model``, ``task``, ``text_id``, ``slot``, ``candidates``,
    ``average_precision``) and the summary (``model``, ``task``, ``estimate`` = MAP, with a
    t interval over slots, ``n`` slots).
    """
    slots = [slot for text in texts for slot in mention_slots(text)]
    if not slots:
        raise StoryevalError(
            "there are no mentions: the mention generation task needs mention slots"
        )
    rows: list[dict[str, Any]] = []

    def add(model: str, task: str, slot: MentionSlot, ap: float) -> None:
        rows.append(
            {
                "model": model,
                "task": task,
                "text_id": slot.text_id,
                "slot": slot.index,
                "mention": slot.mention,
                "candidates": len(slot.candidates[task]),
                "average_precision": ap,
            }
        )

    if baseline:
        for task in TASKS:
            for slot in slots:
                recency = [-float(i) for i in range(len(slot.candidates[task]))]
                add(RECENCY, task, slot, average_precision(recency, slot.correct[task]))
    for scorer in scorers:
        for task in scorer.tasks:
            requests = [
                (slot.context, words, cluster)
                for slot in slots
                for words, cluster in slot.candidates[task]
            ]
            scores = iter(scorer.score_mentions(requests))
            for slot in slots:
                values = [next(scores) for _ in slot.candidates[task]]
                add(scorer.name, task, slot, average_precision(values, slot.correct[task]))
    items = pd.DataFrame(rows)
    summary = _summary(items, "average_precision", ["model", "task"], confidence)
    signature = Signature(
        "mention_generation",
        {
            "models": ",".join([*([RECENCY] if baseline else []), *(s.name for s in scorers)]),
            "mentions": source,
            "max_words": 3,
            "texts": len(texts),
        },
    )
    notes = []
    if source == "detected":
        notes.append(
            "mentions and clusters come from storyeval's approximate detector, not annotations"
        )
    return EntityTaskResult(items, summary, signature, notes)


# --------------------------------------------------------------------------- sentence selection


def sentence_selection(
    texts: Sequence[tuple[str, Sequence[str]]],
    *,
    scorers: Sequence[Any],
    context_sentences: int = 49,
    distractor_window: int = 50,
    rounds: int = 5,
    seed: int = 0,
    min_context: int = 1,
    confidence: float = 0.95,
) -> EntityTaskResult:
    """Accuracy of choosing the true next sentence against a later distractor.

    ``texts`` are ``(id, sentences)``; every position with at least ``min_context`` sentences
    before it and one after it is a decision. The same seed gives the same distractors to every
    model, so models are compared on identical decisions.
    """
    for name, value in (
        ("context_sentences", context_sentences),
        ("distractor_window", distractor_window),
        ("rounds", rounds),
        ("min_context", min_context),
    ):
        if value < 1:
            raise ValueError(f"{name} must be at least 1; got {value}")
    segments = []
    for text_id, sentences in texts:
        for i in range(min_context, len(sentences) - 1):
            later = list(sentences[i + 1 : i + 1 + distractor_window])
            context = " ".join(sentences[max(0, i - context_sentences) : i])
            distractors = [
                story_rng(seed, "selection", text_id, i, r).choice(later) for r in range(rounds)
            ]
            segments.append((text_id, i, context, sentences[i], distractors))
    if not segments:
        raise StoryevalError(
            f"no text has {min_context + 2} or more sentences: sentence selection needs context, "
            "the next sentence and a later one"
        )
    rows: list[dict[str, Any]] = []
    for scorer in scorers:
        requests = [(c, gold) for _, _, c, gold, _ in segments]
        requests += [(c, d) for _, _, c, _, distractors in segments for d in distractors]
        scores = scorer.score(requests)
        gold_scores = scores[: len(segments)]
        rest = iter(scores[len(segments) :])
        for (text_id, i, _, _, distractors), gold in zip(segments, gold_scores, strict=True):
            for r, _ in enumerate(distractors):
                other = next(rest)
                correct = 1.0 if gold > other else 0.5 if gold == other else 0.0
                rows.append(
                    {
                        "model": scorer.name,
                        "round": r + 1,
                        "text_id": text_id,
                        "position": i,
                        "correct": correct,
                    }
                )
    items = pd.DataFrame(rows)
    summary = _selection_summary(items, confidence)
    comparisons = model_comparisons(items, confidence)
    signature = Signature(
        "sentence_selection",
        {
            "models": ",".join(s.name for s in scorers),
            "context": context_sentences,
            "window": distractor_window,
            "rounds": rounds,
            "seed": seed,
            "min_context": min_context,
            "texts": len(texts),
        },
    )
    return EntityTaskResult(items, summary, signature, comparisons=comparisons)


def model_comparisons(items: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Every two models on the same first-round decisions (the thesis' comparison of two
    models, section 3.6): on the contexts where exactly one of them chose the true sentence,
    how often it was the first model, with an exact two-sided binomial test against 0.5.

    >>> items = pd.DataFrame({"model": ["a"] * 4 + ["b"] * 4, "round": 1,
    ...     "text_id": "t", "position": [1, 2, 3, 4] * 2, "correct": [1.0, 1, 1, 0, 0, 0, 1, 0]})
    >>> model_comparisons(items)[["model_a", "model_b", "discordant", "a_wins"]].values.tolist()
    [['a', 'b', 2, 2]]
    """
    from storyeval.base.stats import binomial_test

    first = items[items["round"] == 1]
    wide = first.pivot_table(
        index=["text_id", "position"], columns="model", values="correct", aggfunc="first"
    )
    models = list(dict.fromkeys(first["model"]))
    rows = []
    for k, a in enumerate(models):
        for b in models[k + 1 :]:
            both = wide[[a, b]].dropna()
            a_only = int(((both[a] == 1.0) & (both[b] != 1.0)).sum())
            b_only = int(((both[b] == 1.0) & (both[a] != 1.0)).sum())
            n = a_only + b_only
            p_value = binomial_test(a_only, n, confidence=confidence)[0] if n else math.nan
            rows.append(
                {
                    "model_a": a,
                    "model_b": b,
                    "decisions": len(both),
                    "discordant": n,
                    "a_wins": a_only,
                    "p_value": p_value,
                }
            )
    return pd.DataFrame(rows)


def _selection_summary(items: pd.DataFrame, confidence: float) -> pd.DataFrame:
    from storyeval.base.stats import binomial_test

    rows = []
    for model, group in items.groupby("model", sort=False):
        per_round = group.groupby("round")["correct"].mean()
        first = group[group["round"] == 1]["correct"]
        wins = int((first == 1.0).sum())
        decided = int((first != 0.5).sum())
        p_value = (
            binomial_test(wins, decided, alternative="greater", confidence=confidence)[0]
            if decided
            else math.nan
        )
        rows.append(
            {
                "model": model,
                "estimate": float(per_round.mean()),
                "sd": float(per_round.std(ddof=1)) if len(per_round) > 1 else math.nan,
                "rounds": len(per_round),
                "n": len(first),
                "p_value": p_value,
            }
        )
    return pd.DataFrame(rows)


def sentences_of(
    texts: Sequence[AnnotatedText] | Sequence[Any], split: Callable[[str], list[str]] | None = None
) -> list[tuple[str, list[str]]]:
    """``(id, sentences)`` of annotated texts or stories (the story field), split into
    sentences with storyeval's splitter."""
    from storyeval.text import split_sentences

    splitter = split or split_sentences
    return [
        (t.id, splitter(str(getattr(t, "text", None) or getattr(t, "story", "")))) for t in texts
    ]
