"""The meta-evaluation report: an HTML page and Markdown, with figures and CSVs beside them.

:func:`build_report` computes everything from a :class:`~storyeval.meta.MetaTable` and the
judgments, and writes into the output directory:

- ``index.html`` and ``report.md`` (the same content);
- ``figures/heatmap_<method>.png`` (metric x criterion per level, with the human ceiling),
  ``figures/matrix.png`` (the criteria + metrics matrix, Callan & Foster 2023 Table 2),
  ``figures/scatter_<n>.png`` (each metric against each criterion, points by system);
- ``correlations.csv``, ``matrix.csv``, ``agreement.csv``, ``ratings.csv``, ``ceiling.csv``,
  ``system_means.csv``, ``williams.csv``, ``signatures.csv`` (whichever apply);
- with ``robustness=DIR`` (a ``storyeval robustness`` directory): ``figures/robustness.png``,
  ``robustness_discrimination.csv`` and ``robustness_invariance.csv`` and their section;
- with ``mauve=DIR`` (a ``storyeval mauve`` directory): ``figures/mauve_divergence.png``,
  ``mauve.csv`` and their section; with ``curves=DIR`` (``storyeval curves``):
  ``figures/curves.png``, ``curves.csv`` and their section; with ``judge_audit=DIR``
  (``storyeval judge-audit``): ``judge_audit.csv`` and the section "Audit of the judge".

Files are written one by one, atomically; other files in the directory are left alone.
Sections that do not apply to the data (one rater: no agreement; no prompt ids: no story
level; one metric: no Williams test) are replaced by a sentence that says why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from storyeval.meta import MetaTable
from storyeval.report.compute import ReportData, available_levels, compute_report
from storyeval.report.render import (
    Figure,
    Section,
    Table,
    group_warnings,
    render_html,
    render_markdown,
)
from storyeval.report.sections import (
    ReportFiles,
    correlation_section,
    curves_section,
    human_section,
    judge_audit_section,
    matrix_section,
    mauve_section,
    overview_section,
    robustness_section,
    scatter_section,
    signature_section,
    warning_section,
    williams_section,
)


@dataclass
class ReportResult:
    """What :func:`build_report` wrote."""

    directory: Path
    files: dict[str, Path]
    notes: list[str]


def report_sections(
    data: ReportData,
    out: ReportFiles,
    *,
    inputs: Mapping[str, Sequence[str | Path]] | None = None,
    max_scatter_metrics: int = 12,
    robustness: str | Path | None = None,
    mauve: str | Path | None = None,
    curves: str | Path | None = None,
    judge_audit: str | Path | None = None,
) -> list[Section]:
    """The report's sections, in order (writing the CSVs and figures they show)."""
    sections = [
        overview_section(data, out),
        human_section(data, out),
        correlation_section(data, out),
        matrix_section(data, out),
        scatter_section(data, out, max_scatter_metrics),
        williams_section(data, out),
    ]
    if robustness is not None:
        sections.append(robustness_section(robustness, out))
    if mauve is not None:
        sections.append(mauve_section(mauve, out))
    if curves is not None:
        sections.append(curves_section(curves, out))
    if judge_audit is not None:
        sections.append(judge_audit_section(judge_audit, out))
    sections.append(signature_section(data, out, inputs))
    warnings = warning_section(data)
    return sections + ([warnings] if warnings is not None else [])


