"""Clark (2021), chapter 2: the story and slogan writing studies from their exports.

One call gives what the thesis reports in sections 2.6.4 and 2.6.5:

* ``use_again``: Table 2.4, the answers of machine-in-the-loop writers to "Would you use this
  system again?" per task (story, slogan), in the thesis' order;
* ``self_ratings``: the writers' own seven-point answers per condition (solo vs machine in the
  loop): n, mean, sd, interval, and the independent two-sample t test the thesis reports
  (``student_p``; satisfaction 5.03 vs 4.59, p = .27 for stories), with Welch's and
  Mann-Whitney's;
* ``third_party``: the third-party ratings of the finished pieces per condition, with the same
  tests (creativity 4.87 vs 4.84, p = .88);
* ``self_vs_others``: Pearson's r between a writer's own answer about a piece and the mean
  third-party rating of it, per question and criterion (the thesis: r = .08, .07, .04 for
  creative, entertaining, liked; .31 and .41 for coherent, grammatical).

Story sessions are the ``kind: mil`` records of ``storyeval cyoa export`` (one story each,
with ``conditions: [solo, mil]`` in the session file); slogan sessions are those of a ``kind:
slogan`` file. Third-party ratings are judgment files whose ``item_id`` is a story's
:func:`story_id` (``storyeval cyoa stories``) or a slogan id (``storyeval slogan-study
stories``).

Examples
--------
>>> from storyeval.collab.records import parse_session
>>> story = {"format": "storyeval-writing-session", "session_id": "m/p1", "kind": "mil",
...     "session": "m", "participant": "p1", "status": "complete", "condition": "mil",
...     "generators": {"lm": {}}, "turns": [], "story": "Tom lost his hat.",
...     "survey": {"likert": [], "questions": [], "use_again": "I wouldn't use it."}}
>>> table = use_again_table([parse_session(story)], [])
>>> table.loc[table["answer"] == "I wouldn't use it.", ["story", "slogan"]].to_dict("records")
[{'story': 1, 'slogan': 0}]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from storyeval.collab.config import USE_AGAIN_CHOICES
from storyeval.collab.records import SessionRecord
from storyeval.collab.slogan_analysis import (
    answer_rows,
    compare_conditions,
    own_answers,
    self_vs_others,
)
from storyeval.corpus import Judgment, Story

TASKS = ("story", "slogan")


def story_id(record: SessionRecord) -> str:
    """The id of a finished story in the story file for third-party rating."""
    return record.session_id


def finished_stories(records: Sequence[SessionRecord]) -> list[Story]:
    """The complete sessions' stories as story records (``system`` = the condition for a MIL
    story, the session kind otherwise; ``prompt_id`` = the prompt's id), ready for a Likert
    study that collects third-party ratings (section 2.6.1)."""
    stories = []
    for record in records:
        if not record.complete:
            continue
        prompt = record.raw.get("prompt") or {}
        stories.append(
            Story(
                id=story_id(record),
                story=str(record.raw.get("story") or ""),
                prompt=str(prompt.get("text") or ""),
                system=record.condition or record.kind,
                extra={"prompt_id": str(prompt.get("id") or "")},
            )
        )
    return stories


def use_again_table(
    stories: Sequence[SessionRecord], slogans: Sequence[Mapping[str, Any]]
) -> pd.DataFrame:
    """Table 2.4: how many machine-in-the-loop writers gave each answer, per task (complete
    sessions). Answers outside the thesis' four (older exports) follow them as they were
    given."""
    story_answers = [r.use_again for r in stories if r.complete and r.use_again]
    slogan_answers = [
        str((r.get("final_survey") or {}).get("use_again"))
        for r in slogans
        if r.get("status") == "complete" and (r.get("final_survey") or {}).get("use_again")
    ]
    extra = sorted(set(story_answers + slogan_answers) - set(USE_AGAIN_CHOICES))
    rows = [
        {
            "answer": answer,
            "story": story_answers.count(answer),
            "slogan": slogan_answers.count(answer),
        }
        for answer in (*USE_AGAIN_CHOICES, *extra)
    ]
    return pd.DataFrame(rows, columns=["answer", "story", "slogan"])


def _story_answers(records: Sequence[SessionRecord]) -> pd.DataFrame:
    rows = [
        {
            "task": "story",
            "item_id": story_id(r),
            "question": a.name,
            "condition": r.condition,
            "value": float(a.value),
        }
        for r in records
        if r.complete and r.condition is not None
        for a in r.likert
    ]
    return pd.DataFrame(rows, columns=["task", "item_id", "question", "condition", "value"])


def _slogan_answers(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    complete = [r for r in records if r.get("status") == "complete"]
    answers = answer_rows(complete).assign(task="slogan")
    return answers[["task", "item_id", "question", "condition", "value"]]


def _per_task(frame: pd.DataFrame, key: str, confidence: float) -> pd.DataFrame:
    parts = [
        compare_conditions(part, key, confidence).assign(task=task)
        for task, part in frame.groupby("task", sort=False)
    ]
    if not parts:
        return pd.DataFrame(columns=["task", key])
    table = pd.concat(parts, ignore_index=True)
    return table[["task", *[c for c in table.columns if c != "task"]]]


def _ratings(
    ratings: Sequence[Judgment], condition_of: Mapping[str, tuple[str, str]]
) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "task": condition_of[j.item_id][0],
                "criterion": j.criterion,
                "condition": condition_of[j.item_id][1],
                "value": float(j.value),
            }
            for j in ratings
            if j.item_id in condition_of
        ],
        columns=["task", "criterion", "condition", "value"],
    )


@dataclass(frozen=True)
class MilStudy:
    """The tables of :func:`analyse_mil_study` (see the module docstring)."""

    use_again: pd.DataFrame
    self_ratings: pd.DataFrame
    third_party: pd.DataFrame
    self_vs_others: pd.DataFrame
    writers: pd.DataFrame


def analyse_mil_study(
    stories: Sequence[SessionRecord],
    slogans: Sequence[Mapping[str, Any]] = (),
    *,
    ratings: Sequence[Judgment] = (),
    confidence: float = 0.95,
    agreement_method: str = "pearson",
) -> MilStudy:
    """Table 2.4 and the numbers of sections 2.6.4-2.6.5 (see the module docstring) from the
    story sessions, the slogan sessions and the third-party ratings of both."""
    from storyeval.base.validation import check_confidence

    check_confidence(confidence)
    own = pd.concat([_story_answers(stories), _slogan_answers(slogans)], ignore_index=True)
    condition_of = {
        item: (task, condition)
        for task, item, condition in own[["task", "item_id", "condition"]].itertuples(index=False)
        if item
    }
    agreement = [
        self_vs_others(
            own_answers(own[own["task"] == task]),
            [j for j in ratings if condition_of.get(j.item_id, ("",))[0] == task],
            method=agreement_method,
            confidence=confidence,
        ).assign(task=task)
        for task in TASKS
    ]
    agreement_table = pd.concat(agreement, ignore_index=True)
    writers = pd.DataFrame(
        [
            {"task": task, "condition": condition, "pieces": len(set(part["item_id"]) - {""})}
            for (task, condition), part in own.groupby(["task", "condition"], sort=False)
        ],
        columns=["task", "condition", "pieces"],
    )
    return MilStudy(
        use_again=use_again_table(stories, slogans),
        self_ratings=_per_task(own, "question", confidence),
        third_party=_per_task(_ratings(ratings, condition_of), "criterion", confidence),
        self_vs_others=agreement_table[
            ["task", *[c for c in agreement_table.columns if c != "task"]]
        ],
        writers=writers,
    )


def mil_study_report(result: MilStudy) -> str:
    """The tables as Markdown, headed by the thesis' table and section numbers."""
    from storyeval.base.markdown import Document

    doc = Document()
    doc.heading(1, "Writing with a machine in the loop (Clark 2021, chapter 2)")
    doc.frame(result.writers)
    doc.heading(2, 'Table 2.4: "Would you use this system again?"')
    doc.frame(result.use_again)
    doc.heading(2, "Writers' own ratings, solo vs machine in the loop")
    doc.paragraph("student_p: the independent two-sample t test the thesis reports.")
    doc.frame(result.self_ratings, digits=3)
    doc.heading(2, "Third-party ratings, solo vs machine in the loop")
    if result.third_party.empty:
        doc.paragraph(
            "No third-party ratings given: export the pieces (`storyeval cyoa stories`, "
            "`storyeval slogan-study stories`), rate them in a Likert study and pass the "
            "judgments with `--ratings`."
        )
    else:
        doc.frame(result.third_party, digits=3)
        doc.heading(2, "Writers' own ratings against the third-party mean")
        doc.frame(result.self_vs_others, digits=3)
    return doc.render()


def write_mil_study(result: MilStudy, output: str | Path) -> list[Path]:
    """Write use_again.csv, self_ratings.csv, third_party.csv, self_vs_others.csv,
    writers.csv and report.md into ``output``."""
    from storyeval.base.io import claim_output_directory, write_table, write_text_atomic

    folder = claim_output_directory(output, "machine-in-the-loop study analysis")
    written = [
        write_table(folder / "use_again.csv", result.use_again),
        write_table(folder / "self_ratings.csv", result.self_ratings),
        write_table(folder / "third_party.csv", result.third_party),
        write_table(folder / "self_vs_others.csv", result.self_vs_others),
        write_table(folder / "writers.csv", result.writers),
    ]
    write_text_atomic(folder / "report.md", mil_study_report(result))
    return [*written, folder / "report.md"]
