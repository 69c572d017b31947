"""Phrases and rhythm of model prose: the counting behind the prose metrics
(:mod:`storyeval.metrics.prose`) and the ``storyeval diagnose`` tables
(:mod:`storyeval.analyses.diagnostics`): cheap measures researchers report beside quality
scores.

- **Over-used phrases**: word n-grams found in many more of a system's stories than of the
  reference (human) stories of the same corpus, with the ratio of the shares of stories
  containing them (:func:`overused_phrases`); per story, the share of its n-grams that are its
  system's over-used phrases (the ``overused_phrase_rate`` metric).
- **Repetition across stories**: n-grams that recur in many stories of one system
  (:func:`repeated_phrases`); per story, the share of its n-grams found in other stories of its
  system (``cross_story_repetition``).
- **Slop index**: the share of a story's words on a list of words language models over-use
  (``slop_index``; the list is versioned, shipped, and replaceable).
- **Rhythm**: the coefficient of variation of sentence and paragraph lengths
  (``sentence_length_cv``, ``paragraph_length_cv``): people vary their sentence lengths more
  than models do.

Every function counts in one pass over the stories (linear in the corpus size).

Examples
--------
>>> from storyeval.corpus import Story
>>> stories = [Story(f"h{i}", "", f"Tom walked to the shop number {i}.", system="human") for i in range(4)]
>>> stories += [Story(f"m{i}", "", f"A testament to the quiet shop {i}.", system="model") for i in range(4)]
>>> table = overused_phrases(stories, n=3, min_stories=3)
>>> table[["system", "ngram", "stories", "reference_stories"]].head(2).to_dict("records")
[{'system': 'model', 'ngram': 'a testament to', 'stories': 4, 'reference_stories': 0}, {'system': 'model', 'ngram': 'testament to the', 'stories': 4, 'reference_stories': 0}]
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from storyeval.text import tokenize_words

if TYPE_CHECKING:
    import pandas as pd

Gram = tuple[str, ...]
SLOP_LIST_VERSION = "slop-v1"
PHRASE_COLUMNS = (
    "system",
    "ngram",
    "n",
    "stories",
    "share",
    "reference_stories",
    "reference_share",
    "ratio",
)
REPEATED_COLUMNS = ("system", "ngram", "n", "stories", "share", "occurrences")


def words(text: str) -> list[str]:
    """Lower-cased word tokens without punctuation.

    >>> words("A testament, to the QUIET shop!")
    ['a', 'testament', 'to', 'the', 'quiet', 'shop']
    """
    return tokenize_words(text, lowercase=True, punctuation=False)


def ngrams(tokens: Sequence[str], n: int) -> list[Gram]:
    """The word n-grams of a token list, in order."""
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    return [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]


def _document_frequencies(texts: Iterable[str], n: int) -> tuple[Counter[Gram], Counter[Gram], int]:
    """In how many texts each n-gram occurs, how often in all, and the number of texts."""
    df: Counter[Gram] = Counter()
    total: Counter[Gram] = Counter()
    count = 0
    for text in texts:
        grams = ngrams(words(text), n)
        total.update(grams)
        df.update(set(grams))
        count += 1
    return df, total, count


def _by_system(stories: Sequence[Any]) -> dict[str, list[Any]]:
    groups: dict[str, list[Any]] = defaultdict(list)
    for story in stories:
        groups[story.system or "(none)"].append(story)
    return dict(groups)


def smoothed_ratio(stories: int, n_stories: int, reference: int, n_reference: int) -> float:
    """Ratio of the shares of stories containing a phrase, each smoothed with half a story
    (so a phrase absent from the reference has a finite ratio).

    >>> round(smoothed_ratio(10, 20, 0, 20), 2)
    21.0
    """
    return ((stories + 0.5) / (n_stories + 1)) / ((reference + 0.5) / (n_reference + 1))


def overused_phrase_sets(
    stories: Sequence[Any],
    *,
    n: int = 3,
    reference_system: str = "human",
    min_stories: int = 3,
    min_ratio: float = 3.0,
) -> tuple[dict[str, dict[Gram, tuple[int, int, float]]], int]:
    """Per system (the reference excluded), its over-used n-grams with (stories containing
    it, reference stories containing it, ratio); and the number of reference stories."""
    _check(n, min_stories, min_ratio)
    groups = _by_system(stories)
    if reference_system not in groups:
        present = ", ".join(sorted(groups))
        raise ValueError(
            f"no story has the reference system {reference_system!r}; the systems are {present}"
        )
    ref_df, _, n_ref = _document_frequencies((s.story for s in groups[reference_system]), n)
    result: dict[str, dict[Gram, tuple[int, int, float]]] = {}
    for system, members in sorted(groups.items()):
        if system == reference_system:
            continue
        df, _, count = _document_frequencies((s.story for s in members), n)
        chosen = {}
        for gram, stories_with in df.items():
            if stories_with < min_stories:
                continue
            ratio = smoothed_ratio(stories_with, count, ref_df.get(gram, 0), n_ref)
            if ratio >= min_ratio:
                chosen[gram] = (stories_with, ref_df.get(gram, 0), ratio)
        result[system] = chosen
    return result, n_ref


def _check(n: int, min_stories: int, min_ratio: float) -> None:
    if n < 1:
        raise ValueError(f"n must be >= 1; got {n}")
    if min_stories < 1:
        raise ValueError(f"min_stories must be >= 1; got {min_stories}")
    if min_ratio <= 0:
        raise ValueError(f"min_ratio must be > 0; got {min_ratio}")


def overused_phrases(
    stories: Sequence[Any],
    *,
    n: int = 3,
    reference_system: str = "human",
    min_stories: int = 3,
    min_ratio: float = 3.0,
) -> Any:
    """Phrases (word n-grams) found in many more of a system's stories than of the reference
    system's stories of the same corpus.

    Parameters
    ----------
    stories : sequence of Story
        Stories of several systems, the reference among them.
    n : int
        Phrase length in words.
    reference_system : str
        The system whose stories give the profile (people's).
    min_stories : int
        A phrase must occur in at least this many of the system's stories.
    min_ratio : float
        ... and its share of stories must be at least this many times the reference's (each
        share smoothed by half a story, see :func:`smoothed_ratio`).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`PHRASE_COLUMNS`, most over-used first within each system.

    Raises
    ------
    ValueError
        For bad settings, or when no story has the reference system.
    """
    import pandas as pd

    sets, n_ref = overused_phrase_sets(
        stories,
        n=n,
        reference_system=reference_system,
        min_stories=min_stories,
        min_ratio=min_ratio,
    )
    sizes = {system: len(members) for system, members in _by_system(stories).items()}
    rows = [
        {
            "system": system,
            "ngram": " ".join(gram),
            "n": n,
            "stories": count,
            "share": count / sizes[system],
            "reference_stories": ref,
            "reference_share": ref / n_ref,
            "ratio": ratio,
        }
        for system, grams in sets.items()
        for gram, (count, ref, ratio) in grams.items()
    ]
    frame = pd.DataFrame(rows, columns=list(PHRASE_COLUMNS))
    if len(frame):
        frame = frame.sort_values(
            ["system", "ratio", "stories", "ngram"], ascending=[True, False, False, True]
        )
    return frame.reset_index(drop=True)


def repeated_phrases(stories: Sequence[Any], *, n: int = 4, min_stories: int = 3) -> Any:
    """Phrases (word n-grams) that recur in at least ``min_stories`` stories of one system.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`REPEATED_COLUMNS` (``occurrences`` counts every use), most
        widespread first within each system.

    Examples
    --------
    >>> from storyeval.corpus import Story
    >>> s = [Story(str(i), "", "Once upon a time there was a cat.", system="m") for i in range(3)]
    >>> repeated_phrases(s, n=4, min_stories=3)["ngram"].tolist()[:2]
    ['a time there was', 'once upon a time']
    """
    import pandas as pd

    _check(n, min_stories, 1.0)
    rows = []
    for system, members in sorted(_by_system(stories).items()):
        df, total, count = _document_frequencies((s.story for s in members), n)
        rows += [
            {
                "system": system,
                "ngram": " ".join(gram),
                "n": n,
                "stories": k,
                "share": k / count,
                "occurrences": total[gram],
            }
            for gram, k in df.items()
            if k >= min_stories
        ]
    frame = pd.DataFrame(rows, columns=list(REPEATED_COLUMNS))
    if len(frame):
        frame = frame.sort_values(["system", "stories", "ngram"], ascending=[True, False, True])
    return frame.reset_index(drop=True)


def share_in(tokens_grams: Sequence[Gram], chosen: set[Gram] | dict[Gram, Any]) -> float:
    """The share of the n-grams that are in ``chosen`` (NaN without n-grams)."""
    if not tokens_grams:
        return math.nan
    return sum(1 for gram in tokens_grams if gram in chosen) / len(tokens_grams)


def cross_story_shares(texts: Sequence[str], *, n: int = 4, min_stories: int = 3) -> np.ndarray:
    """For each text of one system, the share of its n-grams that occur in at least
    ``min_stories - 1`` *other* texts of the system (a phrase the system repeats across
    stories); NaN for a text without n-grams.

    >>> cross_story_shares(["a b c d e", "a b c d x", "a b c d y", "p q r s t"], n=4, min_stories=3).round(2).tolist()
    [0.5, 0.5, 0.5, 0.0]
    """
    grams = [ngrams(words(text), n) for text in texts]
    df: Counter[Gram] = Counter()
    for row in grams:
        df.update(set(row))
    values = np.full(len(texts), np.nan)
    for index, row in enumerate(grams):
        if row:
            values[index] = sum(1 for g in row if df[g] - 1 >= min_stories - 1) / len(row)
    return values


def coefficient_of_variation(lengths: Sequence[float]) -> float:
    """sd (n - 1) over mean of the lengths; NaN for fewer than two or a zero mean.

    >>> round(coefficient_of_variation([10, 20, 30]), 3)
    0.5
    """
    values = np.asarray(lengths, dtype=float)
    if values.size < 2 or values.mean() == 0:
        return math.nan
    return float(values.std(ddof=1) / values.mean())


_BLANK_LINE = re.compile(r"\n\s*\n")


def paragraphs(text: str) -> list[str]:
    """Paragraphs: blocks separated by blank lines, or by line breaks when there is none.

    >>> paragraphs("One.\\n\\nTwo. Three.\\n\\n\\nFour.")
    ['One.', 'Two. Three.', 'Four.']
    >>> paragraphs("One.\\nTwo.")
    ['One.', 'Two.']
    """
    blocks = _BLANK_LINE.split(text.strip())
    if len(blocks) == 1:
        blocks = text.strip().split("\n")
    return [b.strip() for b in blocks if b.strip()]


# --------------------------------------------------------------------------- the slop list


def read_word_list(path: str | Path | None = None) -> tuple[frozenset[str], str]:
    """The slop word list and its identity: the shipped list (:data:`SLOP_LIST_VERSION`) or a
    file in the same format (one word or phrase a line, ``#`` comments; ``storyeval diagnose
    --build-list`` writes one), identified by its name and content hash.

    >>> words_, identity = read_word_list()
    >>> "tapestry" in words_, identity
    (True, 'slop-v1')
    """
    if path is None:
        text = resources.files("storyeval.metrics").joinpath("data", "slop_words_v1.txt")
        content = text.read_text(encoding="utf-8")
        identity = SLOP_LIST_VERSION
    else:
        file = Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no such word list")
        content = file.read_text(encoding="utf-8")
        identity = f"{file.name}@{hashlib.sha256(content.encode()).hexdigest()[:12]}"
    entries = set()
    for line in content.splitlines():
        entry = " ".join(words(line.split("#", 1)[0]))
        if entry:
            entries.add(entry)
    if not entries:
        raise ValueError(f"{path or SLOP_LIST_VERSION}: the word list is empty")
    return frozenset(entries), identity


def slop_share(text: str, vocabulary: frozenset[str]) -> float:
    """The share of the text's words on the list (a phrase of the list covers its words; NaN
    for a text without words).

    >>> slop_share("A testament to the tapestry of our life.", read_word_list()[0])
    0.25
    >>> slop_share("the dog barked at a dark night", frozenset({"dark night", "dog"}))
    0.42857142857142855
    """
    tokens = words(text)
    if not tokens:
        return math.nan
    lengths = sorted({len(entry.split()) for entry in vocabulary}, reverse=True)
    covered = [False] * len(tokens)
    for k in lengths:
        for i in range(len(tokens) - k + 1):
            if " ".join(tokens[i : i + k]) in vocabulary:
                covered[i : i + k] = [True] * k
    return sum(covered) / len(tokens)


def build_slop_list(
    model_texts: Sequence[str],
    human_texts: Sequence[str],
    *,
    max_n: int = 3,
    min_count: int = 5,
    z_threshold: float = 3.09,
) -> pd.DataFrame:
    """Words and phrases (up to ``max_n`` words) over-represented in model text against
    human text: the log-odds ratio with an informative Dirichlet prior (Monroe, Colaresi and
    Quinn 2008; the prior is the two corpora's pooled counts), kept when its z-score is at
    least ``z_threshold`` (3.09: one-sided p < 0.001) and the model text uses it at least
    ``min_count`` times. Returns ``entry``, ``n``, ``model_count``, ``human_count``, ``z``,
    most over-represented first.

    >>> model = ["a rich tapestry of light"] * 60 + ["the dog ran home"] * 60
    >>> human = ["the dog ran home"] * 120
    >>> sorted(build_slop_list(model, human, max_n=1)["entry"])
    ['a', 'light', 'of', 'rich', 'tapestry']
    """
    import pandas as pd

    if not model_texts or not human_texts:
        raise ValueError("building a list needs model texts and human texts")
    rows = []
    for n in range(1, max_n + 1):
        model = Counter(g for t in model_texts for g in ngrams(words(t), n))
        human = Counter(g for t in human_texts for g in ngrams(words(t), n))
        total_m, total_h = sum(model.values()), sum(human.values())
        alpha0 = total_m + total_h
        for gram, y_m in model.items():
            if y_m < min_count:
                continue
            y_h = human.get(gram, 0)
            alpha = y_m + y_h
            delta = math.log((y_m + alpha) / (total_m + alpha0 - y_m - alpha)) - math.log(
                (y_h + alpha) / (total_h + alpha0 - y_h - alpha)
            )
            z = delta / math.sqrt(1 / (y_m + alpha) + 1 / (y_h + alpha))
            if z >= z_threshold:
                rows.append(
                    {
                        "entry": " ".join(gram),
                        "n": n,
                        "model_count": y_m,
                        "human_count": y_h,
                        "z": z,
                    }
                )
    columns = ["entry", "n", "model_count", "human_count", "z"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values(["z", "entry"], ascending=[False, True], ignore_index=True)


def slop_list_text(entries: pd.DataFrame, *, source: str) -> str:
    """The list as a file ``read_word_list`` reads, its settings and counts as comments."""
    lines = [
        f"# slop list built by storyeval diagnose --build-list from {source}",
        "# entry  # model count, human count, z (log-odds, Monroe et al. 2008)",
    ]
    lines += [
        f"{row.entry}  # {row.model_count}, {row.human_count}, {row.z:.2f}"
        for row in entries.itertuples(index=False)
    ]
    return "\n".join(lines) + "\n"
