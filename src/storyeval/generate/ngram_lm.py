"""An interpolated Kneser-Ney n-gram language model, and reranking of sampled continuations
by it: the step Clark's thesis (Clark 2021, section 3.7) takes before its human evaluation of
ENGEN ("we generated 100 samples for each context/model pair and then reranked them with a
5-gram language model trained on the same training data"), to reduce the effect of fluency on
the judgments.

The model is the interpolated Kneser-Ney of NLTK's ``nltk.lm.KneserNeyInterpolated`` (Kneser
and Ney 1995; Chen and Goodman 1999), the same estimates (a test checks them to 1e-9), with
counts indexed once so a word costs a few dictionary look-ups rather than a scan of every
n-gram; and, unlike NLTK's, the unigram level is interpolated with a uniform distribution over
the vocabulary and ``<unk>``, so a sentence with an unseen word gets a finite score (as
KenLM's). The thesis used KenLM's modified Kneser-Ney (Heafield 2011), which has three
discounts per order: the ranking of candidates, not the values, is what the step uses.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from storyeval.base.signature import Signature
from storyeval.corpus import Story

BOS, EOS, UNKNOWN = "<s>", "</s>", "<unk>"


def _padded(words: Sequence[str], order: int) -> list[str]:
    return [BOS] * (order - 1) + list(words) + [EOS] * (order - 1)


@dataclass
class KneserNeyLM:
    """Interpolated Kneser-Ney of ``order`` over tokenised sentences (see the module).

    >>> lm = KneserNeyLM.fit([["the", "dog", "ran"], ["the", "cat", "ran"]], order=3)
    >>> lm.logprob(["the", "dog", "ran"]) > lm.logprob(["ran", "dog", "the"])
    True
    """

    order: int
    discount: float = 0.1
    uniform_floor: bool = True
    counts: dict[tuple[str, ...], Counter[str]] = field(default_factory=dict)
    continuations: dict[tuple[str, ...], Counter[str]] = field(default_factory=dict)
    vocabulary: set[str] = field(default_factory=set)

    @classmethod
    def fit(
        cls,
        sentences: Iterable[Sequence[str]],
        *,
        order: int = 5,
        discount: float = 0.1,
        uniform_floor: bool = True,
    ) -> KneserNeyLM:
        """Count every n-gram of order 1..``order`` of the padded sentences."""
        if order < 1:
            raise ValueError(f"order must be at least 1; got {order}")
        if not 0 < discount < 1:
            raise ValueError(f"discount must be in (0, 1); got {discount}")
        counts: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
        for sentence in sentences:
            padded = _padded(sentence, order)
            for n in range(1, order + 1):
                for i in range(len(padded) - n + 1):
                    gram = tuple(padded[i : i + n])
                    counts[gram[:-1]][gram[-1]] += 1
        # continuation counts: for the n-gram (context + word), how many distinct words precede it
        continuations: dict[tuple[str, ...], Counter[str]] = defaultdict(Counter)
        for context, following in counts.items():
            if context:
                for word in following:
                    continuations[context[1:]][word] += 1
        vocabulary = set(counts[()])
        return cls(order, discount, uniform_floor, dict(counts), dict(continuations), vocabulary)

    def _unigram(self, word: str) -> float:
        types = self.continuations.get((), Counter())
        total = sum(types.values())
        if not self.uniform_floor:
            return types[word] / total if total else 0.0
        size = len(self.vocabulary) + 1
        if not total:
            return 1.0 / size
        alpha = max(types[word] - self.discount, 0.0) / total
        gamma = self.discount * sum(1 for v in types.values() if v > 0) / total
        return alpha + gamma / size

    def probability(self, word: str, context: Sequence[str]) -> float:
        """P(word | the last ``order - 1`` words of ``context``)."""
        context = tuple(context)[-(self.order - 1) :] if self.order > 1 else ()
        if not context:
            return self._unigram(word)
        prefix = self.counts.get(context)
        if not prefix:
            return self.probability(word, context[1:])
        if len(context) + 1 == self.order:
            count, total = prefix[word], sum(prefix.values())
        else:
            following = self.continuations.get(context, Counter())
            count, total = following[word], sum(following.values())
        if not total:
            return self.probability(word, context[1:])
        alpha = max(count - self.discount, 0.0) / total
        gamma = self.discount * len(prefix) / total
        return alpha + gamma * self.probability(word, context[1:])

    def logprob(self, words: Sequence[str]) -> float:
        """Natural-log probability of a sentence, its end included (``-inf`` for an unseen word
        without the uniform floor)."""
        padded = [BOS] * (self.order - 1) + list(words) + [EOS]
        total = 0.0
        for i in range(self.order - 1, len(padded)):
            p = self.probability(padded[i], padded[i - self.order + 1 : i])
            total += math.log(p) if p > 0 else -math.inf
        return total


def ngram_tokens(text: str) -> list[str]:
    """Downcased words and punctuation (the thesis' preprocessing of ENGEN's data).

    >>> ngram_tokens("Emily's dog barked.")
    ["emily's", 'dog', 'barked', '.']
    """
    import re

    return [t.lower() for t in re.findall(r"\w+(?:'\w+)?|[^\w\s]", text)]


@dataclass(frozen=True)
class Reranked:
    """The kept continuations (each with ``ngram_logprob``, ``rerank_rank`` and
    ``rerank_candidates`` in its extra fields) and the signature of the step."""

    stories: list[Story]
    signature: Signature


def rerank_continuations(
    stories: Sequence[Story],
    lm: KneserNeyLM,
    *,
    keep: int = 1,
    per_word: bool = False,
    corpus: str = "",
) -> Reranked:
    """Per system and prompt (``prompt_id`` where the generator wrote one, else the prompt
    text), the ``keep`` continuations the n-gram model finds most probable (natural-log
    probability, divided by the words with ``per_word``; ties keep the file's order).

    Raises
    ------
    ValueError
        When ``keep`` is below 1 or there are no stories.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1; got {keep}")
    if not stories:
        raise ValueError("no stories to rerank")
    groups: dict[tuple[str, str], list[tuple[float, int, Story]]] = defaultdict(list)
    for index, story in enumerate(stories):
        words = ngram_tokens(story.story)
        score = lm.logprob(words)
        if per_word:
            score /= len(words) + 1
        key = (story.system or "", str(story.extra.get("prompt_id", story.prompt)))
        groups[key].append((score, index, story))
    kept = []
    for candidates in groups.values():
        ranked = sorted(candidates, key=lambda c: (-c[0], c[1]))
        for rank, (score, _, story) in enumerate(ranked[:keep], start=1):
            extra = {
                **story.extra,
                "ngram_logprob": score,
                "rerank_rank": rank,
                "rerank_candidates": len(candidates),
            }
            kept.append((story, replace(story, extra=extra)))
    order = {id(s): i for i, s in enumerate(stories)}
    kept.sort(key=lambda pair: order[id(pair[0])])
    signature = Signature(
        "rerank",
        {
            "lm": f"kneser-ney-{lm.order}",
            "discount": lm.discount,
            "train": corpus or "unnamed",
            "keep": keep,
            "score": "per-word" if per_word else "total",
        },
    )
    return Reranked([story for _, story in kept], signature)
