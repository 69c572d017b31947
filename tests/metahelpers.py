"""Realistic inputs for the meta-evaluation tests.

Scores are real metric values computed here on the example corpus (examples/stories.jsonl)
with cheap, independent implementations: distinct-2 (unique word bigrams / bigrams), length
in words, and sentence BLEU against the reference with sacrebleu (undefined, null, for the
human stories, which have no reference). Each record carries the story's ``system`` and
``prompt_id``, as ``storyeval score`` writes them. The judgments are examples/judgments.jsonl.
"""

from __future__ import annotations

import functools
import itertools
import math
from pathlib import Path

from storyeval.base.signature import Signature
from storyeval.corpus import Score, read_stories, write_scores
from storyeval.text import tokenize_words

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
STORIES = EXAMPLES / "stories.jsonl"
JUDGMENTS = EXAMPLES / "judgments.jsonl"
METRICS = ("distinct2", "length", "bleu")


@functools.lru_cache(maxsize=1)
def example_scores() -> tuple[Score, ...]:
    import sacrebleu

    records: list[Score] = []
    for story in read_stories(STORIES):
        words = tokenize_words(story.story, lowercase=True, punctuation=False)
        bigrams = list(itertools.pairwise(words))
        distinct = len(set(bigrams)) / len(bigrams) if bigrams else math.nan
        bleu = (
            sacrebleu.sentence_bleu(story.story, story.references).score
            if story.references
            else math.nan
        )
        extra = {"system": story.system, "prompt_id": story.extra["prompt_id"]}
        records.append(
            Score(
                story.id,
                "distinct2",
                distinct,
                Signature("distinct2", {"n": 2}).render(),
                dict(extra),
            )
        )
        records.append(
            Score(
                story.id,
                "length",
                float(len(words)),
                Signature("length", {"unit": "words"}).render(),
                dict(extra),
            )
        )
        records.append(
            Score(
                story.id,
                "bleu",
                bleu,
                Signature("bleu", {"tokenize": "13a", "smooth": "exp"}).render(),
                dict(extra),
            )
        )
    return tuple(records)


def write_example_scores(
    path: Path, *, with_groups: bool = True, metrics: tuple[str, ...] = METRICS
) -> Path:
    """Write the example scores (optionally without system/prompt_id) and return the path."""
    records = []
    for score in example_scores():
        if score.metric not in metrics:
            continue
        extra = dict(score.extra) if with_groups else {}
        records.append(Score(score.item_id, score.metric, score.value, score.signature, extra))
    write_scores(path, records)
    return path
