"""What ``storyeval view`` shows: storyeval's files joined by item id and prompt.

Any mix of story files, score files, judgment files (people's, and LLM judges' with their
rationales and answer probabilities), comparison files (pairwise studies and judges), stored
rankings (``storyeval rank`` outputs) and writing-session exports (CYOA, machine-in-the-loop and slogan sessions of the study server) is
read, each kind told by its fields; a directory stands for the ``.jsonl`` and ``.csv`` files
in it. Records that name an item no story file has are counted per file, not dropped
silently.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from storyeval.base.errors import StoryevalError
from storyeval.corpus import Judgment, Score, Story

#: A judgment whose rater id starts so is an LLM judge's (storyeval judge writes signatures).
JUDGE_PREFIX = "judge|"
#: The formats of the study server's writing-session exports.
SESSION_FORMATS = ("storyeval-writing-session", "storyeval-slogan-session")


class MemoryStories(dict[str, Story]):
    """The stories by id, in memory, with the queries the views ask of a story store (the
    same as :class:`storyeval.view.index.IndexedStories` answers from an SQLite index)."""

    def systems(self) -> list[str]:
        """Every system, sorted (``""`` for stories without one)."""
        return sorted({s.system or "" for s in self.values()})

    def by_prompt(self, prompt_id: str) -> list[Story]:
        """The stories continuing a prompt (by prompt id)."""
        return [s for s in self.values() if prompt_id_of(s) == prompt_id]

    def matching(self, text: str) -> set[str]:
        """The ids of the stories whose text or prompt contains ``text`` (any case)."""
        needle = text.lower()
        return {
            s.id for s in self.values() if needle in s.story.lower() or needle in s.prompt.lower()
        }

    def derived(self) -> list[Story]:
        """The stories made from another story (a ``source_id``: perturbations)."""
        return [s for s in self.values() if s.extra.get("source_id")]


def prompt_id_of(story: Story) -> str:
    """The prompt id of a story (its ``prompt_id``, else its id)."""
    return str(story.extra.get("prompt_id") or story.id)


@dataclass
class ViewData:
    """The joined files.

    Attributes
    ----------
    stories : dict of str to Story
    scores : DataFrame
        ``item_id``, ``metric``, ``value``.
    people, judges : DataFrame
        ``item_id``, ``rater_id``, ``criterion``, ``value`` (judges also ``raw``,
        ``probabilities``).
    comparisons : DataFrame
    unjoined : list of (file, records, reason)
    files : list of (file, kind, records)
    sessions : list of dict
        Writing sessions as exported (``storyeval-writing-session`` and
        ``storyeval-slogan-session`` records), in file order.
    """

    stories: MemoryStories | Any
    scores: pd.DataFrame
    people: pd.DataFrame
    judges: pd.DataFrame
    comparisons: pd.DataFrame
    unjoined: list[tuple[str, int, str]] = field(default_factory=list)
    files: list[tuple[str, str, int]] = field(default_factory=list)
    sessions: list[dict[str, Any]] = field(default_factory=list)
    stored_table: pd.DataFrame | None = None
    rankings: pd.DataFrame = field(default_factory=pd.DataFrame)

    def prompt_of(self, story: Story) -> str:
        """The prompt id of a story (its ``prompt_id``, else its id)."""
        return prompt_id_of(story)

    def table(self) -> pd.DataFrame:
        """One row per story: ``item_id``, ``system``, ``prompt_id``, ``words``, then each
        metric's value, people's mean per criterion (``people:<criterion>``) and each
        judged criterion's mean (``judge:<criterion>``); computed once."""
        if self.stored_table is None:
            self.stored_table = self._table()
        return self.stored_table

    def _table(self) -> pd.DataFrame:
        rows = pd.DataFrame(
            [
                {
                    "item_id": s.id,
                    "system": s.system or "",
                    "prompt_id": self.prompt_of(s),
                    "words": len(s.story.split()),
                }
                for s in self.stories.values()
            ],
            columns=["item_id", "system", "prompt_id", "words"],
        )
        if rows.empty:
            return rows
        for frame, prefix, column in (
            (self.scores, "", "metric"),
            (self.people, "people:", "criterion"),
            (self.judges, "judge:", "criterion"),
        ):
            if frame.empty:
                continue
            wide = frame.pivot_table(
                index="item_id", columns=column, values="value", aggfunc="mean"
            )
            wide.columns = [f"{prefix}{c}" for c in wide.columns]
            rows = rows.join(wide, on="item_id")
        return rows


