"""HANNA's LLM data: the stories LLMs wrote and the LLM raters' scores (format ``hanna-llm``).

HANNA's follow-up (Chhun et al. 2024) released LLM-written stories for HANNA's prompts
(``hanna_llm_stories.csv``) and LLM ratings of stories on HANNA's six criteria
(``hanna_metric_scores_llm.csv``). Both are CSV files with one row per story (and rater);
columns are matched by name, case and spacing ignored:

* the story: ``Story ID`` (required); ``Prompt``, ``Story``, ``Model`` (the system that wrote
  it) and ``Human`` (the human story for the prompt, the reference) when present: with a
  ``Story`` column the stories are imported with their texts;
* the rater, when the file holds ratings: the LLM in ``LLM`` (or ``Rater``, ``Evaluator``,
  ``Annotator``) and the evaluation prompt that asked it in ``Eval prompt`` (or
  ``Prompt ID``, ``Eval prompt ID``, ``Prompting``, ``Template``); the rater is
  ``LLM|eval prompt`` (``LLM`` alone without that column): a judge is a model *and* a prompt;
* the ratings: the criteria columns present among ``Relevance``, ``Coherence``, ``Empathy``,
  ``Surprise``, ``Engagement``, ``Complexity`` (an empty cell is a missing rating, counted in a
  note, never imputed); several rows of one story and rater are repeats: the second is rater
  ``LLM|eval prompt#2`` and so on (``judge`` keeps the rater, ``repeat`` counts from 0).

Judgments carry ``rater_kind: llm``, so LLM raters can be kept apart from people
(``storyeval judge-eval`` compares the two; ``agreement`` over the LLM raters is the judges'
self-agreement).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from storyeval.corpus import Judgment, Story, iter_raw_records
from storyeval.errors import DataFileError, DataProblem
from storyeval.importers_more import HANNA_CRITERIA, Records, _rating

_RATER_COLUMNS = ("llm", "rater", "evaluator", "annotator")
_EVAL_PROMPT_COLUMNS = ("eval prompt", "prompt id", "eval prompt id", "prompting", "template")


def _key(name: str) -> str:
    return " ".join(name.replace("_", " ").split()).lower()


def _columns(header: list[str]) -> dict[str, str]:
    """Our names of the file's columns (``story_id``, ``rater``, a criterion...) -> theirs."""
    by_key = {_key(column): column for column in header}
    found: dict[str, str] = {}
    for ours, candidates in (
        ("story_id", ("story id",)),
        ("prompt", ("prompt",)),
        ("story", ("story",)),
        ("model", ("model",)),
        ("human", ("human",)),
        ("rater", _RATER_COLUMNS),
        ("eval_prompt", _EVAL_PROMPT_COLUMNS),
    ):
        for candidate in candidates:
            if candidate in by_key:
                found[ours] = by_key[candidate]
                break
    for criterion in HANNA_CRITERIA:
        if _key(criterion) in by_key:
            found[criterion] = by_key[_key(criterion)]
    return found


def _checked_columns(file_path: Path, header: list[str]) -> tuple[dict[str, str], list[str]]:
    """The columns (see :func:`_columns`) and the criteria rated; a header without what the
    format needs is a :class:`DataFileError` on line 1."""
    columns = _columns(header)
    criteria = [c for c in HANNA_CRITERIA if c in columns]
    if "story_id" not in columns:
        raise DataFileError.single(file_path, 1, "no 'Story ID' column")
    if "story" not in columns and not criteria:
        raise DataFileError.single(
            file_path, 1, f"neither a Story column nor a rating ({', '.join(HANNA_CRITERIA)})"
        )
    if criteria and "rater" not in columns:
        raise DataFileError.single(
            file_path, 1, "ratings without a rater column (LLM, Rater, Evaluator or Annotator)"
        )
    return columns, criteria


def _cell(record: dict[str, Any], columns: dict[str, str], name: str) -> str:
    column = columns.get(name)
    return str(record.get(column) or "").strip() if column else ""


