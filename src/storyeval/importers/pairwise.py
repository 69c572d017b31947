"""Pairwise preference files in the style of LitBench and WritingPreferenceBench (JSONL or CSV),
one record per pair: ``prompt`` and either ``chosen_story``/``rejected_story`` (or
``chosen``/``rejected``), or ``story_a``/``story_b`` with ``preferred`` (``a``, ``b`` or
``tie``); optional ``id``, ``prompt_id`` and ``criterion``. Gives both stories (``system`` =
the story's own id, so a pairwise judge compares exactly the two) and one comparison per pair in
the format of ``storyeval rank`` (``comparisons.jsonl``).

LitBench (Fein et al. 2025) releases its pairs with the Reddit comment ids of both stories
(``chosen_comment_id``/``rejected_comment_id``) and their upvotes
(``chosen_upvotes``/``rejected_upvotes``); a story that appears in several pairs is then one
story record (its id the comment id, its upvotes kept), so a ranking over stories sees every
comparison it took part in.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Story, iter_raw_records
from storyeval.importers.base import (
    Records,
)


def _pair_texts(record: Mapping[str, Any]) -> tuple[str, str, str] | str:
    """``(story_a, story_b, winner)`` with winner ``a``/``b``/``tie``, or a reason."""
    chosen = record.get("chosen_story", record.get("chosen"))
    rejected = record.get("rejected_story", record.get("rejected"))
    if chosen is not None or rejected is not None:
        if not str(chosen or "").strip() or not str(rejected or "").strip():
            return "chosen and rejected stories must not be empty"
        return str(chosen), str(rejected), "a"
    a, b = record.get("story_a"), record.get("story_b")
    preferred = str(record.get("preferred") or "").strip().lower()
    if not str(a or "").strip() or not str(b or "").strip():
        return "needs chosen_story/rejected_story, chosen/rejected, or story_a/story_b"
    if preferred not in ("a", "b", "tie"):
        return f"preferred must be a, b or tie; got {record.get('preferred')!r}"
    return str(a), str(b), preferred


def _story_ids(record: Mapping[str, Any], pair_id: str) -> tuple[str, str]:
    """The two stories' ids: LitBench's comment ids when given, else the pair's id with -a/-b."""
    chosen = str(record.get("chosen_comment_id") or "").strip()
    rejected = str(record.get("rejected_comment_id") or "").strip()
    if chosen and rejected and chosen != rejected:
        return chosen, rejected
    return f"{pair_id}-a", f"{pair_id}-b"


def import_pairwise(path: str | Path, result: Records) -> Records:
    """Import a pairwise preference file (see the module docstring).

    Raises
    ------
    DataFileError
        ``FILE:LINE: reason`` for a record without a prompt, two stories and a preference,
        or a duplicate id.
    """
    from storyeval.corpus import prompt_key

    file_path = Path(path)
    problems: list[DataProblem] = []
    seen: dict[str, int] = {}
    stored: set[str] = set()
    for number, record in iter_raw_records(file_path):
        if isinstance(record, DataProblem):
            problems.append(record)
            continue
        pair_id = str(record.get("id") or f"pair{number:06d}")
        parsed = _pair_texts(record)
        if isinstance(parsed, str) or pair_id in seen:
            reason = (
                parsed
                if isinstance(parsed, str)
                else f"duplicate id {pair_id!r} (first on line {seen[pair_id]})"
            )
            problems.append(DataProblem(str(file_path), number, reason))
            continue
        seen[pair_id] = number
        story_a, story_b, winner = parsed
        prompt = str(record.get("prompt") or "")
        prompt_id = str(record.get("prompt_id") or "") or prompt_key(prompt) or pair_id
        ids = _story_ids(record, pair_id)
        for side, story_id, text in zip(
            ("chosen", "rejected"), ids, (story_a, story_b), strict=True
        ):
            if story_id in stored:
                continue
            stored.add(story_id)
            extra: dict[str, Any] = {"prompt_id": prompt_id, "pair": pair_id}
            if record.get(f"{side}_upvotes") not in (None, ""):
                extra["upvotes"] = record[f"{side}_upvotes"]
            result.stories.append(Story(story_id, prompt, text, system=story_id, extra=extra))
        result.comparisons.append(
            {
                "item_id": pair_id,
                "prompt_id": prompt_id,
                "system_a": ids[0],
                "system_b": ids[1],
                "winner": {"a": ids[0], "b": ids[1], "tie": "tie"}[winner],
                "rater_id": str(record.get("rater_id") or "dataset"),
                "criterion": str(record.get("criterion") or "preference"),
            }
        )
    if problems:
        raise DataFileError(problems)
    if not result.comparisons:
        raise DataFileError.single(file_path, 1, "the file holds no pairs")
    return result
