"""Importers for public story-evaluation benchmark formats.

Each importer reads one file and returns canonical records (:class:`~storyeval.corpus.Story`,
:class:`~storyeval.corpus.Judgment`, :class:`~storyeval.corpus.Score`); :func:`write_import`
writes them as ``stories.jsonl``, ``judgments.jsonl`` and (when the file carries metric
values) ``scores.jsonl``. Judgment and score records carry the story's ``system`` and
``prompt_id`` so that the meta-evaluation can group them without the story file. Every
problem is reported as ``FILE:LINE: reason``.

Formats
-------
``union``
    UNION's annotated stories (Guan & Huang 2020): one story per line,
    ``ID ||| story text ||| 0/1 labels separated by spaces, one per annotator``. The text
    includes the leading context: its first ``context_sentences`` sentences become the
    ``prompt`` and the rest the ``story`` (the full text is kept as ``text``). Each label is a
    binary judgment on the criterion ``reasonable`` by annotator slot ``a1``, ``a2``... (the
    slots are positions, not people: use Krippendorff's alpha, not ICC, on them). The
    release's side files are read on request: the contexts (``reference_ipt.txt``, whole
    multi-sentence prompts), the human continuations (``reference_opt.txt``, as references),
    the ``metric_output`` directory (a score file per metric) and the error types of
    ``ant_data_all.txt`` (see :mod:`storyeval.importers.union`).
``hanna``
    A CSV with one row per system (column ``Model``; the human-written stories are the row
    ``Human``) whose other cells are JSON lists of per-story values, the list position being
    the prompt (``prompt_id`` = ``prompt-<position>``, from 0). ``Relevance``, ``Coherence``,
    ``Empathy``, ``Surprise``, ``Engagement``, ``Complexity`` hold the mean human rating per
    story; ``Human <n> <Criterion>`` columns, when present, one rater's ratings (then these
    are imported and the mean column is checked against them). Every other column is a metric,
    its name kept verbatim. Columns ``Story`` and ``Prompt`` holding lists of strings, when
    present, give the texts; without them no story file is written (the metric and judgment
    files carry ``system`` and ``prompt_id``).
``deltascore``
    JSONL with ``title`` (the prompt), ``story``, ``model``, ``reference`` and the mean rating
    of each aspect (numbers or numeric strings); every other field with a numeric value is an
    aspect. The ratings are means, imported with ``rater_id`` ``mean``.
``judgments``
    Our own long-format judgments (JSONL or CSV), validated and written as JSONL.
``hanna-raw``, ``openmeva``, ``pairwise``
    HANNA's raw annotations, OpenMEVA's MAGS JSON and LitBench-style pairwise preferences:
    see :mod:`storyeval.importers.hanna`, :mod:`storyeval.importers.openmeva`, :mod:`storyeval.importers.pairwise`.
``hanna-llm``
    HANNA's LLM-written stories and LLM ratings: see :mod:`storyeval.importers.hanna`.
``wmt-da``, ``wmt-rr``
    WMT metrics-task segment-level direct assessment and relative rankings (for NUBIA): see
    :mod:`storyeval.importers.wmt`.
``flickr8k``
    Flickr 8K's expert judgments of image captions (NUBIA's Table 1): see
    :mod:`storyeval.importers.captions`.
``asap``, ``chaganty``
    The essays and the judged CNN/Daily Mail summaries of Clark et al. (2019), Table 5.3: see
    :mod:`storyeval.importers.summaries_essays`.
``ttcw``, ``wq``
    Salesforce's expert-judged creative writing: TTCW's release folder (Chakrabarty et al.
    2024: stories, 14 tests, 3 experts' verdicts, 7 LLM judges' answers) and WQ's style-mimic
    pairs (Chakrabarty et al. 2025): see :mod:`storyeval.importers.creativity`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from storyeval.base.io import write_text_atomic
from storyeval.base.registry import Registry, UnknownNameError
from storyeval.corpus import read_judgments, write_judgments, write_scores, write_stories
from storyeval.importers.base import ImportResult, require_file
from storyeval.importers.captions import import_flickr8k
from storyeval.importers.creativity import import_ttcw, import_wq
from storyeval.importers.deltascore import import_deltascore
from storyeval.importers.hanna import import_hanna, import_hanna_llm, import_hanna_raw
from storyeval.importers.openmeva import import_openmeva
from storyeval.importers.pairwise import import_pairwise
from storyeval.importers.summaries_essays import import_asap, import_chaganty
from storyeval.importers.union import import_union
from storyeval.importers.wmt import import_wmt_da, import_wmt_rr


def import_judgments(path: str | Path) -> ImportResult:
    """Validate long-format judgments (JSONL or CSV) for writing as canonical JSONL."""
    file_path = require_file(path)
    result = ImportResult("judgments", str(file_path))
    result.judgments = read_judgments(file_path)
    return result


class UnknownFormatError(UnknownNameError, ValueError):
    """An import format that no importer is registered for."""


#: Importers by format name: the built-ins, then the ``storyeval.importers`` entry points.
IMPORTERS: Registry[Callable[..., ImportResult]] = Registry(
    "import format", entry_point_group="storyeval.importers", error=UnknownFormatError
)
IMPORTERS.register("union", import_union)
IMPORTERS.register("hanna", import_hanna)
IMPORTERS.register("deltascore", import_deltascore)
IMPORTERS.register("judgments", import_judgments)
IMPORTERS.register("wmt-da", import_wmt_da)
IMPORTERS.register("wmt-rr", import_wmt_rr)
IMPORTERS.register("ttcw", import_ttcw)
IMPORTERS.register("wq", import_wq)
IMPORTERS.register("asap", import_asap)
IMPORTERS.register("chaganty", import_chaganty)
IMPORTERS.register("flickr8k", import_flickr8k)


def _into_result(name: str, read: Callable[[Path, Any], Any]) -> Callable[..., ImportResult]:
    """An importer that fills a fresh :class:`ImportResult` with ``read(path, result)``."""

    def run(path: str | Path) -> ImportResult:
        result = ImportResult(name, str(path))
        read(require_file(path), result)
        return result

    run.__doc__ = f"Import a {name} file."
    return run


IMPORTERS.register("hanna-raw", _into_result("hanna-raw", import_hanna_raw))
IMPORTERS.register("openmeva", _into_result("openmeva", import_openmeva))
IMPORTERS.register("pairwise", _into_result("pairwise", import_pairwise))
IMPORTERS.register("hanna-llm", _into_result("hanna-llm", import_hanna_llm))


def import_file(fmt: str, path: str | Path, **options: Any) -> ImportResult:
    """Run the importer registered as ``fmt``."""
    return IMPORTERS.get(fmt)(path, **options)


def truncate_import(result: ImportResult, preset: str) -> ImportResult:
    """The imported stories cut as a paper cut its texts (a :data:`storyeval.truncation.PRESETS`
    name), so that human and generated texts compare at the same length; the judgments and
    scores of stories the cut leaves out (too short) are left out with them, and the notes
    say how many."""
    from dataclasses import replace

    from storyeval.base.validation import check_choice
    from storyeval.truncation import PRESETS, cut_stories, outcome_summary

    check_choice(preset, tuple(PRESETS), "truncate")
    if not result.stories:
        raise ValueError(f"{result.source}: nothing to cut: this format gives no story texts")
    policy, words, detokenize = PRESETS[preset]
    kept, counts = cut_stories(result.stories, words=words, policy=policy, detokenize=detokenize)
    ids = {s.id for s in kept}
    dropped = {s.id for s in result.stories} - ids
    notes = [*result.notes, f"cut ({preset}): {outcome_summary(counts)}"]
    if dropped:
        notes.append(
            f"{len(dropped)} story(ies) too short for {preset}: left out with their records"
        )
    return replace(
        result,
        stories=kept,
        judgments=[j for j in result.judgments if j.item_id not in dropped],
        judge_judgments=[j for j in result.judge_judgments if j.item_id not in dropped],
        scores=[x for x in result.scores if x.item_id not in dropped],
        notes=notes,
    )


def write_import(result: ImportResult, out_dir: str | Path) -> dict[str, Path]:
    """Write the records to ``out_dir`` (created if needed); returns the paths written.

    Every file is written atomically. ``stories.jsonl`` is written when there are stories,
    ``judgments.jsonl`` when there are judgments, ``judge_judgments.jsonl`` when there are
    LLM judges' judgments, ``scores.jsonl`` when there are scores and ``comparisons.jsonl``
    when there are pairwise preferences.
    """
    from storyeval.base.io import claim_output_directory

    directory = claim_output_directory(out_dir, "import", inputs=[result.source])
    written: dict[str, Path] = {}
    if result.stories:
        written["stories"] = directory / "stories.jsonl"
        write_stories(written["stories"], result.stories)
    if result.judgments:
        written["judgments"] = directory / "judgments.jsonl"
        write_judgments(written["judgments"], result.judgments)
    if result.judge_judgments:
        written["judge_judgments"] = directory / "judge_judgments.jsonl"
        write_judgments(written["judge_judgments"], result.judge_judgments)
    if result.scores:
        written["scores"] = directory / "scores.jsonl"
        write_scores(written["scores"], result.scores)
    if result.comparisons:
        written["comparisons"] = directory / "comparisons.jsonl"
        text = "".join(json.dumps(c) + "\n" for c in result.comparisons)
        write_text_atomic(written["comparisons"], text)
    return written


__all__ = [
    "IMPORTERS",
    "ImportResult",
    "UnknownFormatError",
    "import_asap",
    "import_chaganty",
    "import_deltascore",
    "import_file",
    "import_flickr8k",
    "import_hanna",
    "import_hanna_llm",
    "import_hanna_raw",
    "import_judgments",
    "import_openmeva",
    "import_pairwise",
    "import_ttcw",
    "import_union",
    "import_wmt_da",
    "import_wmt_rr",
    "import_wq",
    "truncate_import",
    "write_import",
]
