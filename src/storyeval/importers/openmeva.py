"""OpenMEVA's MAGS JSON: ``{id: {"prompt", "gold_response", "gen": {model: {"text", "score":
[ratings]}}}}``. One story per id and model (``ID:MODEL``), the gold response as its reference,
one judgment per rating (``rater_id`` ``a1``, ``a2``..., criterion ``overall``; the positions
are slots, not people).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Judgment, Story
from storyeval.importers.base import (
    Records,
)


def _line_of(text: str, key: str) -> int:
    """The line of the first ``"key":`` in a JSON text (1 when not found)."""
    position = text.find(json.dumps(key) + ":")
    return text.count("\n", 0, position) + 1 if position >= 0 else 1


def import_openmeva(path: str | Path, result: Records) -> Records:
    """Import OpenMEVA's MAGS JSON (see the module docstring).

    Raises
    ------
    DataFileError
        Malformed JSON (with its line), or an entry without ``prompt``, ``gen``, a text or a
        list of numeric scores (with the entry's line).
    """
    from storyeval.corpus import prompt_key

    file_path = Path(path)
    text = file_path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataFileError.single(file_path, exc.lineno, f"malformed JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise DataFileError.single(file_path, 1, "expected a JSON object of entries by id")
    problems: list[DataProblem] = []
    for entry_id, entry in data.items():
        line = _line_of(text, entry_id)
        reason = _openmeva_problem(entry)
        if reason:
            problems.append(DataProblem(str(file_path), line, f"entry {entry_id!r}: {reason}"))
            continue
        prompt = str(entry["prompt"])
        prompt_id = prompt_key(prompt) or str(entry_id)
        for model, generated in entry["gen"].items():
            item_id = f"{entry_id}:{model}"
            extra = {"prompt_id": prompt_id}
            result.stories.append(
                Story(
                    item_id,
                    prompt,
                    str(generated["text"]),
                    reference=entry.get("gold_response"),
                    system=str(model),
                    extra=extra,
                )
            )
            for slot, score in enumerate(generated["score"], start=1):
                result.judgments.append(
                    Judgment(
                        item_id,
                        f"a{slot}",
                        "overall",
                        float(score),
                        extra={"system": str(model), "prompt_id": prompt_id},
                    )
                )
    if problems:
        raise DataFileError(problems)
    if not result.stories:
        raise DataFileError.single(file_path, 1, "the file holds no generated stories")
    result.notes.append(
        "scores imported with rater_id a1, a2... (slots, not people), criterion 'overall'"
    )
    return result


def _openmeva_problem(entry: Any) -> str:
    if not isinstance(entry, dict):
        return "must be an object"
    if not isinstance(entry.get("prompt"), str) or not isinstance(entry.get("gen"), dict):
        return "needs 'prompt' (a string) and 'gen' (an object by model)"
    for model, generated in entry["gen"].items():
        if not isinstance(generated, dict) or not isinstance(generated.get("text"), str):
            return f"gen.{model}: needs 'text'"
        scores = generated.get("score")
        if not isinstance(scores, list) or not all(
            isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
            for s in scores
        ):
            return f"gen.{model}.score: must be a list of numbers"
    return ""