def import_hanna_llm(path: str | Path, result: Records) -> Records:
    """Import HANNA's LLM stories or LLM ratings (see the module docstring).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a file without ``Story ID``, ratings without a rater
        column, an empty story id or rater, a rating that is not a number, or a story whose
        text differs between rows.
    """
    from storyeval.meta.data import prompt_key

    file_path = Path(path)
    records = list(iter_raw_records(file_path, fmt="csv"))
    problems = [record for _, record in records if isinstance(record, DataProblem)]
    rows = [(n, r) for n, r in records if not isinstance(r, DataProblem)]
    if problems:
        raise DataFileError(problems)
    if not rows:
        raise DataFileError.single(file_path, 1, "the file holds no rows")
    columns, criteria = _checked_columns(file_path, list(rows[0][1]))
    stories: dict[str, tuple[int, Story]] = {}
    repeats: dict[tuple[str, str], int] = {}
    missing = 0
    for number, record in rows:
        story_id = _cell(record, columns, "story_id")
        if not story_id:
            problems.append(DataProblem(str(file_path), number, "the Story ID is empty"))
            continue
        if "story" in columns:
            problem = _add_story(record, columns, story_id, number, stories, prompt_key)
            if problem:
                problems.append(DataProblem(str(file_path), number, problem))
                continue
        if not criteria:
            continue
        rater = _rater(record, columns)
        if not rater:
            problems.append(DataProblem(str(file_path), number, "the rater (LLM) is empty"))
            continue
        repeat = repeats.get((story_id, rater), 0)
        repeats[(story_id, rater)] = repeat + 1
        extra = _judgment_extra(record, columns, stories.get(story_id), repeat)
        extra["judge"] = rater
        if repeat:  # a judgment is one per rater, item and criterion: a repeat is a rater
            rater = f"{rater}#{repeat + 1}"
        for criterion in criteria:
            cell = _cell(record, columns, criterion)
            missing += not cell
            value = _rating_or_none(cell)
            if cell and value is None:
                reason = f"{criterion}: not a rating: {cell!r}"
                problems.append(DataProblem(str(file_path), number, reason))
            elif value is not None:
                result.judgments.append(
                    Judgment(story_id, rater, criterion, value, extra=dict(extra))
                )
    if problems:
        raise DataFileError(problems)
    result.stories = [story for _, story in stories.values()]
    _notes(result, criteria, missing)
    return result


def _rating_or_none(cell: str) -> float | None:
    try:
        return _rating(cell) if cell else None
    except ValueError:
        return None


def _rater(record: dict[str, Any], columns: dict[str, str]) -> str:
    llm = _cell(record, columns, "rater")
    eval_prompt = _cell(record, columns, "eval_prompt")
    return f"{llm}|{eval_prompt}" if llm and eval_prompt else llm


def _add_story(
    record: dict[str, Any],
    columns: dict[str, str],
    story_id: str,
    number: int,
    stories: dict[str, tuple[int, Story]],
    prompt_key: Any,
) -> str | None:
    """Record the row's story; a reason when it is empty or differs from an earlier row."""
    text = _cell(record, columns, "story")
    if not text:
        return "the Story is empty"
    prompt = _cell(record, columns, "prompt")
    human = _cell(record, columns, "human")
    story = Story(
        story_id,
        prompt,
        text,
        reference=human or None,
        system=_cell(record, columns, "model") or None,
        extra={"prompt_id": prompt_key(prompt) or story_id},
    )
    first = stories.setdefault(story_id, (number, story))
    if first[1].story != story.story or first[1].system != story.system:
        return f"story {story_id!r} differs from line {first[0]}"
    return None


def _judgment_extra(
    record: dict[str, Any], columns: dict[str, str], story: tuple[int, Story] | None, repeat: int
) -> dict[str, Any]:
    extra: dict[str, Any] = {"rater_kind": "llm", "repeat": repeat}
    system = story[1].system if story else _cell(record, columns, "model")
    if system:
        extra["system"] = system
    if story is not None:
        extra["prompt_id"] = story[1].extra["prompt_id"]
    return extra


def _notes(result: Records, criteria: list[str], missing: int) -> None:
    if result.judgments:
        raters = sorted({j.extra["judge"] for j in result.judgments})
        shown = ", ".join(raters[:6]) + (" ..." if len(raters) > 6 else "")
        result.notes.append(
            f"{len(raters)} LLM rater(s) (LLM|eval prompt): {shown}; criteria: {', '.join(criteria)}"
        )
    if missing:
        result.notes.append(f"{missing} empty rating cell(s) left out (not imputed)")
