"""Cutting human texts as each paper cut its generated ones, so that length does not decide.

A comparison of human and generated stories is only fair when both are cut alike. The papers
storyeval follows cut in three ways, each a *policy* here:

* ``at_most`` (Karpinska et al. 2021: "ends with a full sentence and is no longer than 150
  words"): the longest run of whole leading sentences within the cap;
* ``nearest`` (Guan and Huang 2020, UNION, WritingPrompts: "about 200 words (with correct
  sentence boundary) from the start"): the sentence end nearest the cap, before or after
  (the shorter on a tie);
* ``at_least`` (Clark 2021, chapter 6: "we only considered texts 100 words or longer, and
  after reaching 100 words, all texts were truncated at the end of the next sentence"): texts
  shorter than the cap are left out, the rest cut at the end of the sentence that reaches it.
* ``last_at_least`` (Clark 2021, section 3.7: "we only used the final 60 words of the story
  segments ... We included the whole sentence that contained the 60th word"): the *end* of a
  text, from the start of the sentence that holds its last Nth word; a context for
  generators and raters to continue, shorter texts kept whole.

Words are whitespace-separated words (the unit the papers count), counted on the text as it
is read; a tokenized text (``did n't``, ``home .``, as WritingPrompts and ROCStories ship) is
detokenized first with ``detokenize=True`` (Karpinska et al. de-tokenized the human stories
before cutting). Nothing is cut silently: each outcome is counted (:class:`CutOutcome`) and the
command writes each text's words before and after.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice
from storyeval.corpus import Story
from storyeval.text import SplitMethod, count_words, detokenized, split_sentences

Policy = Literal["at_most", "nearest", "at_least", "last_at_least"]
POLICIES: tuple[str, ...] = ("at_most", "nearest", "at_least", "last_at_least")
#: Each paper's cut: (policy, words, detokenize first)
PRESETS: dict[str, tuple[Policy, int, bool]] = {
    "karpinska2021": ("at_most", 150, True),
    "union-wp": ("nearest", 200, True),
    "clark2021-detection": ("at_least", 100, False),
    "clark2021-context": ("last_at_least", 60, False),
}


@dataclass(frozen=True)
class CutOutcome:
    """A cut text (``None`` when the policy leaves it out), its words before and after, and
    what happened: ``kept`` (already within the policy), ``cut``, ``cut_inside`` (no sentence
    end fits: cut inside the first sentence), ``too_short`` (left out)."""

    text: str | None
    words_before: int
    words_after: int
    status: str


def cut_text(
    text: str,
    *,
    words: int,
    policy: Policy = "at_most",
    detokenize: bool = False,
    method: SplitMethod = "pysbd",
) -> CutOutcome:
    """Cut ``text`` by ``policy`` at ``words`` words (module docstring).

    >>> cut_text("One two three. Four five six. Seven eight.", words=4, policy="nearest").text
    'One two three.'
    >>> cut_text("One two three. Four five six. Seven eight.", words=4, policy="at_least").text
    'One two three. Four five six.'
    >>> cut_text("One two.", words=4, policy="at_least").status
    'too_short'
    >>> cut_text("One two three. Four five six. Seven eight.", words=4, policy="last_at_least").text
    'Four five six. Seven eight.'
    """
    check_choice(policy, POLICIES, "policy")
    if not isinstance(words, int) or isinstance(words, bool) or words < 1:
        raise ValueError(f"words must be a positive integer; got {words!r}")
    # split the text as it is (tokenized text is split at its end tokens), then join the
    # tokens of each sentence: the sentence ends stay where the text marks them
    sentences = split_sentences(text.strip(), method=method)
    if detokenize:
        sentences = [detokenized(sentence) for sentence in sentences]
    source = " ".join(sentences)
    before = count_words(source)
    if policy == "at_least" and before < words:
        return CutOutcome(None, before, 0, "too_short")
    if policy == "last_at_least":
        return _last_sentences(sentences, words, before)
    ends, total = [], 0
    for sentence in sentences:
        total += count_words(sentence)
        ends.append(total)
    index = _end_index(ends, words, policy)
    if index is None:  # not even the first sentence fits under the cap
        kept = " ".join(source.split()[:words])
        return CutOutcome(kept, before, count_words(kept), "cut_inside")
    kept = " ".join(sentences[: index + 1])
    return CutOutcome(kept, before, ends[index], "kept" if index == len(ends) - 1 else "cut")


def _last_sentences(sentences: list[str], words: int, before: int) -> CutOutcome:
    """The trailing sentences from the one holding the last ``words``-th word."""
    total = 0
    for start in range(len(sentences) - 1, -1, -1):
        total += count_words(sentences[start])
        if total >= words:
            kept = " ".join(sentences[start:])
            return CutOutcome(kept, before, total, "cut" if start else "kept")
    return CutOutcome(" ".join(sentences), before, before, "kept")


def _end_index(ends: list[int], words: int, policy: Policy) -> int | None:
    """The index of the last sentence kept, from the running word counts ``ends``."""
    if not ends:
        return None
    within = [i for i, end in enumerate(ends) if end <= words]
    if policy == "at_most":
        return within[-1] if within else None
    reaching = next((i for i, end in enumerate(ends) if end >= words), len(ends) - 1)
    if policy == "at_least":
        return reaching
    candidates = {reaching, *(within[-1:])}
    return min(candidates, key=lambda i: (abs(ends[i] - words), ends[i]))


def truncation_signature(policy: Policy, words: int, detokenize: bool, method: str) -> Signature:
    """The signature of a cut, recorded with every text it cut."""
    return Signature(
        "truncate", {"policy": policy, "words": words, "detokenize": detokenize, "split": method}
    )


def cut_stories(
    stories: Sequence[Story],
    *,
    words: int,
    policy: Policy = "at_most",
    detokenize: bool = False,
    method: SplitMethod = "pysbd",
    field: str = "story",
) -> tuple[list[Story], Counter[str]]:
    """Each story with its ``field`` (story, reference or prompt) cut by :func:`cut_text`, its
    words before and after and the cut's signature in ``extra``; stories the policy leaves out
    are dropped. Returns the stories kept and the count of each outcome.

    >>> kept, counts = cut_stories([Story("a", "", "One two. Three four five.")], words=2)
    >>> kept[0].story, kept[0].extra["words_after_cut"], dict(counts)
    ('One two.', 2, {'cut': 1})
    """
    from storyeval.base.validation import check_choice

    check_choice(field, ("story", "reference", "prompt"), "field")
    signature = truncation_signature(policy, words, detokenize, method).render()
    counts: Counter[str] = Counter()
    kept = []
    for story in stories:
        text = {"story": story.story, "reference": story.reference, "prompt": story.prompt}[field]
        if not isinstance(text, str):
            raise ValueError(f"story {story.id!r}: no single {field} text to cut")
        found = cut_text(text, words=words, policy=policy, detokenize=detokenize, method=method)
        counts[found.status] += 1
        if found.text is None:
            continue
        extra = story.extra | {
            "words_before_cut": found.words_before,
            "words_after_cut": found.words_after,
            "truncation": signature,
        }
        kept.append(replace(story, **{field: found.text}, extra=extra))
    return kept, counts


def outcome_summary(counts: Counter[str]) -> str:
    """``N stories: K kept, C cut, ...`` for a command's output."""
    shown = ", ".join(
        f"{counts[s]} {s.replace('_', ' ')}"
        for s in ("kept", "cut", "cut_inside", "too_short")
        if counts[s]
    )
    return f"{sum(counts.values())} stories: {shown}"
