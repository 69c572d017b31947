"""The meta-evaluation report: an HTML page and Markdown, with figures and CSVs beside them.

:func:`build_report` computes everything from a :class:`~storyeval.meta.MetaTable` and the
judgments, and writes into the output directory:

- ``index.html`` and ``report.md`` (the same content);
- ``figures/heatmap_<method>.png`` (metric x criterion per level, with the human ceiling),
  ``figures/matrix.png`` (the criteria + metrics matrix, Callan & Foster 2023 Table 2),
  ``figures/scatter_<n>.png`` (each metric against each criterion, points by system);
- ``correlations.csv``, ``matrix.csv``, ``agreement.csv``, ``ratings.csv``, ``ceiling.csv``,
  ``system_means.csv``, ``williams.csv``, ``signatures.csv`` (whichever apply).

Files are written one by one, atomically; other files in the directory are left alone.
Sections that do not apply to the data (one rater: no agreement; no prompt ids: no story
level; one metric: no Williams test) are replaced by a sentence that says why.
"""

from __future__ import annotations

import hashlib
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from storyeval import __version__
from storyeval.io import write_bytes_atomic, write_text_atomic
from storyeval.meta import (
    LEVELS,
    MetaEvaluationWarning,
    MetaTable,
    adjust_pvalues,
    agreement,
    compare_metrics,
    correlate,
    correlation_matrix,
    describe_ratings,
    human_ceiling,
)
from storyeval.meta.data import _judgments_to_frame

AGGREGATED_RATER_IDS = frozenset({"mean"})


@dataclass
class Table:
    frame: pd.DataFrame
    caption: str = ""


@dataclass
class Figure:
    path: str
    alt: str


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


@dataclass
class ReportResult:
    """What :func:`build_report` wrote."""

    directory: Path
    files: dict[str, Path]
    notes: list[str]


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or value is pd.NA:
        return ""
    if isinstance(value, float | np.floating):
        if math.isnan(value):
            return "nan"
        return f"{value:.{digits}f}"
    return str(value)


def _fmt_p(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.3g}"


def _estimate_cell(
    record: Mapping[str, Any], p_column: str = "p_adjusted", *, stars: bool = True
) -> str:
    est = record.get("estimate")
    if est is None or (isinstance(est, float) and math.isnan(est)):
        return "n/a"
    text = f"{est:.3f}"
    low, high = record.get("ci_low"), record.get("ci_high")
    if low is not None and high is not None and not (math.isnan(low) or math.isnan(high)):
        text += f" [{low:.2f}, {high:.2f}]"
    p = record.get(p_column, record.get("p_value"))
    if stars and isinstance(p, float) and not math.isnan(p):
        text += "**" if p < 0.01 else "*" if p < 0.05 else ""
    return text


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "x"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


# --------------------------------------------------------------------------- rendering


def _markdown_table(table: Table) -> str:
    frame = table.frame

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ")

    lines = []
    if table.caption:
        lines += [f"*{table.caption}*", ""]
    lines.append("| " + " | ".join(cell(c) for c in frame.columns) + " |")
    lines.append("|" + "|".join("---" for _ in frame.columns) + "|")
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def render_markdown(title: str, sections: Sequence[Section]) -> str:
    parts = [f"# {title}", ""]
    for section in sections:
        parts += [f"## {section.title}", ""]
        for paragraph in section.paragraphs:
            parts += [paragraph, ""]
        for figure in section.figures:
            parts += [f"![{figure.alt}]({figure.path})", ""]
        for table in section.tables:
            parts += [_markdown_table(table), ""]
    return "\n".join(parts).rstrip() + "\n"


_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, Roboto, sans-serif; margin: 2rem auto;
       max-width: 1200px; padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; border-bottom: 1px solid #ccc;
       padding-bottom: .2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .6rem 0 1.2rem; font-size: .85rem; }