def input_paths(inputs: Sequence[str | Path]) -> list[Path]:
    """The files the inputs name (a directory stands for its .jsonl and .csv files)."""
    found: list[Path] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found += sorted(p for p in path.iterdir() if p.suffix in (".jsonl", ".csv"))
        elif path.is_file():
            found.append(path)
        else:
            raise StoryevalError(f"{path}: no such file or directory")
    if not found:
        raise StoryevalError("no .jsonl or .csv file to show")
    return found


def _kind(path: Path) -> str:
    """stories, judgments, scores or comparisons, from the first record's fields."""
    from storyeval.corpus import detect_kind, iter_raw_records

    for _, record in iter_raw_records(path):
        if isinstance(record, dict) and {"system_a", "system_b"} <= set(record):
            return "comparisons"
        if isinstance(record, dict) and record.get("format") in SESSION_FORMATS:
            return "sessions"
        if isinstance(record, dict) and {"system", "method", "estimate"} <= set(record):
            return "rankings"
        break
    return str(detect_kind(path))


def load_view_data(inputs: Sequence[str | Path]) -> ViewData:
    """Read and join the files (see the module docstring).

    Raises
    ------
    StoryevalError
        A path that does not exist, a file of no known kind (with its line), or no story.
    """
    from storyeval.corpus import read_judgments, read_stories

    stories = MemoryStories()
    scores: list[tuple[str, Score]] = []
    judgments: list[tuple[str, Judgment]] = []
    comparisons: list[dict[str, Any]] = []
    sessions: list[dict[str, Any]] = []
    rankings: list[dict[str, Any]] = []
    files: list[tuple[str, str, int]] = []
    for path in input_paths(inputs):
        kind = _kind(path)
        records: list[Any]
        if kind == "sessions":
            records = _sessions(path)
            sessions += records
        elif kind == "rankings":
            records = _rankings(path)
            rankings += records
        elif kind == "stories":
            records = read_stories(path)
            stories.update((s.id, s) for s in records)
        elif kind == "scores":
            records = _scores(path)
            scores += [(str(path), s) for s in records]
        elif kind == "judgments":
            records = read_judgments(path)
            judgments += [(str(path), j) for j in records]
        else:
            records = _comparisons(path)
            comparisons += records
        files.append((str(path), kind, len(records)))
    if not stories and not sessions:
        raise StoryevalError(
            "no story or writing-session file among the inputs: give the stories the files "
            "are about"
        )
    data = _joined(stories, scores, judgments, comparisons, files)
    data.sessions = sessions
    data.rankings = pd.DataFrame(rankings)
    for column in ("estimate", "ci_low", "ci_high"):
        if column in data.rankings:
            data.rankings[column] = pd.to_numeric(data.rankings[column], errors="coerce")
    return data


#: The table's own columns and column prefixes, which no metric may be named as
RESERVED_COLUMNS = ("item_id", "system", "prompt_id", "words")
RESERVED_PREFIXES = ("people:", "judge:")


def _scores(path: Path) -> list[Score]:
    """A score file's records, none of whose metrics is named as one of the table's own
    columns (``words``, ``item_id``, ... would overlap them)."""
    from storyeval.base.errors import DataFileError, DataProblem
    from storyeval.corpus import iter_raw_records, read_scores

    records = read_scores(path)
    if not any(_reserved(s.metric) for s in records):
        return records
    problems = [
        DataProblem(
            str(path), number, f"metric {record['metric']!r} is named as a column of the view's "
            f"table ({', '.join(RESERVED_COLUMNS)}, or people:/judge:...): rename it",
        )
        for number, record in iter_raw_records(path)
        if isinstance(record, dict) and _reserved(str(record.get("metric", "")))
    ]  # fmt: skip
    raise DataFileError(problems)


def _reserved(metric: str) -> bool:
    return metric in RESERVED_COLUMNS or metric.startswith(RESERVED_PREFIXES)


def _rankings(path: Path) -> list[dict[str, Any]]:
    """The rows of a stored ranking (``storyeval rank`` output: system, method, estimate and
    its interval), each checked for those fields."""
    from storyeval.base.errors import DataFileError, DataProblem
    from storyeval.corpus import iter_raw_records

    rows = []
    for number, record in iter_raw_records(path):
        if isinstance(record, DataProblem):
            raise DataFileError([record])
        if not {"system", "method", "estimate"} <= set(record):
            raise DataFileError.single(path, number, "a ranking row needs system, method, estimate")
        rows.append(
            {
                k: record.get(k)
                for k in ("system", "method", "estimate", "ci_low", "ci_high", "comparisons")
            }
        )
    return rows


