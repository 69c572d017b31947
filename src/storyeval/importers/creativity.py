"""Salesforce's expert-judged creative writing (github.com/salesforce/creativity_eval):

* **TTCW** (Chakrabarty et al. 2024, "Art or Artifice? Large Language Models and the False
  Promise of Creativity", CHI): 48 short stories written from 12 plots, 12 by New Yorker
  authors (the release gives their links only) and 12 each by GPT-3.5, GPT-4 and Claude; 14
  binary tests of the Torrance Test of Creative Writing answered by 3 experts per story (with a
  written explanation) and by 7 LLM judges (free text that should begin Yes or No). The folder
  holds ``stories.json``, ``tests.json``, ``expert_annotations.json`` and ``llm/annotations_
  JUDGE.jsonl``; :func:`import_ttcw` reads it.
* **WQ** (Chakrabarty et al. 2025, "AI-Slop to AI-Polish? Aligning Language Models through
  Edit-Based Writing Rewards and Test-time Computation"): the style-mimic split, pairs of
  paragraphs, one by a published author and one by an LLM imitating that author, the
  author's paragraph the preferred one (``reference_preference``) by the benchmark's design;
  :func:`import_wq` reads its JSON.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Judgment, Story
from storyeval.importers.base import ImportResult, file_digest, require_file

#: The systems of TTCW's stories, by the suffix of their ids
TTCW_SYSTEMS = ("NewYorker", "GPT3.5", "GPT4", "Claude")
_VERDICTS = {"yes": 1.0, "no": 0.0}
_ANSWER = re.compile(r"^[\s*_\"'`#>(\[]*(yes|no)\b", re.IGNORECASE)
_TTCW_ID = re.compile(r"^story_(?P<story>.+)_test(?P<test>\d+)$")


def criterion_name(category: str) -> str:
    """A TTCW test's category as a criterion name.

    >>> criterion_name("Perspective and Voice Flexibility")
    'perspective_and_voice_flexibility'
    """
    return re.sub(r"[^a-z0-9]+", "_", category.lower()).strip("_")


def parse_verdict(text: str) -> float | None:
    """1.0 for an answer that begins Yes, 0.0 for No (after spaces, quotes and markdown), else
    None: the judge's prompt asks it to begin with one of them.

    >>> parse_verdict("Yes, the ending is earned."), parse_verdict("**No**."), parse_verdict("The story")
    (1.0, 0.0, None)
    """
    match = _ANSWER.match(text or "")
    return _VERDICTS[match.group(1).lower()] if match else None


def _json_list(path: Path, what: str) -> list[tuple[int, dict[str, Any]]]:
    """The objects of a JSON file holding a list, each with the line it starts on (for
    ``FILE:LINE: reason``); a file of another shape is one problem."""
    text = path.read_text(encoding="utf-8-sig")
    decoder = json.JSONDecoder()
    position = len(text) - len(text.lstrip())
    if not text.startswith("[", position):
        raise DataFileError.single(path, 1, f"expected a JSON list of {what} objects")
    position += 1
    items: list[tuple[int, dict[str, Any]]] = []
    while True:
        position += len(text[position:]) - len(text[position:].lstrip())
        if text.startswith("]", position):
            return items
        line = text.count("\n", 0, position) + 1
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise DataFileError.single(path, exc.lineno, f"not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise DataFileError.single(path, line, f"expected a {what} object")
        items.append((line, item))
        position += len(text[position:]) - len(text[position:].lstrip())
        if text.startswith(",", position):
            position += 1
        elif not text.startswith("]", position):
            raise DataFileError.single(path, text.count("\n", 0, position) + 1, "expected , or ]")


def _missing(row: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    absent = [key for key in keys if row.get(key) in (None, "")]
    return f"lacks {', '.join(absent)}" if absent else None


def _ttcw_tests(path: Path) -> dict[int, str]:
    """``ttcw_idx`` -> criterion name, from ``tests.json``."""
    tests: dict[int, str] = {}
    problems: list[DataProblem] = []
    for line, row in _json_list(path, "test"):
        reason = _missing(row, ("ttcw_idx", "category", "question"))
        if reason:
            problems.append(DataProblem(str(path), line, reason))
            continue
        tests[int(row["ttcw_idx"])] = criterion_name(str(row["category"]))
    if problems:
        raise DataFileError(problems)
    return tests


def _ttcw_stories(path: Path, linked_texts: Path | None, result: ImportResult) -> dict[str, str]:
    """The stories with text (and the linked ones whose text ``linked_texts`` holds as
    ``STORY_ID.txt``); returns every story's system by id."""
    systems: dict[str, str] = {}
    linked: list[str] = []
    problems: list[DataProblem] = []
    for line, row in _json_list(path, "story"):
        reason = _missing(row, ("story_id", "story_idx", "content"))
        if reason:
            problems.append(DataProblem(str(path), line, reason))
            continue
        story_id = str(row["story_id"])
        system = story_id.split("_", 1)[-1]
        systems[story_id] = system
        content = str(row["content"]).strip()
        extra = {"prompt_id": f"plot{row['story_idx']}", "title": row.get("story_name", "")}
        if content.startswith(("http://", "https://")):
            extra["url"] = content
            supplied = linked_texts / f"{story_id}.txt" if linked_texts else None
            if supplied is None or not supplied.is_file():
                linked.append(story_id)
                continue
            content = supplied.read_text(encoding="utf-8").strip()
        prompt = str(row.get("plot") or "")
        result.stories.append(Story(story_id, prompt, content, system=system, extra=extra))
    if problems:
        raise DataFileError(problems)
    if linked:
        result.notes.append(
            f"{len(linked)} stories are given as links only (no text): their judgments are "
            "imported, the stories are not (give their texts with --linked-texts DIR, one "
            "STORY_ID.txt each)"
        )
    return systems


