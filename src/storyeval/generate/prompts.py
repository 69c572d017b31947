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

from pathlib import Path

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import (
    FileFormat,
    Story,
    iter_raw_records,
    parse_prompt,
    read_stories,
)


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
