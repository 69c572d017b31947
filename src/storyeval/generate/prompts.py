"""Prompt files and priming texts for generation.

Prompt records (JSONL or CSV, like story records)
    ``id`` (required, unique), ``prompt`` (required, non-empty: the text the model continues),
    optional ``reference`` (a human continuation: string or list of strings), optional
    ``story`` (used as the reference when ``reference`` is absent, so a human story file such
    as ``examples/human.jsonl`` is a prompts file whose stories become the references of the
    generated ones); any other field (e.g. ``genre``) is copied to every generated story.

Priming texts (few-shot priming, Clark (2021) §6.2.2)
    Any story file: each record's full text (``prompt`` and ``story`` joined by a space) is
    one priming text.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storyeval.corpus import FileFormat, Story, iter_raw_records, read_stories
from storyeval.errors import DataFileError, DataProblem

PROMPT_FIELDS = ("id", "prompt", "story", "reference", "system")
#: Fields generated stories set themselves; a prompt record's own copies are not carried over.
RESERVED_FIELDS = frozenset(
    {
        "prompt_id",
        "signature",
        "attempts",
        "dropped_empty",
        "dropped_unfinished",
        "dropped_long",
        "dropped_copy",
        "dropped_offensive",
        "copy_overlap",
    }
)


def _text(record: Mapping[str, Any], key: str, *, required: bool) -> str | None:
    value = record.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            state = "missing" if value is None else "empty"
            raise ValueError(f"required field '{key}' is {state}")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"field '{key}' must be a string; got {type(value).__name__} {value!r}")
    return str(value)


def _reference(record: Mapping[str, Any]) -> str | list[str] | None:
    value = record.get("reference")
    if isinstance(value, list):
        if not value:
            return None
        if not all(isinstance(item, str) and item.strip() for item in value):
            raise ValueError("field 'reference' must be a string or a list of non-empty strings")
        return list(value)
    text = _text(record, "reference", required=False)
    if text is not None:
        return text
    return _text(record, "story", required=False)


def parse_prompt(item: Mapping[str, Any]) -> Story:
    """One prompt record as a :class:`Story` with an empty ``story`` (``ValueError`` on a
    missing or empty ``id`` or ``prompt``)."""
    prompt_id = _text(item, "id", required=True)
    prompt = _text(item, "prompt", required=True)
    reference = _reference(item)
    if prompt_id is None or prompt is None:
        raise ValueError("a prompt record needs 'id' and 'prompt'")
    extra = {
        key: value
        for key, value in item.items()
        if key not in PROMPT_FIELDS and key not in RESERVED_FIELDS
    }
    return Story(prompt_id, prompt, "", reference=reference, extra=extra)


def read_prompts(path: str | Path, *, fmt: FileFormat | None = None) -> list[Story]:
    """Read and validate a prompts file (see the module docstring for the fields).

    Returns
    -------
    list of Story
        One record per prompt with ``story`` empty, ``reference`` set from ``reference`` or
        ``story``, and other fields in ``extra``.

    Raises
    ------
    DataFileError
        Listing every bad line as ``FILE:LINE: reason``: malformed JSON, a missing or empty
        ``id`` or ``prompt``, a duplicate id, a CSV header without ``id`` and ``prompt``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "prompts.jsonl"
    >>> _ = path.write_text('{"id": "p1", "prompt": "It was late.", "story": "He slept."}\\n')
    >>> [(p.id, p.prompt, p.reference) for p in read_prompts(path)]
    [('p1', 'It was late.', 'He slept.')]
    """
    problems: list[DataProblem] = []
    prompts: list[Story] = []
    first_line: dict[str, int] = {}
    for number, item in iter_raw_records(path, fmt=fmt, required=("id", "prompt")):
        if isinstance(item, DataProblem):
            problems.append(item)
            continue
        try:
            record = parse_prompt(item)
        except ValueError as exc:
            problems.append(DataProblem(str(path), number, str(exc)))
            continue
        prompt_id = record.id
        if prompt_id in first_line:
            problems.append(
                DataProblem(
                    str(path),
                    number,
                    f"duplicate id {prompt_id!r} (first seen on line {first_line[prompt_id]})",
                )
            )
            continue
        first_line[prompt_id] = number
        prompts.append(record)
    if problems:
        raise DataFileError(problems)
    if not prompts:
        raise DataFileError.single(path, 1, "the file holds no prompt records")
    return prompts


def read_priming_texts(
    path: str | Path, *, count: int | None = 3, fmt: FileFormat | None = None
) -> list[str]:
    """The first ``count`` texts of a story file (all of them when ``count`` is None).

    Each text is the record's ``prompt`` and ``story`` joined by one space. Clark (2021)
    (§6.2.2) primes with three in-domain human-authored texts, the default here.

    Raises
    ------
    DataFileError
        If the file is invalid or holds fewer than ``count`` records.
    """
    if count is not None and count < 1:
        raise ValueError(f"count must be >= 1; got {count}")
    stories = read_stories(path, fmt=fmt)
    if count is not None and len(stories) < count:
        raise DataFileError.single(
            path, 1, f"the file holds {len(stories)} stories; {count} priming texts were asked for"
        )
    chosen = stories if count is None else stories[:count]
    return [" ".join(part for part in (s.prompt.strip(), s.story.strip()) if part) for s in chosen]