def _ttcw_experts(
    path: Path, tests: Mapping[int, str], systems: Mapping[str, str], result: ImportResult
) -> None:
    problems: list[DataProblem] = []
    for line, row in _json_list(path, "annotation"):
        reason = _missing(row, ("story_id", "expert_idx", "ttcw_idx", "binary_verdict"))
        verdict = _VERDICTS.get(str(row.get("binary_verdict", "")).strip().lower())
        if reason is None and verdict is None:
            reason = f"binary_verdict must be Yes or No; got {row['binary_verdict']!r}"
        if reason is None and int(row["ttcw_idx"]) not in tests:
            reason = f"unknown test {row['ttcw_idx']}"
        if reason is None and str(row["story_id"]) not in systems:
            reason = f"unknown story {row['story_id']!r}"
        if reason is not None or verdict is None:
            problems.append(DataProblem(str(path), line, str(reason)))
            continue
        story_id = str(row["story_id"])
        extra = {"system": systems[story_id], "rationale": str(row.get("explanation") or "")}
        result.judgments.append(
            Judgment(
                story_id, f"expert{row['expert_idx']}", tests[int(row["ttcw_idx"])], verdict,
                condition=systems[story_id], extra=extra,
            )
        )  # fmt: skip
    if problems:
        raise DataFileError(problems)


def _ttcw_judges(
    folder: Path, tests: Mapping[int, str], systems: Mapping[str, str], result: ImportResult
) -> None:
    """The LLM judges' answers (``annotations_JUDGE.jsonl``), their verdicts parsed."""
    unparsable: Counter[str] = Counter()
    problems: list[DataProblem] = []
    for path in sorted(folder.glob("annotations_*.jsonl")):
        judge = path.stem.removeprefix("annotations_")
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                found = _TTCW_ID.match(str(record["id"]))
                response = str(record["response"])
            except (json.JSONDecodeError, KeyError, TypeError):
                problems.append(DataProblem(str(path), number, "expected {id, response}"))
                continue
            if not found or found["story"] not in systems or int(found["test"]) not in tests:
                problems.append(DataProblem(str(path), number, f"unknown id {record['id']!r}"))
                continue
            verdict = parse_verdict(response)
            if verdict is None:
                unparsable[judge] += 1
                continue
            extra = {"system": systems[found["story"]], "rationale": response}
            criterion = tests[int(found["test"])]
            result.judge_judgments.append(
                Judgment(found["story"], judge, criterion, verdict, extra=extra)
            )
    if problems:
        raise DataFileError(problems)
    judges = sorted({j.rater_id for j in result.judge_judgments} | set(unparsable))
    if not judges:
        return
    answered = Counter(j.rater_id for j in result.judge_judgments)
    asked = len(systems) * len(tests)
    counts = ", ".join(f"{judge} {unparsable[judge]}" for judge in judges)
    result.notes.append(
        f"LLM judges: {len(judges)}; answers that begin with neither Yes nor No, left out: {counts}"
    )
    unanswered = {j: asked - answered[j] - unparsable[j] for j in judges}
    if any(unanswered.values()):
        shown = ", ".join(f"{j} {n}" for j, n in unanswered.items() if n)
        result.notes.append(f"questions with no answer in the judge's file (of {asked}): {shown}")


