"""WMT metrics-task human judgments, so NUBIA's aggregator (Kane et al. 2020) can be trained
and tested as published (on WMT direct assessment, segment level).

``wmt-da``
    The segment-level direct-assessment sets of the WMT metrics tasks (``DAseg-wmt-newstest2016``,
    ``DAseg-wmt-newstest2017``): four line-aligned plain-text files per language pair,
    ``DAseg.newstestYEAR.{source,reference,mt-system,human}.LP`` (e.g. ``cs-en``); line N of
    each is segment N's source, reference, machine translation and human score (the mean
    standardised DA score, a z-score). Give the ``human`` file; the other three are found
    beside it. Each segment becomes a story (prompt: the source, story: the translation,
    reference: the reference, system ``mt``) and a judgment on criterion ``da`` by rater
    ``mean``.
``wmt-rr``
    Segment-level relative rankings (``RR-seglevel.csv`` of WMT15-16, ``DArr-seglevel.csv``
    of WMT17 on): one comparison per row, the better and the worse system of one segment.
    The header names the columns (case ignored): the language pair as ``lp`` or as
    ``srclang``/``trglang``, the segment as ``sid`` or ``srcindex``, and ``better``,
    ``worse``; commas or whitespace separate them. Rows become comparisons (the input of
    ``storyeval rank``) between stories ``LP:SID:SYSTEM``; with ``system_outputs`` (WMT's
    ``system-outputs/newstestYEAR/LP`` directories, a file ``newstestYEAR.SYSTEM.LP`` per
    system) and the source and reference files, the stories themselves too.

Written against the layouts the WMT metrics task packages describe; storyeval's tests use
files in those layouts, not the releases themselves.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from storyeval.base.errors import DataFileError, DataProblem
from storyeval.corpus import Judgment, Story
from storyeval.importers.base import ImportResult, import_signature, require_file, utf8_lines

_DA_PARTS = ("source", "reference", "mt-system")


def _sibling(human: Path, part: str) -> Path:
    name = re.sub(r"\.human\.", f".{part}.", human.name)
    if name == human.name:
        raise DataFileError.single(
            human, 1, "a WMT DA file is named DAseg.newstestYEAR.human.LP (give the human file)"
        )
    return require_file(human.with_name(name))


def _lines(path: Path, problems: list[DataProblem]) -> list[str]:
    lines = [text for _, text in utf8_lines(path, problems)]
    return lines[:-1] if lines and lines[-1] == "" else lines


def import_wmt_da(path: str | Path) -> ImportResult:
    """Stories and judgments from a WMT DAseg language pair (see the module docstring).

    Raises
    ------
    storyeval.base.errors.DataFileError
        ``FILE:LINE: reason`` for a score that is not a number, or files of different lengths.
    """
    human = require_file(path)
    result = ImportResult("wmt-da", str(human))
    problems: list[DataProblem] = []
    pair = human.name.rsplit(".", 1)[-1]
    texts = {part: _lines(_sibling(human, part), problems) for part in _DA_PARTS}
    scores = _lines(human, problems)
    for part, lines in texts.items():
        if len(lines) != len(scores):
            problems.append(
                DataProblem(
                    str(human), len(scores), f"{len(scores)} scores for {len(lines)} {part} lines"
                )
            )
    if problems:
        raise DataFileError(problems)
    signature = import_signature("wmt-da", human, "human")
    for number, score in enumerate(scores, start=1):
        try:
            value = float(score.strip())
        except ValueError:
            problems.append(DataProblem(str(human), number, f"not a number: {score!r}"))
            continue
        item = f"{pair}-{number:05d}"
        extra = {"prompt_id": item, "language_pair": pair}
        result.stories.append(
            Story(
                item,
                texts["source"][number - 1],
                texts["mt-system"][number - 1],
                reference=texts["reference"][number - 1],
                system="mt",
                extra=extra,
            )
        )
        result.judgments.append(
            Judgment(
                item, "mean", "da", value, extra={**extra, "system": "mt", "signature": signature}
            )
        )
    if problems:
        raise DataFileError(problems)
    result.notes.append(
        f"{len(scores)} segments of {pair}; scores are standardised DA means (z), rater 'mean'"
    )
    return result


def _columns(header: str) -> tuple[list[str], str | None]:
    separator = "," if "," in header else None
    return [c.strip().lower() for c in header.split(separator)], separator


def _rr_row(
    cells: dict[str, str], path: Path, number: int
) -> tuple[str, str, str, str] | DataProblem:
    pair = cells.get("lp") or (
        f"{cells['srclang']}-{cells['trglang']}"
        if cells.get("srclang") and cells.get("trglang")
        else ""
    )
    segment = cells.get("sid") or cells.get("srcindex") or ""
    better, worse = cells.get("better", ""), cells.get("worse", "")
    if not (pair and segment and better and worse):
        return DataProblem(str(path), number, "a row needs the pair, the segment, better, worse")
    return pair, segment, better, worse


def import_wmt_rr(
    path: str | Path,
    *,
    system_outputs: str | Path | None = None,
    prompts: str | Path | None = None,
    references: str | Path | None = None,
) -> ImportResult:
    """Comparisons (and, with ``system_outputs``, stories) from a WMT segment-level
    relative-ranking file (see the module docstring).

    Raises
    ------
    storyeval.base.errors.DataFileError
        ``FILE:LINE: reason`` for a header without the columns or a short row.
    """
    file_path = require_file(path)
    result = ImportResult("wmt-rr", str(file_path))
    problems: list[DataProblem] = []
    lines = [(n, t) for n, t in utf8_lines(file_path, problems) if t.strip()]
    if not lines:
        raise DataFileError.single(file_path, 1, "the file is empty")
    names, separator = _columns(lines[0][1])
    needed = {"better", "worse"}
    if not needed <= set(names) or not (
        {"lp"} <= set(names) or {"srclang", "trglang"} <= set(names)
    ):
        raise DataFileError.single(
            file_path,
            lines[0][0],
            "the header needs lp (or srclang, trglang), sid (or srcindex), better, worse",
        )
    seen: set[str] = set()
    for number, text in lines[1:]:
        values = [v.strip() for v in text.split(separator)]
        row = _rr_row(dict(zip(names, values, strict=False)), file_path, number)
        if isinstance(row, DataProblem):
            problems.append(row)
            continue
        pair, segment, better, worse = row
        item = f"{pair}:{segment}"
        result.comparisons.append(
            {
                "item_id": item,
                "prompt_id": item,
                "system_a": better,
                "system_b": worse,
                "winner": better,
                "rater_id": "wmt",
                "criterion": "rank",
            }
        )
        seen.update((f"{item}:{better}", f"{item}:{worse}"))
    if problems:
        raise DataFileError(problems)
    if system_outputs is not None:
        _rr_stories(result, sorted(seen), Path(system_outputs), prompts, references)
    result.notes.append(f"{len(result.comparisons)} comparisons; systems compared within a segment")
    return result


def _rr_stories(
    result: ImportResult,
    keys: list[str],
    directory: Path,
    prompts: str | Path | None,
    references: str | Path | None,
) -> None:
    """The compared translations as stories (``LP:SID:SYSTEM``), from the system outputs."""
    problems: list[DataProblem] = []
    sources = _lines(require_file(prompts), problems) if prompts else []
    refs = _lines(require_file(references), problems) if references else []
    outputs: dict[tuple[str, str], tuple[Path, list[str]]] = {}
    for key in keys:
        pair, segment, system = key.split(":", 2)
        if (system, pair) not in outputs:
            found = sorted(directory.rglob(f"*.{system}.{pair}"))
            if not found:
                raise FileNotFoundError(f"{directory}: no output file *.{system}.{pair}")
            outputs[(system, pair)] = (found[0], _lines(found[0], problems))
        where, lines = outputs[(system, pair)]
        index = int(segment) - 1 if segment.isdigit() else -1
        if not 0 <= index < len(lines):
            raise DataFileError.single(
                where, len(lines), f"no segment {segment} in {len(lines)} lines"
            )
        extra: dict[str, Any] = {"prompt_id": f"{pair}:{segment}", "language_pair": pair}
        result.stories.append(
            Story(
                key,
                sources[index] if index < len(sources) else "",
                lines[index],
                reference=refs[index] if index < len(refs) else None,
                system=system,
                extra=extra,
            )
        )
    if problems:
        raise DataFileError(problems)
