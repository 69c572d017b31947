"""The judge's prompts: one chat per story (or pair of stories) and criterion.

Every prompt is laid out as: the rubric (all its criteria and scales), then the story, then
the question about one criterion. So every prompt of a run shares the rubric part, and every
criterion of a story shares the rubric and the story: a local backend computes the rubric once
per run and the story once per story, and only the short question per criterion (servers with
prefix caching reuse the same parts). The judge answers with one of the criterion's answers
(``1``..``5``, ``yes``/``no``, ``A``/``B``), which a backend with probabilities reads in one
forward pass; with ``analyse_first`` it writes a short analysis and ends with ``Score: N`` (or
``Winner: A``).
"""

from __future__ import annotations

from collections.abc import Sequence
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
        The leading part of the user message shared by every prompt of the rubric.
    subject : str
        The story (or pair) the question is about: prompts with one subject share the
        rubric and the subject, and differ only in the question.
    generate : bool
        Ask for a written answer instead of reading probabilities.
    analysed : bool
        The prompt asks for an analysis before the answer (``Score: X`` on the last line).
    stories : tuple of Story
        The story (or the two stories, ``A`` first) asked about, for backends that read
        stories rather than prompts (a trained reward model); not part of the question's
        identity.
    """

    messages: tuple[dict[str, str], ...]
    labels: tuple[str, ...]
    prefix: str
    subject: str = ""
    generate: bool = False
    analysed: bool = False
    stories: tuple[Story, ...] = field(default=(), compare=False, repr=False)
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


def _scale_text(criterion: Criterion) -> str:
    return "\n".join(f"{p.answer}: {p.description}" for p in criterion.scale)


def _instruction(analyse: bool, options: str) -> str:
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


def rubric_text(rubric: Rubric) -> str:
    """The rubric as the judge reads it: every criterion, its question and its scale."""
    parts = [f"You will rate a story on the criteria of the rubric {rubric.name!r}."]
    for criterion in rubric.criteria:
        flaw = " (a flaw: a higher score means more of it)" if criterion.negative else ""
        parts.append(
            f"Criterion: {criterion.name}{flaw}\nQuestion: {criterion.question}\n"
            f"Scale:\n{_scale_text(criterion)}"
        )
    return "\n\n".join(parts) + "\n\n"


def _chat(prefix: str, subject: str, question: str) -> tuple[dict[str, str], ...]:
    """The chat of one question: the system prompt, then the shared prefix, the subject and
    the question in one user message."""
    user = prefix + subject + "\n\n" + question
    return ({"role": "system", "content": SYSTEM}, {"role": "user", "content": user})


def _request(
    rubric: Rubric,
    subject: str,
    question: str,
    labels: tuple[str, ...],
    stories: tuple[Story, ...],
) -> JudgeRequest:
    prefix = rubric_text(rubric)
    messages = _chat(prefix, subject, question)
    analysed = rubric.analyse_first
    return JudgeRequest(messages, labels, prefix, subject, analysed, analysed, stories)


def absolute_request(story: Story, rubric: Rubric, criterion: Criterion) -> JudgeRequest:
    """The question of one criterion about one story.

    >>> from storyeval.judge.rubric import load_rubric
    >>> rubric = load_rubric("karpinska")
    >>> request = absolute_request(Story("s", "A door.", "It opened."), rubric, rubric.criteria[0])
    >>> request.labels, request.messages[1]["content"].startswith(request.prefix + request.subject)
    (('1', '2', '3', '4', '5'), True)
    """
    options = ", ".join(criterion.labels)
    question = f"Rate the story on {criterion.name} only: {criterion.question} " + _instruction(
        rubric.analyse_first, options
    )
    block = _story_block(story, rubric)
    return _request(rubric, block, question, tuple(criterion.labels), (story,))


def pairwise_request(
    first: Story, second: Story, rubric: Rubric, criterion: Criterion
) -> JudgeRequest:
    """Which of two stories for one prompt is better on a criterion (``A`` is ``first``)."""
    shown = ["Two stories were written for the same prompt."]
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
    if criterion.negative:
        question = (
            f"Which story shows less of the flaw {criterion.name} ({criterion.question})? "
            + instruction
        )
    else:
        question = (
            f"Which story is better on {criterion.name} only ({criterion.question})? " + instruction
        )
    return _request(rubric, "\n\n".join(shown), question, PAIR_LABELS, (first, second))


def spans_request(story: Story, rubric: Rubric, units: Sequence[str], index: int) -> JudgeRequest:
    """Which label of a spans rubric sentence ``index`` (1-based) of ``story`` has: the
    taxonomy, then the story as numbered sentences (shared by every sentence of the story),
    then the question; the answers are ``0`` (no problem) and the labels' numbers.

    >>> from storyeval.judge.rubric import load_rubric
    >>> request = spans_request(Story("s", "", "It rained. It rained."), load_rubric("spans"), ["It rained.", "It rained."], 2)
    >>> request.labels
    ('0', '1', '2', '3', '4', '5')
    """
    labels = tuple(str(i) for i in range(len(rubric.criteria) + 1))
    lines = [
        "You will mark the problems of a story sentence by sentence. The labels:",
        "0: none (the sentence has no problem)",
        *(f"{i}: {c.name} ({c.question})" for i, c in enumerate(rubric.criteria, start=1)),
    ]
    prefix = "\n".join(lines) + "\n\n"
    shown = []
    if rubric.show_prompt and story.prompt.strip():
        shown.append(f"Prompt: {story.prompt.strip()}")
    numbered = "\n".join(f"{i}. {text}" for i, text in enumerate(units, start=1))
    shown.append(f"Story, one numbered sentence per line:\n{numbered}")
    subject = "\n\n".join(shown)
    instruction = _instruction(rubric.analyse_first, ", ".join(labels))
    question = (
        f'Which problem does sentence {index} have ("{units[index - 1]}")? Give the number '
        f"of its label, 0 if it has none. {instruction}"
    )
    analysed = rubric.analyse_first
    messages = _chat(prefix, subject, question)
    return JudgeRequest(messages, labels, prefix, subject, analysed, analysed, (story,))


YES_NO = ("yes", "no")


def contradiction_request(story: Story, first: str, second: str) -> JudgeRequest:
    """Whether a later passage of a story contradicts an earlier one (``yes``/``no``), the
    story shown for context (shared by every pair of the story).

    >>> request = contradiction_request(Story("s", "", "Ann was tall. Ann was short."), "Ann was tall.", "Ann was short.")
    >>> request.labels, request.subject.startswith("Story:")
    (('yes', 'no'), True)
    """
    prefix = (
        "You will check a story for contradictions: a later passage that cannot be true if an "
        "earlier one is (a character's name, attribute, state or motive, the timeline, or a "
        "rule of the story's world), unless the story explains the change.\n\n"
    )
    subject = f"Story: {story.story.strip()}"
    question = (
        f'Earlier passage: "{first}"\nLater passage: "{second}"\nDoes the later passage '
        "contradict the earlier one? " + _instruction(False, ", ".join(YES_NO))
    )
    return JudgeRequest(_chat(prefix, subject, question), YES_NO, prefix, subject, stories=(story,))


def equivalence_request(first: str, second: str, prompt: str = "") -> JudgeRequest:
    """Whether two stories written for the same prompt are essentially the same story (the
    equivalence question of NoveltyBench, Zhang et al. 2025), ``yes``/``no``.

    >>> equivalence_request("A cat slept.", "The cat napped.").labels
    ('yes', 'no')
    """
    prefix = (
        "Two stories were written for the same prompt. Decide whether they are essentially the "
        "same story: the same main events, characters and outcome, even if worded differently. "
        "Different events, a different turn or a different ending make them different.\n\n"
    )
    shown = [f"Prompt: {prompt.strip()}"] if prompt.strip() else []
    shown += [f"Story A: {first.strip()}", f"Story B: {second.strip()}"]
    subject = "\n\n".join(shown)
    question = "Are A and B essentially the same story? " + _instruction(False, ", ".join(YES_NO))
    return JudgeRequest(_chat(prefix, subject, question), YES_NO, prefix, subject)