def _sessions(path: Path) -> list[dict[str, Any]]:
    """The session records of an export (each checked for the fields the replay reads)."""
    from storyeval.base.errors import DataFileError, DataProblem
    from storyeval.corpus import iter_raw_records

    records = []
    problems: list[DataProblem] = []
    for number, record in iter_raw_records(path):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        reason = session_problem(record)
        if reason:
            problems.append(DataProblem(str(path), number, reason))
            continue
        records.append(dict(record))
    if problems:
        raise DataFileError(problems)
    return records


def _objects(value: Any, what: str) -> str:
    """Why ``value`` is not a list of objects (empty when it is)."""
    if not isinstance(value, list):
        return f"{what} must be a list; got {type(value).__name__}"
    bad = next((type(v).__name__ for v in value if not isinstance(v, dict)), None)
    return f"each of {what} must be an object; got a {bad}" if bad else ""


def _nested(steps: list[dict[str, Any]], parts: Sequence[str], what: str) -> str:
    """Why a part of some step (a turn's suggestions, a task's pulls) is not a list of
    objects (empty when none is wrong)."""
    for step in steps:
        for part in parts:
            if step.get(part) is not None:
                reason = _objects(step[part], f"a {what}'s {part}")
                if reason:
                    return reason
        if step.get("survey") is not None and not isinstance(step["survey"], dict):
            return f"a {what}'s survey must be an object"
    return ""


def session_problem(record: Mapping[str, Any]) -> str:
    """Why a record is not a writing session the replay can show (empty when it is): the
    export's ``format``, a ``kind``, its turns (writing) or tasks (slogans) as lists of
    objects, each suggestion, event and pull an object (a pull's suggestions a list), each
    survey an object."""
    if record.get("format") not in SESSION_FORMATS:
        return "not a writing session: 'format' must be " + " or ".join(SESSION_FORMATS)
    if not isinstance(record.get("kind"), str) or not record["kind"]:
        return "a writing session needs its 'kind' (cyoa, mil or slogan)"
    for key in ("survey", "final_survey"):
        if record.get(key) is not None and not isinstance(record[key], dict):
            return f"{key} must be an object; got {type(record[key]).__name__}"
    if record["format"] == SESSION_FORMATS[0]:
        return _objects(record.get("turns"), "turns") or _nested(
            record["turns"], ("suggestions", "events"), "turn"
        )
    reason = _objects(record.get("tasks"), "tasks") or _nested(record["tasks"], ("pulls",), "task")
    for task in record["tasks"] if not reason else []:
        for pull in task.get("pulls") or []:
            for key in ("suggestions", "keywords"):
                if not isinstance(pull.get(key, []), list):
                    return f"a pull's {key} must be a list"
    return reason


def _comparisons(path: Path) -> list[dict[str, Any]]:
    from storyeval.meta.comparisons import read_comparisons

    records: list[dict[str, Any]] = read_comparisons(path).to_dict("records")
    return records


def _joined(
    stories: MemoryStories,
    scores: Iterable[tuple[str, Score]],
    judgments: Iterable[tuple[str, Judgment]],
    comparisons: list[dict[str, Any]],
    files: list[tuple[str, str, int]],
) -> ViewData:
    unjoined: dict[tuple[str, str], int] = {}

    def known(source: str, item: str) -> bool:
        if item in stories:
            return True
        unjoined[(source, "item_id not in the story files")] = (
            unjoined.get((source, "item_id not in the story files"), 0) + 1
        )
        return False

    score_rows = [
        {"item_id": s.item_id, "metric": s.metric, "value": s.value}
        for source, s in scores
        if known(source, s.item_id)
    ]
    people_rows, judge_rows = [], []
    for source, j in judgments:
        if not known(source, j.item_id):
            continue
        row = {
            "item_id": j.item_id,
            "rater_id": j.rater_id,
            "criterion": j.criterion,
            "value": j.value,
        }
        if j.rater_id.startswith(JUDGE_PREFIX):
            row["raw"] = str(j.extra.get("raw") or "")
            row["probabilities"] = _probabilities(j.extra.get("probabilities"))
            judge_rows.append(row)
        else:
            people_rows.append(row)
    columns = ["item_id", "rater_id", "criterion", "value"]
    return ViewData(
        stories,
        pd.DataFrame(score_rows, columns=["item_id", "metric", "value"]),
        pd.DataFrame(people_rows, columns=columns),
        pd.DataFrame(judge_rows, columns=[*columns, "raw", "probabilities"]),
        pd.DataFrame(comparisons),
        [(source, count, reason) for (source, reason), count in unjoined.items()],
        files,
    )


def _probabilities(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(f"{float(v):.2f}" for v in value if not math.isnan(float(v)))
    return "" if value is None else json.dumps(value)
