"""ENGEN's data pipeline and word classes as in Clark's thesis (Clark 2021, sections 3.3-3.4).

* **Words** (section 3.4): tokens are downcased, numbers become ``NUM``, and word types seen
  fewer than ``min_count`` (10) times in the training texts become ``<unk>``.
* **Segments** (section 3.4): long texts are cut into segments of at most 50 sentences, each
  trained on as its own text (mentions inside a segment keep their clusters).
* **Word classes** (section 3.3): the class-factored softmax needs a class per word; the
  thesis uses 160 Brown clusters estimated from the training data (Brown et al. 1992; Liang
  2005). :func:`exchange_clusters` finds classes that maximise the same class-bigram
  likelihood as Brown clustering, by the exchange algorithm (Kneser and Ney 1993; Martin et
  al. 1998): every word in turn moves to the class that raises the likelihood most, until no
  word moves. Brown's agglomerative merging gives a hierarchy the softmax does not use; the
  flat classes optimise the same objective.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from storyeval.entities import AnnotatedText, Mention

NUM = "NUM"
_NUMBER = re.compile(r"\d+(?:st|nd|rd|th|s)?")
_SENTENCE_END = re.compile(r"[.!?]+")


def normalise_word(word: str, *, lowercase: bool, numbers: bool) -> str:
    """A token as the thesis' vocabulary sees it.

    >>> [normalise_word(w, lowercase=True, numbers=True) for w in ("Emily", "1984", "3rd", "a1")]
    ['emily', 'NUM', 'NUM', 'a1']
    """
    if numbers and _NUMBER.fullmatch(word):
        return NUM
    return word.lower() if lowercase else word


def segments(text: AnnotatedText, sentences: int) -> list[AnnotatedText]:
    """``text`` cut after every ``sentences``-th sentence end (``.``, ``!``, ``?``); mentions
    keep their clusters, shifted into their segment. ``sentences`` 0: the text whole.

    >>> text = AnnotatedText("t", "A b. C d. E f.", (Mention(5, 6, "c"),))
    >>> [(s.id, s.text, [s.words(m) for m in s.mentions]) for s in segments(text, 2)]
    [('t#0', 'A b. C d.', ['C']), ('t#1', 'E f.', [])]
    """
    ends = [m.end() for m in _SENTENCE_END.finditer(text.text)]
    cuts = ends[sentences - 1 :: sentences] if sentences > 0 else []
    cuts = [c for c in cuts if text.text[c:].strip()]
    if not cuts:
        return [text]
    pieces = []
    start = 0
    for number, end in enumerate([*cuts, len(text.text)]):
        while start < end and text.text[start].isspace():
            start += 1
        mentions = tuple(
            Mention(m.start - start, m.end - start, m.cluster)
            for m in text.mentions
            if m.start >= start and m.end <= end
        )
        pieces.append(AnnotatedText(f"{text.id}#{number}", text.text[start:end], mentions))
        start = end
    return pieces


def _xlogx(values: np.ndarray) -> np.ndarray:
    safe = np.where(values > 0, values, 1.0)
    return np.where(values > 0, values * np.log(safe), 0.0)


class _ClassBigrams:
    """Class-bigram counts under an assignment, and the gain of moving one word."""

    def __init__(self, sequences: Sequence[Sequence[int]], size: int, assignment: np.ndarray):
        from scipy import sparse

        left = np.concatenate([np.asarray(s[:-1], dtype=np.int64) for s in sequences])
        right = np.concatenate([np.asarray(s[1:], dtype=np.int64) for s in sequences])
        ones = np.ones(len(left))
        self.bigrams = sparse.csr_matrix((ones, (left, right)), shape=(size, size))
        self.reverse = self.bigrams.T.tocsr()
        self.assignment = assignment
        classes = int(assignment.max()) + 1
        coo = self.bigrams.tocoo()
        self.counts = np.zeros((classes, classes))
        np.add.at(self.counts, (assignment[coo.row], assignment[coo.col]), coo.data)
        self.rows, self.cols = self.counts.sum(1), self.counts.sum(0)

    def _contexts(self, word: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Counts by class of the words after and before ``word`` (itself excluded) and of
        ``word word``."""
        classes = len(self.rows)
        after, before = self.bigrams[word], self.reverse[word]
        keep_a, keep_b = after.indices != word, before.indices != word
        right = np.bincount(
            self.assignment[after.indices[keep_a]], after.data[keep_a], minlength=classes
        )
        left = np.bincount(
            self.assignment[before.indices[keep_b]], before.data[keep_b], minlength=classes
        )
        return right, left, float(after[0, word])

    def _shift(
        self, cls: int, right: np.ndarray, left: np.ndarray, self_pairs: float, sign: int
    ) -> None:
        self.counts[cls, :] += sign * right
        self.counts[:, cls] += sign * left
        self.counts[cls, cls] += sign * self_pairs
        self.rows += sign * left
        self.rows[cls] += sign * (right.sum() + self_pairs)
        self.cols += sign * right
        self.cols[cls] += sign * (left.sum() + self_pairs)

    def best_class(self, word: int) -> int:
        """Move ``word`` to the class that maximises the class-bigram log-likelihood."""
        right, left, self_pairs = self._contexts(word)
        current = int(self.assignment[word])
        self._shift(current, right, left, self_pairs, -1)
        n = self.counts
        gain = (_xlogx(n + right[None, :]) - _xlogx(n)).sum(1)
        gain += (_xlogx(n + left[:, None]) - _xlogx(n)).sum(0)
        d = np.diag(n)
        gain += _xlogx(d + right + left + self_pairs) - _xlogx(d + right) - _xlogx(d + left)
        gain += _xlogx(d)
        rows, cols = self.rows + left, self.cols + right
        gain -= _xlogx(rows + right.sum() + self_pairs) - _xlogx(rows)
        gain -= _xlogx(cols + left.sum() + self_pairs) - _xlogx(cols)
        best = int(np.argmax(gain))
        if gain[best] <= gain[current] + 1e-9:
            best = current
        self._shift(best, right, left, self_pairs, 1)
        self.assignment[word] = best
        return best