def build_report(
    table: MetaTable,
    judgments: object,
    out_dir: str | Path,
    *,
    methods: Sequence[str] = ("pearson", "spearman", "kendall"),
    levels: Sequence[str] | None = None,
    matrix_method: str = "pearson",
    williams_method: str = "spearman",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    title: str = "storyeval meta-evaluation report",
    inputs: Mapping[str, Sequence[str | Path]] | None = None,
    max_scatter_metrics: int = 12,
    robustness: str | Path | None = None,
    mauve: str | Path | None = None,
    curves: str | Path | None = None,
    judge_audit: str | Path | None = None,
    progress: Callable[[str], None] | None = None,
    view_export: str | Path | None = None,
) -> ReportResult:
    """Compute the meta-evaluation and write the report (see the module docstring):
    :func:`~storyeval.report.compute.compute_report`, then the sections, then the pages.

    Parameters
    ----------
    table : MetaTable
        Metrics and aggregated human ratings.
    judgments : DataFrame or sequence of Judgment
        The raw (per-rater) judgments, for agreement and the human ceiling.
    out_dir : str or Path
        Created if needed.
    methods : sequence of str
        Correlation methods of the heatmaps and tables.
    levels : sequence of str, optional
        Default: every level the data support.
    matrix_method : str
        Correlation of the criteria + metrics matrix.
    williams_method : str
        Correlation compared by the Williams tests (Spearman, as in Clark (2021) chapter 5).
    n_boot, confidence, seed
        Bootstrap settings for every interval.
    title : str
    inputs : mapping, optional
        ``{"scores": [...], "judgments": [...], "stories": [...]}`` paths, listed with their
        SHA-256 in the signature section.
    max_scatter_metrics : int
        Metrics per scatter figure (more metrics make more figures).
    robustness : str or Path, optional
        A directory written by ``storyeval robustness``: its tables and heatmap become the
        section "Robustness of metrics".
    mauve : str or Path, optional
        A directory written by ``storyeval mauve``: the section "Distribution of the stories".
    curves : str or Path, optional
        A directory written by ``storyeval curves``: the section "Along the stories".
    judge_audit : str or Path, optional
        A directory written by ``storyeval judge-audit``: the section "Audit of the judge".
    progress : callable, optional
        Told what is being done, step by step (the CLI prints it).
    view_export : str or Path, optional
        A ``storyeval view --export`` site of the same files: each system row and each
        metric and criterion cell links to its stories there (see
        :func:`~storyeval.report.render.link_view_export`).

    Returns
    -------
    ReportResult

    Raises
    ------
    NotADirectoryError
        If ``out_dir`` exists and is a file.
    ValueError
        If no correlation level can be computed from the data.
    """
    from storyeval.base.io import check_output_directory, claim_output_directory

    read = [path for paths in (inputs or {}).values() for path in paths]
    directory = check_output_directory(out_dir, "report", inputs=read)
    say = progress or (lambda _: None)
    say(f"correlations, agreement, ceilings and Williams tests ({n_boot} bootstrap resamples)")
    data = compute_report(
        table,
        judgments,
        methods=methods,
        levels=levels,
        matrix_method=matrix_method,
        williams_method=williams_method,
        n_boot=n_boot,
        confidence=confidence,
        seed=seed,
    )
    claim_output_directory(directory, "report", inputs=read)
    (directory / "figures").mkdir(parents=True, exist_ok=True)
    out = ReportFiles(directory)
    say("figures and tables")
    sections = report_sections(
        data,
        out,
        inputs=inputs,
        max_scatter_metrics=max_scatter_metrics,
        robustness=robustness,
        mauve=mauve,
        curves=curves,
        judge_audit=judge_audit,
    )
    if view_export is not None:
        from storyeval.report.render import link_view_export

        if not (Path(view_export) / "index.html").exists():
            raise FileNotFoundError(f"{view_export}: no index.html (run storyeval view --export)")
        link_view_export(sections, Path(view_export), directory)
    say("pages")
    out.text("index.html", render_html(title, sections))
    out.text("report.md", render_markdown(title, sections))
    return ReportResult(directory, out.files, data.warnings)


__all__ = [
    "Figure",
    "ReportData",
    "ReportResult",
    "Section",
    "Table",
    "available_levels",
    "build_report",
    "compute_report",
    "group_warnings",
    "render_html",
    "render_markdown",
    "report_sections",
]
