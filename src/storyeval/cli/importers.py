"""``storyeval import FORMAT FILE --out-dir DIR``: public benchmark formats to canonical files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import check_choice, user_error

#: The command's options each format reads (the importer's keyword arguments)
FORMAT_OPTIONS: dict[str, tuple[str, ...]] = {
    "union": (
        "context_sentences", "criterion", "system", "prompts", "references", "metric_outputs",
        "error_min_votes",
    ),
    "wmt-rr": ("system_outputs", "prompts", "references"),
    "deltascore": ("aspects",),
    "ttcw": ("linked_texts",),
    "asap": ("essay_set", "references", "score", "min_sentences", "max_sentences"),
    "chaganty": ("references", "min_raters"),
    "flickr8k": ("captions",),
}  # fmt: skip


_ESSAY_SET = typer.Option(3, "--essay-set", help="asap: the essay set (question).")
_SCORE = typer.Option(
    "resolved", "--score", help="asap: resolved (domain1_score) or raters (each rater's)."
)
_MIN_SENTENCES = typer.Option(None, "--min-sentences", help="asap: shortest essay kept.")
_MAX_SENTENCES = typer.Option(None, "--max-sentences", help="asap: longest essay kept.")
_TRUNCATE = typer.Option(
    None,
    "--truncate",
    help="Cut the stories as a paper cut its texts (a `storyeval truncate` preset: "
    "karpinska2021, union-wp, clark2021-detection, clark2021-context).",
)
_CAPTIONS = typer.Option(
    None, "--captions", help="flickr8k: Flickr8k.token.txt (default: next to the file)."
)
_MIN_RATERS = typer.Option(
    1, "--min-raters", help="chaganty: keep summaries judged by at least this many (thesis: 2)."
)


_PROMPTS = typer.Option(
    None,
    "--prompts",
    help="union: reference_ipt.txt, the whole contexts: line N story N's, or (the release) "
    "the line whose index is the story's id. wmt-rr: the source file (line N segment N's).",
)

_REFERENCES = typer.Option(
    None,
    "--references",
    help="union: reference_opt.txt, the human endings, in the layout of --prompts. wmt-rr: "
    "the reference file. asap: a text file with the reference essay. chaganty: JSONL of "
    "{id, reference} for records without one.",
)

_SYSTEM_OUTPUTS = typer.Option(
    None,
    "--system-outputs",
    help="wmt-rr: WMT's system-outputs directory (files newstestYEAR.SYSTEM.LP): the "
    "compared translations become stories.",
)

_LINKED_TEXTS = typer.Option(
    None,
    "--linked-texts",
    help="ttcw: a folder of STORY_ID.txt files with the texts the release gives as links "
    "(the New Yorker's).",
)

_METRIC_OUTPUTS = typer.Option(
    None, "--metric-outputs", help="union: the metric_output directory (a file per metric)."
)


def import_command(
    fmt: str = typer.Argument(
        ...,
        metavar="FORMAT",
        help="union, hanna (per-system summary), hanna-raw (per-annotator file), hanna-llm "
        "(LLM stories or LLM ratings), deltascore, "
        "openmeva (MAGS JSON), pairwise (LitBench-style preferences), wmt-da (WMT DAseg: the "
        "human file), wmt-rr (WMT RR/DArr seglevel CSV), ttcw (TTCW's release folder, "
        "Chakrabarty et al. 2024), wq (WQ's style_mimic.json, Chakrabarty et al. 2025), asap "
        "(ASAP's training_set_rel3.tsv), chaganty (Chaganty et al. 2018's judged CNN/DM "
        "summaries), flickr8k (Flickr 8K's ExpertAnnotations.txt) or judgments.",
    ),
    file: Path = typer.Argument(
        ...,
        help="The file to import (union: also a folder of the release: its root, Data/<set> "
        "or ant_data, whose side files are then found).",
    ),
    out_dir: Path = typer.Option(
        ..., "--out-dir", help="Directory for stories/judgments/scores.jsonl."
    ),
    context_sentences: int = typer.Option(
        1, "--context-sentences", help="union: leading sentences that form the prompt (0: none)."
    ),
    criterion: str = typer.Option(
        "reasonable", "--criterion", help="union: the criterion of the 0/1 labels."
    ),
    system: str = typer.Option(None, "--system", help="union: the system that wrote the stories."),
    prompts: Path = _PROMPTS,
    references: Path = _REFERENCES,
    system_outputs: Path = _SYSTEM_OUTPUTS,
    metric_outputs: Path = _METRIC_OUTPUTS,
    error_min_votes: int = typer.Option(
        3, "--error-min-votes", help="union (ant_data_all.txt): votes an error type needs."
    ),
    aspect: list[str] = typer.Option(
        None, "--aspect", help="deltascore: rating fields (repeat; default: every numeric field)."
    ),
    essay_set: int = _ESSAY_SET,
    score: str = _SCORE,
    min_sentences: int = _MIN_SENTENCES,
    max_sentences: int = _MAX_SENTENCES,
    min_raters: int = _MIN_RATERS,
    captions: Path = _CAPTIONS,
    truncate: str = _TRUNCATE,
    linked_texts: Path = _LINKED_TEXTS,
) -> None:
    """Convert a public benchmark file (UNION, HANNA, DeltaScore, OpenMEVA, pairwise
    preferences) or long-format judgments to canonical files.

    Writes DIR/stories.jsonl, DIR/judgments.jsonl and, when the file carries them,
    DIR/scores.jsonl (metric values), DIR/comparisons.jsonl (pairwise preferences, the
    input of `storyeval rank`) and DIR/judge_judgments.jsonl (LLM judges' verdicts, for
    `storyeval judge-eval --judge`). Bad input exits 2 with FILE:LINE: reason lines.
    """
    from storyeval.base.errors import DataFileError
    from storyeval.importers import IMPORTERS, import_file, truncate_import, write_import

    check_choice(fmt, tuple(IMPORTERS), "FORMAT")
    given: dict[str, object] = {
        "context_sentences": context_sentences, "criterion": criterion, "system": system,
        "prompts": prompts, "references": references, "metric_outputs": metric_outputs,
        "error_min_votes": error_min_votes, "system_outputs": system_outputs,
        "aspects": aspect or None, "linked_texts": linked_texts, "essay_set": essay_set,
        "score": score, "min_sentences": min_sentences, "max_sentences": max_sentences,
        "min_raters": min_raters, "captions": captions,
    }  # fmt: skip
    options = {key: given[key] for key in FORMAT_OPTIONS.get(fmt, ()) if given[key] is not None}
    try:
        result = import_file(fmt, file, **options)
        if truncate is not None:
            result = truncate_import(result, truncate)
        written = write_import(result, out_dir)
    except DataFileError as exc:
        for problem in exc.problems:
            typer.echo(str(problem), err=True)
        raise typer.Exit(2) from None
    except (ValueError, OSError) as exc:
        raise user_error(exc) from None
    _report(result, written)


def _report(result: Any, written: dict[str, Path]) -> None:
    """What was written, the metrics, criteria and raters, and the importer's notes."""
    counts = {
        "stories": len(result.stories),
        "judgments": len(result.judgments),
        "scores": len(result.scores),
        "comparisons": len(result.comparisons),
        "judge_judgments": len(result.judge_judgments),
    }
    for kind, path in written.items():
        typer.echo(f"wrote {counts[kind]} {kind} to {path}")
    if result.scores:
        metrics = sorted({s.metric for s in result.scores})
        typer.echo(f"metrics ({len(metrics)}): {', '.join(metrics)}")
    criteria = sorted({j.criterion for j in result.judgments})
    raters = sorted({j.rater_id for j in result.judgments})
    typer.echo(f"criteria: {', '.join(criteria)}; raters: {len(raters)}")
    for note in result.notes:
        typer.echo(f"note: {note}")


def register(app: typer.Typer) -> None:
    """Add the ``import`` command to the application."""
    app.command("import", rich_help_panel="Data")(import_command)