def import_ttcw(path: str | Path, *, linked_texts: str | Path | None = None) -> ImportResult:
    """Import TTCW's release folder (see the module docstring).

    Gives the stories with text (id ``N_SYSTEM``, the plot as the ``prompt``, ``prompt_id``
    ``plotN`` shared by the four stories of a plot, ``system`` one of
    :data:`TTCW_SYSTEMS`, the title and link in ``extra``), the experts' verdicts as
    judgments (``rater_id`` ``expertK``, one criterion per test named after its category,
    value 1 for Yes and 0 for No, the explanation as ``rationale``, the story's system as
    ``condition`` and ``system``, so ``study analyse`` compares the sources) for all 48
    stories, and the LLM judges' answers as ``judge_judgments`` (``rater_id`` the
    judge's file name, the verdict parsed from the answer's first word; answers that begin
    with neither are left out and counted in the notes).

    Parameters
    ----------
    path : str or Path
        The folder (``Art_or_Artifice`` in the repository).
    linked_texts : str or Path, optional
        A folder of ``STORY_ID.txt`` files with the texts of the stories the release links
        to (the New Yorker's); without it those stories have judgments but no story record.

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a file of the wrong shape, an item without its fields, a
        verdict other than Yes or No, or an unknown story or test.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder}: not a directory (TTCW's release folder)")
    for name in ("stories.json", "tests.json", "expert_annotations.json"):
        require_file(folder / name)
    result = ImportResult("ttcw", str(folder))
    tests = _ttcw_tests(folder / "tests.json")
    texts = Path(linked_texts) if linked_texts is not None else None
    systems = _ttcw_stories(folder / "stories.json", texts, result)
    _ttcw_experts(folder / "expert_annotations.json", tests, systems, result)
    if (folder / "llm").is_dir():
        _ttcw_judges(folder / "llm", tests, systems, result)
    per_system = Counter(systems.values())
    result.notes.append(
        "stories per system: " + ", ".join(f"{s} {per_system[s]}" for s in sorted(per_system))
    )
    return result


def import_wq(path: str | Path) -> ImportResult:
    """Import WQ's style-mimic pairs (``style_mimic.json``): each paragraph a story (id
    ``PAIR-1``/``PAIR-2``; as for other pairwise data its ``system`` is its own id, so a
    pairwise judge compares exactly the two; ``prompt_id`` the pair; ``source`` ``human`` for
    the author's paragraph and ``llm`` for the imitation, with ``ai_written``; the author as
    ``group`` and ``author``), and one comparison per pair with the preferred paragraph as the
    winner (``rater_id`` ``experts``, criterion ``quality``, the author as the comparison's
    ``group``: pairs of one author are not independent, so resample authors, not pairs).

    The benchmark prefers the author's paragraph by design, so the preferred side is marked
    human; a pair whose ``sample_type`` is not ``style-mimic`` keeps no such mark and is
    counted in the notes.

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for an item without both paragraphs, a preference other than
        ``1`` or ``2``, or a duplicate id.
    """
    file_path = require_file(path)
    result = ImportResult("wq", str(file_path))
    problems: list[DataProblem] = []
    seen: set[str] = set()
    unmarked = 0
    for line, row in _json_list(file_path, "pair"):
        pair_id = str(row.get("id") or f"pair{line}")
        preferred = str(row.get("reference_preference", "")).strip()
        reason = _missing(row, ("paragraph1", "paragraph2", "source"))
        if reason is None and preferred not in ("1", "2"):
            reason = f"reference_preference must be 1 or 2; got {preferred!r}"
        if reason is None and pair_id in seen:
            reason = f"duplicate id {pair_id!r}"
        if reason is not None:
            problems.append(DataProblem(str(file_path), line, reason))
            continue
        seen.add(pair_id)
        mimic = str(row.get("sample_type", "style-mimic")) == "style-mimic"
        unmarked += not mimic
        author = str(row["source"]).replace("_", " ")
        ids = (f"{pair_id}-1", f"{pair_id}-2")
        for side, story_id in zip(("1", "2"), ids, strict=True):
            human = side == preferred
            extra: dict[str, Any] = {"prompt_id": pair_id, "author": author, "pair": pair_id}
            extra.update(group=author, original_id=row.get("original_id", ""), position=int(side))
            if mimic:
                extra.update(source="human" if human else "llm", ai_written=not human)
            text = str(row[f"paragraph{side}"])
            result.stories.append(Story(story_id, "", text, system=story_id, extra=extra))
        result.comparisons.append(
            {
                "item_id": pair_id, "prompt_id": pair_id, "system_a": ids[0], "system_b": ids[1],
                "winner": ids[int(preferred) - 1], "rater_id": "experts", "criterion": "quality",
                "group": author,
            }
        )  # fmt: skip
    if problems:
        raise DataFileError(problems)
    if not result.comparisons:
        raise DataFileError.single(file_path, 1, "the file holds no pairs")
    authors = len({c["group"] for c in result.comparisons})
    result.notes.append(
        f"{len(result.comparisons)} pairs by {authors} authors (sha256 {file_digest(file_path)})"
    )
    if unmarked:
        result.notes.append(f"{unmarked} pairs are not style-mimic: no side is marked human")
    return result