def exchange_clusters(
    sequences: Sequence[Sequence[int]], size: int, classes: int, *, passes: int = 10
) -> list[int]:
    """A class (``0 .. classes - 1``) for each of ``size`` word ids, maximising the class-bigram
    likelihood of ``sequences`` (see the module docstring). Words start in classes by
    frequency rank (round robin); passes go over the words by falling frequency and stop when
    no word moves. A class is never emptied; words that never occur keep their start class.

    >>> seqs = [[0, 2, 4, 1], [0, 3, 5, 1], [0, 2, 5, 1], [0, 3, 4, 1]]
    >>> c = exchange_clusters(seqs, 6, 3)
    >>> c[2] == c[3] and c[4] == c[5] and c[2] != c[4]
    True
    """
    if classes < 1:
        raise ValueError(f"classes must be at least 1; got {classes}")
    classes = min(classes, size)
    frequency = np.bincount(np.concatenate([np.asarray(s) for s in sequences]), minlength=size)
    order = np.argsort(-frequency, kind="stable")
    assignment = np.empty(size, dtype=np.int64)
    assignment[order] = np.arange(size) % classes
    if classes == 1 or not any(len(s) > 1 for s in sequences):
        return assignment.tolist()
    state = _ClassBigrams([s for s in sequences if len(s) > 1], size, assignment)
    members = np.bincount(assignment, minlength=classes)
    for _ in range(passes):
        moved = 0
        for word in order[frequency[order] > 0]:
            current = int(assignment[word])
            if members[current] == 1:
                continue
            best = state.best_class(int(word))
            if best != current:
                members[current] -= 1
                members[best] += 1
                moved += 1
        if not moved:
            break
    return assignment.tolist()
