"""The judge's prompts: one chat per story (or pair of stories) and criterion.

The rubric's instructions come first and the story last, so that every story judged on one
criterion shares the same prompt prefix (a local backend computes it once; servers with prefix
caching reuse it too). The judge answers with one of the criterion's answers (``1``..``5``,
``yes``/``no``, ``A``/``B``), which a backend with probabilities reads in one forward pass; with
``analyse_first`` it writes a short analysis and ends with ``Score: N`` (or ``Winner: A``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from storyeval.corpus import Story
from storyeval.judge.rubric import Criterion, Rubric

SYSTEM = (
    "You are an expert reader who evaluates short stories carefully and consistently. "
    "Judge only what you are asked about."
)
PAIR_LABELS = ("A", "B")


@dataclass(frozen=True)
class JudgeRequest:
    """One question to a judge.

    Attributes
    ----------
    messages : list of dict
        The chat (``role``, ``content``).
    labels : tuple of str
        The answers whose probabilities are read (in scale order), e.g. ``("1", ..., "5")``.
    prefix : str
        The leading part of the user message shared by every story of the criterion.
    generate : bool
        Ask for a written answer instead of reading probabilities.
    analysed : bool
        The prompt asks for an analysis before the answer (``Score: X`` on the last line).
    """

    messages: tuple[dict[str, str], ...]
    labels: tuple[str, ...]
    prefix: str
    generate: bool = False
    analysed: bool = False
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _scale_text(criterion: Criterion) -> str:
    return "\n".join(f"{p.answer}: {p.description}" for p in criterion.scale)


def _instruction(criterion: Criterion, analyse: bool, options: str) -> str:
    if analyse:
        return (
            "First write a short analysis (at most three sentences), then end with a last line "
            f"of the form 'Score: X' where X is one of {options}."
        )
    return f"Answer with exactly one of {options} and nothing else."


def _story_block(story: Story, rubric: Rubric, label: str = "Story") -> str:
    parts = []
    if rubric.show_prompt and story.prompt.strip():
        parts.append(f"Prompt: {story.prompt.strip()}")
    if rubric.show_reference and story.references:
        parts.append(f"Reference story: {story.references[0].strip()}")
    parts.append(f"{label}: {story.story.strip()}")
    return "\n\n".join(parts)


def absolute_request(story: Story, rubric: Rubric, criterion: Criterion) -> JudgeRequest:
    """The question of one criterion about one story.

    >>> from storyeval.judge.rubric import load_rubric
    >>> rubric = load_rubric("karpinska")
    >>> request = absolute_request(Story("s", "A door.", "It opened."), rubric, rubric.criteria[0])
    >>> request.labels, request.messages[1]["content"].startswith(request.prefix)
    (('1', '2', '3', '4', '5'), True)
    """
    options = ", ".join(criterion.labels)
    prefix = (
        f"Criterion: {criterion.name}\nQuestion: {criterion.question}\n"
        f"Scale:\n{_scale_text(criterion)}\n\n"
    )
    user = (
        prefix
        + _story_block(story, rubric)
        + "\n\n"
        + _instruction(criterion, rubric.analyse_first, options)
    )
    messages = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
    analysed = rubric.analyse_first
    return JudgeRequest(messages, tuple(criterion.labels), prefix, analysed, analysed)


def pairwise_request(
    first: Story, second: Story, rubric: Rubric, criterion: Criterion
) -> JudgeRequest:
    """Which of two stories for one prompt is better on a criterion (``A`` is ``first``)."""
    prefix = (
        f"Criterion: {criterion.name}\nQuestion: {criterion.question}\n"
        "Two stories were written for the same prompt. Which one is better on this criterion?\n\n"
    )
    shown = []
    if rubric.show_prompt and first.prompt.strip():
        shown.append(f"Prompt: {first.prompt.strip()}")
    shown.append(f"Story A: {first.story.strip()}")
    shown.append(f"Story B: {second.story.strip()}")
    if rubric.analyse_first:
        instruction = (
            "First write a short comparison (at most three sentences), then end with a last "
            "line of the form 'Winner: X' where X is A or B."
        )
    else:
        instruction = "Answer with exactly one letter, A or B, and nothing else."
    user = prefix + "\n\n".join(shown) + "\n\n" + instruction
    messages = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})
    analysed = rubric.analyse_first
    return JudgeRequest(messages, PAIR_LABELS, prefix, analysed, analysed)