caption { caption-side: top; text-align: left; font-style: italic; padding-bottom: .3rem; }
th, td { border: 1px solid #ccc; padding: .25rem .5rem; text-align: right; vertical-align: top; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
td.sig { font-family: ui-monospace, monospace; font-size: .75rem; text-align: left;
         word-break: break-all; }
img { max-width: 100%; border: 1px solid #eee; margin: .4rem 0; }
nav a { margin-right: .8rem; } .note { color: #555; }
"""


def render_html(title: str, sections: Sequence[Section]) -> str:
    from jinja2 import Environment

    env = Environment(autoescape=True)
    template = env.from_string(
        """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title><style>{{ css }}</style></head>
<body>
<h1>{{ title }}</h1>
<nav>{% for s in sections %}<a href="#{{ s.anchor }}">{{ s.title }}</a>{% endfor %}</nav>
{% for s in sections %}
<section id="{{ s.anchor }}"><h2>{{ s.title }}</h2>
{% for p in s.paragraphs %}<p>{{ p }}</p>
{% endfor %}{% for f in s.figures %}<figure><img src="{{ f.path }}" alt="{{ f.alt }}"></figure>
{% endfor %}{% for t in s.tables %}<table>{% if t.caption %}<caption>{{ t.caption }}</caption>{% endif %}
<thead><tr>{% for c in t.columns %}<th>{{ c }}</th>{% endfor %}</tr></thead>
<tbody>{% for row in t.rows %}<tr>{% for v in row %}<td{% if t.sig[loop.index0] %} class="sig"{% endif %}>{{ v }}</td>{% endfor %}</tr>
{% endfor %}</tbody></table>
{% endfor %}</section>
{% endfor %}
<p class="note">Generated by storyeval {{ version }}.</p>
</body></html>
"""
    )
    view = []
    for section in sections:
        tables = []
        for table in section.tables:
            columns = [str(c) for c in table.frame.columns]
            tables.append(
                {
                    "caption": table.caption,
                    "columns": columns,
                    "rows": [[str(v) for v in row] for row in table.frame.itertuples(index=False)],
                    "sig": ["signature" in c.lower() for c in columns],
                }
            )
        view.append(
            {
                "title": section.title,
                "anchor": _slug(section.title),
                "paragraphs": section.paragraphs,
                "figures": section.figures,
                "tables": tables,
            }
        )
    return template.render(title=title, sections=view, css=_CSS, version=__version__)


# --------------------------------------------------------------------------- building


def _available_levels(
    table: MetaTable, wanted: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    levels = list(wanted) if wanted else list(LEVELS)
    notes = []
    keep = []
    for level in levels:
        if level == "story" and not table.has_prompts:
            notes.append("The story level is left out: no item has a prompt id (pass --stories).")
        elif level == "system" and not table.has_systems:
            notes.append("The system level is left out: no item has a system (pass --stories).")
        else:
            keep.append(level)
    return keep, notes


_CASE = re.compile(r"\(([^()]*)\)")


def group_warnings(texts: Sequence[str], *, shown: int = 6) -> list[str]:
    """One line per kind of warning: messages that differ only in their first parenthesised
    case (``(metric ~ criterion, level, method)``) are merged into one line that counts the
    cases and, field by field, lists the values that vary (``a|b|c``), in order of appearance.

    >>> group_warnings(["x is undefined (a ~ q, s): 2 pairs", "x is undefined (b ~ q, s): 2 pairs", "y"])
    ['x is undefined (2 cases: a|b ~ q, s): 2 pairs', 'y']
    """
    groups: dict[str, list[str]] = {}
    for text in texts:
        match = _CASE.search(text)
        key = _CASE.sub("(\x00)", text, count=1) if match else text
        groups.setdefault(key, []).append(match.group(1) if match else "")
    lines = []
    for key, cases in groups.items():
        summary = (
            cases[0] if len(cases) == 1 else f"{len(cases)} cases: {_merge_cases(cases, shown)}"
        )
        lines.append(key.replace("\x00", summary))
    return lines


_FIELD_SEPARATOR = re.compile(r"(\s*(?:~|,)\s*)")


def _merge_cases(cases: Sequence[str], shown: int) -> str:
    """``a ~ q, s`` and ``b ~ q, s`` -> ``a|b ~ q, s``; cases of different shapes are listed."""
    split = [_FIELD_SEPARATOR.split(case) for case in cases]
    if len({len(parts) for parts in split}) != 1:
        listed = "; ".join(cases[:shown])
        return listed + ("; ..." if len(cases) > shown else "")
    merged = []
    for position, first in enumerate(split[0]):
        if position % 2:  # a separator
            merged.append(first)
            continue
        values = list(dict.fromkeys(parts[position] for parts in split))
        text = "|".join(values[:shown])
        if len(values) > shown:
            text += f"|... ({len(values)})"
        merged.append(text)
    return "".join(merged)


def build_report(
    table: MetaTable,
    judgments: Any,
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
) -> ReportResult:
    """Compute the meta-evaluation and write the report (see the module docstring).

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
        Default: every level the data supports.
    matrix_method : str
        Correlation of the criteria + metrics matrix.
    williams_method : str
        Correlation compared by the Williams tests (Spearman, as in seed 000 chapter 5).
    n_boot, confidence, seed
        Bootstrap settings for every interval.
    title : str
    inputs : mapping, optional
        ``{"scores": [...], "judgments": [...], "stories": [...]}`` paths, listed with their
        SHA-256 in the signature section.
    max_scatter_metrics : int
        Metrics per scatter figure (more metrics make more figures).

    Returns
    -------
    ReportResult
    """
    directory = Path(out_dir)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory}: exists and is not a directory")
    (directory / "figures").mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    use_levels, notes = _available_levels(table, levels)
    if not use_levels:
        raise ValueError("no correlation level can be computed from these data")
    metrics, criteria = table.metric_names, table.criteria
    judgment_frame = _judgments_to_frame(judgments)
    judgment_frame = judgment_frame[judgment_frame["item_id"].isin(set(table.items.index))]
    judgment_frame = judgment_frame[judgment_frame["criterion"].isin(criteria)]
    per_rater = judgment_frame[~judgment_frame["rater_id"].isin(AGGREGATED_RATER_IDS)]

    def save_csv(name: str, frame: pd.DataFrame) -> None:
        path = directory / name
        write_text_atomic(path, frame.to_csv(index=False))
        files[name] = path

    def save_png(name: str, data: bytes) -> str:
        path = directory / "figures" / name
        write_bytes_atomic(path, data)
        files[f"figures/{name}"] = path
        return f"figures/{name}"

    caught_warnings: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        correlations = correlate(
            table,
            levels=use_levels,
            methods=methods,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
        )
        correlations = adjust_pvalues(correlations, method="bh", by=["level", "method"])
        matrix = correlation_matrix(table, method=matrix_method, level="pooled")
        n_raters = per_rater["rater_id"].nunique()
        agreement_table = ceiling = None
        if n_raters >= 2:
            agreement_table = agreement(per_rater, n_boot=n_boot, confidence=confidence, seed=seed)
            ceiling = human_ceiling(
                per_rater,
                items=table.items,
                levels=use_levels,
                methods=methods,
                n_boot=n_boot,
                confidence=confidence,
                seed=seed,
            )
        williams = None
        if len(metrics) >= 2:
            williams = compare_metrics(table, method=williams_method, level="pooled")
    for item in caught:
        if issubclass(item.category, MetaEvaluationWarning):
            text = str(item.message)
            if text not in caught_warnings:
                caught_warnings.append(text)

    sections: list[Section] = []
    # --- overview
    systems = table.items["system"].fillna("(unknown)").value_counts().sort_index()
    overview = Section("Data")
    overview.paragraphs.append(
        f"{len(table.items)} items with both metric scores and human judgments "
        f"({table.coverage.get('items_scored', 0)} scored, {table.coverage.get('items_judged', 0)} "
        f"judged); {len(metrics)} metric(s), {len(criteria)} criterion/criteria, "
        f"{table.coverage.get('raters', 0)} rater(s), {table.coverage.get('judgments', 0)} "
        f"judgments; ratings aggregated by {table.aggregation}; "
        f"{int(table.items['prompt_id'].nunique())} prompts."
    )
    overview.paragraphs.extend(notes)
    overview.tables.append(
        Table(
            pd.DataFrame({"system": systems.index, "items": systems.to_numpy()}),
            "Items per system",
        )
    )
    means = pd.concat([table.metrics, table.human], axis=1)
    if table.has_systems:
        grouped = means.groupby(table.items["system"]).mean().reset_index()
        save_csv("system_means.csv", grouped)
        shown = grouped.copy()
        for column in shown.columns[1:]:
            shown[column] = shown[column].map(lambda v: _fmt(v, 3))
        overview.tables.append(Table(shown, "Mean metric value and mean human rating per system"))
    sections.append(overview)

    # --- human side
    human = Section("Human judgments: agreement and ceiling")
    ratings = describe_ratings(judgment_frame) if not judgment_frame.empty else pd.DataFrame()
    if not ratings.empty:
        save_csv("ratings.csv", ratings)
        shown = ratings.copy()
        shown["mean"] = shown["mean"].map(_fmt)
        shown["sd"] = shown["sd"].map(_fmt)
        human.tables.append(Table(shown, "Ratings per criterion (all ratings)"))
    if agreement_table is not None:
        human.paragraphs.append(
            "Agreement per criterion: Krippendorff's alpha at the nominal, ordinal and interval "
            "levels (krippendorff package), Fleiss' kappa (statsmodels; items with the modal "
            "number of ratings), intraclass correlations (pingouin; icc1 one-way random, icc2 "
            "two-way random absolute agreement, icc3 two-way mixed consistency, k = the mean of "
            "k raters; items rated by every rater) and the percentage of items on which all "
            "ratings agree, as Karpinska et al. (2021) report beside alpha."
        )
        save_csv("agreement.csv", agreement_table)
        pivot = agreement_table.assign(
            cell=[_estimate_cell(r, stars=False) for r in agreement_table.to_dict("records")]
        )
        pivot.loc[pivot["method"] == "percent_full_agreement", "cell"] = agreement_table.loc[
            agreement_table["method"] == "percent_full_agreement", "estimate"
        ].map(lambda v: _fmt(v, 1) + "%")
        wide = pivot.pivot(index="method", columns="criterion", values="cell")
        wide = wide.reindex([m for m in dict.fromkeys(agreement_table["method"])])
        human.tables.append(
            Table(
                wide.reset_index(),
                f"Agreement among {n_raters} raters: estimate [{int(confidence * 100)}% interval]; "
                "alpha and kappa intervals bootstrap items; ICC intervals are F-based",
            )
        )
    else:
        human.paragraphs.append(
            "Agreement and the human ceiling need two or more raters with individual ratings; "
            f"these judgments have {n_raters} (aggregated ratings with rater_id 'mean' are not "
            "individual raters)."
        )
    if ceiling is not None and not ceiling.empty:
        save_csv("ceiling.csv", ceiling)
        summary = ceiling[ceiling["rater"] == "mean"]
        if not summary.empty:
            wide = summary.assign(cell=summary["estimate"].map(_fmt)).pivot_table(
                index=["level", "method"], columns="criterion", values="cell", aggfunc="first"
            )
            human.tables.append(
                Table(
                    wide.reset_index(),
                    "Human ceiling: each rater against the mean of the others, averaged over "
                    "raters (per-rater values with intervals in ceiling.csv)",
                )
            )
    sections.append(human)

    # --- correlations
    corr_section = Section("Correlation of metrics with human judgments")
    corr_section.paragraphs.append(
        "Cells: estimate [bootstrap interval]; * and ** mark Benjamini-Hochberg adjusted p < .05 "
        "and < .01 (one family per level and method). Pooled: over all items, items resampled. "
        "Story: within each prompt across systems, averaged over prompts, prompts resampled, "
        "sign-flip p-value. System: over per-system means, prompts resampled; with few systems "
        "these intervals and p-values are wide by necessity. The last heatmap row is the human "
        "ceiling."
    )
    save_csv("correlations.csv", correlations)
    for method in methods:
        name = save_png(
            f"heatmap_{method}.png",
            _plots().correlation_heatmaps(
                correlations,
                method=method,
                levels=use_levels,
                metrics=metrics,
                criteria=criteria,
                ceiling=ceiling,
            ),
        )
        corr_section.figures.append(Figure(name, f"{method} correlation heatmap"))
    for level in use_levels:
        for method in methods:
            sub = correlations[
                (correlations["level"] == level) & (correlations["method"] == method)
            ]
            if sub.empty:
                continue
            cells = sub.assign(cell=[_estimate_cell(r) for r in sub.to_dict("records")])
            wide = cells.pivot(index="metric", columns="criterion", values="cell")
            wide = wide.reindex(index=metrics, columns=criteria)
            n_info = ""
            if level == "story":
                n_info = (
                    f"; prompts used {_fmt(sub['n_groups'].min())}-{_fmt(sub['n_groups'].max())}, "
                    f"skipped {_fmt(sub['skipped'].min())}-{_fmt(sub['skipped'].max())}"
                )
            elif level == "system":
                n_info = f"; systems {_fmt(sub['n'].max())}"
            else:
                n_info = f"; items {_fmt(sub['n'].min())}-{_fmt(sub['n'].max())}"
            corr_section.tables.append(
                Table(wide.reset_index(), f"{method}, {level} level{n_info}")
            )
    sections.append(corr_section)

    # --- matrix
    matrix_section = Section("Correlation matrix of criteria and metrics")
    matrix_section.paragraphs.append(
        f"{matrix_method.capitalize()} correlations at the pooled level between every pair of "
        "human criteria and metrics, laid out like Callan & Foster (2023), Table 2."
    )
    save_csv("matrix.csv", matrix.reset_index().rename(columns={"index": "variable"}))
    name = save_png("matrix.png", _plots().matrix_heatmap(matrix, title=f"{matrix_method}, pooled"))
    matrix_section.figures.append(Figure(name, "correlation matrix"))
    shown = matrix.map(lambda v: _fmt(v, 2)).reset_index().rename(columns={"index": ""})
    matrix_section.tables.append(Table(shown))
    sections.append(matrix_section)

    # --- scatter plots
    scatter = Section("Metric scores against human ratings")
    stats_lookup = (
        {
            (r["metric"], r["criterion"]): r
            for r in correlations[
                (correlations["level"] == "pooled") & (correlations["method"] == methods[0])
            ].to_dict("records")
        }
        if "pooled" in use_levels
        else {}
    )
    chunks = [
        metrics[i : i + max_scatter_metrics] for i in range(0, len(metrics), max_scatter_metrics)
    ]
    counter = 0
    for criterion in criteria:
        for chunk in chunks:
            counter += 1
            labels = {}
            for metric in chunk:
                record = stats_lookup.get((metric, criterion))
                labels[metric] = (
                    f"{methods[0]} {_fmt(record['estimate'], 2)} (n={record['n']})"
                    if record
                    else ""
                )
            name = save_png(
                f"scatter_{counter:02d}_{_slug(criterion)}.png",
                _plots().scatter_grid(
                    table.metrics[chunk],
                    table.human[criterion],
                    table.items["system"],
                    criterion=criterion,
                    stats=labels,
                ),
            )
            scatter.figures.append(Figure(name, f"metrics against {criterion}"))
    sections.append(scatter)

    # --- Williams
    comparison = Section("Comparing metrics (Williams test)")
    if williams is not None and not williams.empty:
        save_csv("williams.csv", williams)
        significant = williams[williams["p_adjusted"] < 0.05]
        comparison.paragraphs.append(
            f"For each criterion and ordered pair of metrics, a one-sided Williams test that the "
            f"first correlates more strongly ({williams_method}, pooled) than the second, with "
            "Benjamini-Hochberg adjustment per criterion. All pairs are in williams.csv; "
            f"{len(significant)} of {len(williams)} are significant at .05."
        )
        if not significant.empty:
            shown = significant[
                [
                    "criterion",
                    "metric_a",
                    "metric_b",
                    "r_a",
                    "r_b",
                    "r_ab",
                    "statistic",
                    "p_adjusted",
                    "n",
                ]
            ].copy()
            for column in ("r_a", "r_b", "r_ab", "statistic"):
                shown[column] = shown[column].map(_fmt)
            shown["p_adjusted"] = shown["p_adjusted"].map(_fmt_p)
            comparison.tables.append(Table(shown, "Significant differences (adjusted p < .05)"))
    else:
        comparison.paragraphs.append(
            "The Williams test compares two or more metrics; there is one."
        )
    sections.append(comparison)

    # --- signatures
    sig_rows = [
        {"what": f"metric {m}", "signature": table.metric_signature(m) or "(none)"} for m in metrics
    ]
    stat_sigs = list(dict.fromkeys(correlations["signature"]))
    for frame in (agreement_table, ceiling, williams):
        if frame is not None and not frame.empty:
            stat_sigs += [s for s in dict.fromkeys(frame["signature"]) if s not in stat_sigs]
    sig_rows += [{"what": "statistic", "signature": s} for s in stat_sigs]
    if inputs:
        for kind, paths in inputs.items():
            for path in paths:
                p = Path(path)
                if p.exists():
                    sig_rows.append(
                        {"what": f"input {kind}", "signature": f"{p} sha256:{_sha256(p)}"}
                    )
    sig_rows.append({"what": "storyeval", "signature": __version__})
    signatures = pd.DataFrame(sig_rows)
    save_csv("signatures.csv", signatures)
    sig_section = Section("Signatures")
    sig_section.paragraphs.append(
        "Every number above was computed with these settings; the CSV files beside this page "
        "carry the signature of each row."
    )
    sig_section.tables.append(Table(signatures))
    sections.append(sig_section)
    if caught_warnings:
        warn_section = Section("Warnings")
        grouped = group_warnings(caught_warnings)
        warn_section.paragraphs.extend(grouped[:30])
        if len(grouped) > 30:
            warn_section.paragraphs.append(f"... and {len(grouped) - 30} more")
        sections.append(warn_section)

    write_text_atomic(directory / "index.html", render_html(title, sections))
    files["index.html"] = directory / "index.html"
    write_text_atomic(directory / "report.md", render_markdown(title, sections))
    files["report.md"] = directory / "report.md"
    return ReportResult(directory, files, caught_warnings)


def _plots() -> Any:
    from storyeval.report import plots

    return plots


__all__ = ["ReportResult", "build_report", "render_html", "render_markdown"]
