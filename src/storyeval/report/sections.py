"""The sections of the meta-evaluation report, each built from :class:`ReportData`; files a
section shows (CSVs, figures) are written through :class:`ReportFiles`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from storyeval import __version__
from storyeval.base.io import write_bytes_atomic, write_text_atomic
from storyeval.report.compute import ReportData
from storyeval.report.render import (
    Figure,
    Section,
    Table,
    estimate_cell,
    fmt,
    fmt_p,
    group_warnings,
    sha256,
    slug,
)

SHOWN_WARNINGS = 30


@dataclass
class ReportFiles:
    """The report's directory and every file written into it (each atomically)."""

    directory: Path
    files: dict[str, Path] = field(default_factory=dict)

    def csv(self, name: str, frame: pd.DataFrame) -> None:
        """Write a table as ``name``."""
        path = self.directory / name
        write_text_atomic(path, frame.to_csv(index=False))
        self.files[name] = path

    def png(self, name: str, data: bytes) -> str:
        """Write a figure under ``figures/``; returns its path relative to the report."""
        path = self.directory / "figures" / name
        write_bytes_atomic(path, data)
        self.files[f"figures/{name}"] = path
        return f"figures/{name}"

    def text(self, name: str, text: str) -> None:
        """Write a page as ``name``."""
        write_text_atomic(self.directory / name, text)
        self.files[name] = self.directory / name


def _plots() -> Any:
    from storyeval.base import plots

    return plots


def _formatted(frame: pd.DataFrame, columns: Sequence[str], digits: int = 3) -> pd.DataFrame:
    shown = frame.copy()
    for column in columns:
        shown[column] = shown[column].map(lambda v: fmt(v, digits))
    return shown


# --------------------------------------------------------------------------- data


def overview_section(data: ReportData, out: ReportFiles) -> Section:
    """The data: items, systems, raters, and the mean metric value and rating per system."""
    table = data.table
    coverage = table.coverage
    systems = table.items["system"].fillna("(unknown)").value_counts().sort_index()
    section = Section("Data")
    section.paragraphs.append(
        f"{len(table.items)} items with both metric scores and human judgments "
        f"({coverage.get('items_scored', 0)} scored, {coverage.get('items_judged', 0)} "
        f"judged); {len(table.metric_names)} metric(s), {len(table.criteria)} criterion/criteria, "
        f"{coverage.get('raters', 0)} rater(s), {coverage.get('judgments', 0)} "
        f"judgments; ratings aggregated by {table.aggregation}; "
        f"{int(table.items['prompt_id'].nunique())} prompts."
    )
    section.paragraphs.extend(data.notes)
    counts = pd.DataFrame({"system": systems.index, "items": systems.to_numpy()})
    section.tables.append(Table(counts, "Items per system"))
    if table.has_systems:
        means = pd.concat([table.metrics, table.human], axis=1)
        grouped = means.groupby(table.items["system"]).mean().reset_index()
        out.csv("system_means.csv", grouped)
        shown = _formatted(grouped, grouped.columns[1:])
        section.tables.append(Table(shown, "Mean metric value and mean human rating per system"))
    return section


# --------------------------------------------------------------------------- people

AGREEMENT_TEXT = (
    "Agreement per criterion: Krippendorff's alpha at the nominal, ordinal and interval "
    "levels (krippendorff package), Fleiss' kappa (statsmodels; items with the modal "
    "number of ratings), intraclass correlations (pingouin; icc1 one-way random, icc2 "
    "two-way random absolute agreement, icc3 two-way mixed consistency, k = the mean of "
    "k raters; items rated by every rater) and the percentage of items on which all "
    "ratings agree, as Karpinska et al. (2021) report beside alpha."
)


def _agreement_table(agreement: pd.DataFrame, n_raters: int, confidence: float) -> Table:
    cells = [estimate_cell(r, stars=False) for r in agreement.to_dict("records")]
    pivot = agreement.assign(cell=cells)
    full = agreement["method"] == "percent_full_agreement"
    pivot.loc[full, "cell"] = agreement.loc[full, "estimate"].map(lambda v: fmt(v, 1) + "%")
    wide = pivot.pivot(index="method", columns="criterion", values="cell")
    wide = wide.reindex(list(dict.fromkeys(agreement["method"])))
    caption = (
        f"Agreement among {n_raters} raters: estimate [{int(confidence * 100)}% interval]; "
        "alpha and kappa intervals bootstrap items; ICC intervals are F-based"
    )
    return Table(wide.reset_index(), caption)


def _ceiling_table(ceiling: pd.DataFrame) -> Table | None:
    summary = ceiling[ceiling["rater"] == "mean"]
    if summary.empty:
        return None
    wide = summary.assign(cell=summary["estimate"].map(fmt)).pivot_table(
        index=["level", "method"], columns="criterion", values="cell", aggfunc="first"
    )
    return Table(
        wide.reset_index(),
        "Human ceiling: each rater against the mean of the others, averaged over "
        "raters (per-rater values with intervals in ceiling.csv)",
    )


def human_section(data: ReportData, out: ReportFiles) -> Section:
    """Ratings per criterion, agreement among raters and the human ceiling."""
    from storyeval.meta import describe_ratings

    section = Section("Human judgments: agreement and ceiling")
    ratings = describe_ratings(data.judgments) if not data.judgments.empty else pd.DataFrame()
    if not ratings.empty:
        out.csv("ratings.csv", ratings)
        section.tables.append(
            Table(_formatted(ratings, ["mean", "sd"]), "Ratings per criterion (all ratings)")
        )
    if data.agreement is not None:
        section.paragraphs.append(AGREEMENT_TEXT)
        out.csv("agreement.csv", data.agreement)
        section.tables.append(
            _agreement_table(data.agreement, data.n_raters, data.settings.confidence)
        )
    else:
        section.paragraphs.append(
            "Agreement and the human ceiling need two or more raters with individual ratings; "
            f"these judgments have {data.n_raters} (aggregated ratings with rater_id 'mean' are "
            "not individual raters)."
        )
    if data.ceiling is not None and not data.ceiling.empty:
        out.csv("ceiling.csv", data.ceiling)
        table = _ceiling_table(data.ceiling)
        if table is not None:
            section.tables.append(table)
    return section


# --------------------------------------------------------------------------- correlations

CORRELATION_TEXT = (
    "Cells: estimate [bootstrap interval]; * and ** mark Benjamini-Hochberg adjusted p < .05 "
    "and < .01 (one family per level and method). Pooled: over all items, items resampled. "
    "Story: within each prompt across systems, averaged over prompts, prompts resampled, "
    "sign-flip p-value. System: over per-system means, prompts resampled; with few systems "
    "these intervals and p-values are wide by necessity. The last heatmap row is the human "
    "ceiling."
)
WITHIN_SYSTEM_TEXT = (
    " Within system: within each system across its stories, averaged over systems (a metric "
    "that only tells the systems apart is near zero here), stories resampled within systems, "
    "permutation p-value."
)


def _sizes(sub: pd.DataFrame, level: str) -> str:
    if level == "story":
        return (
            f"; prompts used {fmt(sub['n_groups'].min())}-{fmt(sub['n_groups'].max())}, "
            f"skipped {fmt(sub['skipped'].min())}-{fmt(sub['skipped'].max())}"
        )
    if level == "system":
        return f"; systems {fmt(sub['n'].max())}"
    return f"; items {fmt(sub['n'].min())}-{fmt(sub['n'].max())}"


def _correlation_tables(data: ReportData) -> list[Table]:
    tables = []
    correlations = data.correlations
    for level in data.settings.levels:
        for method in data.settings.methods:
            sub = correlations[
                (correlations["level"] == level) & (correlations["method"] == method)
            ]
            if sub.empty:
                continue
            cells = sub.assign(cell=[estimate_cell(r) for r in sub.to_dict("records")])
            wide = cells.pivot(index="metric", columns="criterion", values="cell")
            wide = wide.reindex(index=data.table.metric_names, columns=data.table.criteria)
            caption = f"{method}, {level} level{_sizes(sub, level)}"
            tables.append(Table(wide.reset_index(), caption))
    return tables


def correlation_section(data: ReportData, out: ReportFiles) -> Section:
    """Heatmaps and tables of the metric-human correlations at each level."""
    section = Section("Correlation of metrics with human judgments")
    within = "within_system" in data.settings.levels
    section.paragraphs.append(CORRELATION_TEXT + (WITHIN_SYSTEM_TEXT if within else ""))
    out.csv("correlations.csv", data.correlations)
    for method in data.settings.methods:
        image = _plots().correlation_heatmaps(
            data.correlations,
            method=method,
            levels=list(data.settings.levels),
            metrics=data.table.metric_names,
            criteria=data.table.criteria,
            ceiling=data.ceiling,
        )
        name = out.png(f"heatmap_{method}.png", image)
        section.figures.append(Figure(name, f"{method} correlation heatmap"))
    section.tables.extend(_correlation_tables(data))
    return section


def matrix_section(data: ReportData, out: ReportFiles) -> Section:
    """The correlation matrix of criteria and metrics (Callan & Foster 2023, Table 2)."""
    method = data.matrix_method
    section = Section("Correlation matrix of criteria and metrics")
    section.paragraphs.append(
        f"{method.capitalize()} correlations at the pooled level between every pair of "
        "human criteria and metrics, laid out like Callan & Foster (2023), Table 2."
    )
    out.csv("matrix.csv", data.matrix.reset_index().rename(columns={"index": "variable"}))
    image = _plots().matrix_heatmap(data.matrix, title=f"{method}, pooled")
    section.figures.append(Figure(out.png("matrix.png", image), "correlation matrix"))
    shown = data.matrix.map(lambda v: fmt(v, 2)).reset_index().rename(columns={"index": ""})
    section.tables.append(Table(shown))
    return section


def _scatter_labels(data: ReportData, metrics: Sequence[str], criterion: str) -> dict[str, str]:
    first = data.settings.methods[0]
    correlations = data.correlations
    pooled = correlations[(correlations["level"] == "pooled") & (correlations["method"] == first)]
    lookup = {(r["metric"], r["criterion"]): r for r in pooled.to_dict("records")}
    labels = {}
    for metric in metrics:
        record = lookup.get((metric, criterion))
        labels[metric] = f"{first} {fmt(record['estimate'], 2)} (n={record['n']})" if record else ""
    return labels


def scatter_section(data: ReportData, out: ReportFiles, per_figure: int) -> Section:
    """Every metric against every criterion, points coloured by system."""
    section = Section("Metric scores against human ratings")
    metrics = data.table.metric_names
    chunks = [metrics[i : i + per_figure] for i in range(0, len(metrics), per_figure)]
    counter = 0
    for criterion in data.table.criteria:
        for chunk in chunks:
            counter += 1
            image = _plots().scatter_grid(
                data.table.metrics[chunk],
                data.table.human[criterion],
                data.table.items["system"],
                criterion=criterion,
                stats=_scatter_labels(data, chunk, criterion),
            )
            name = out.png(f"scatter_{counter:02d}_{slug(criterion)}.png", image)
            section.figures.append(Figure(name, f"metrics against {criterion}"))
    return section


WILLIAMS_COLUMNS = ("criterion", "metric_a", "metric_b", "r_a", "r_b", "r_ab", "statistic")


def _lower_names(williams: Any) -> str:
    """The negated metrics of a Williams table, for the report's text."""
    if "direction_a" not in williams.columns:
        return "none"
    lower = williams.loc[williams["direction_a"] == "lower", "metric_a"]
    return ", ".join(sorted(set(lower))) or "none"


def williams_section(data: ReportData, out: ReportFiles) -> Section:
    """Williams tests between metrics, per criterion."""
    section = Section("Comparing metrics (Williams test)")
    williams = data.williams
    if williams is None or williams.empty:
        section.paragraphs.append("The Williams test compares two or more metrics; there is one.")
        return section
    out.csv("williams.csv", williams)
    significant = williams[williams["p_adjusted"] < 0.05]
    section.paragraphs.append(
        f"For each criterion and ordered pair of metrics, a one-sided Williams test that the "
        f"first correlates more strongly ({data.williams_method}, pooled) than the second, with "
        "Benjamini-Hochberg adjustment per criterion. Each metric is oriented so that higher "
        "is better: those declared lower-is-better are negated before the correlations "
        f"({_lower_names(williams)}), so a metric is not judged worse for the sign of its "
        "correlation. All pairs are in williams.csv; "
        f"{len(significant)} of {len(williams)} are significant at .05."
    )
    if not significant.empty:
        shown = _formatted(
            significant[[*WILLIAMS_COLUMNS, "p_adjusted", "n"]], ["r_a", "r_b", "r_ab", "statistic"]
        )
        shown["p_adjusted"] = significant["p_adjusted"].map(fmt_p)
        section.tables.append(Table(shown, "Significant differences (adjusted p < .05)"))
    return section


def robustness_section(directory: str | Path, out: ReportFiles) -> Section:
    """The robustness tests of ``storyeval robustness`` (a directory it wrote): the heatmap,
    the discrimination and invariance tables and their signature."""
    from storyeval.analyses.robustness import read_robustness

    result = read_robustness(directory)
    section = Section("Robustness of metrics")
    section.paragraphs.append(
        "From `storyeval robustness` (OpenMEVA's tests). Discrimination: the share of "
        "(original, altered) pairs where the metric prefers the original (0.5 is chance). "
        "Invariance: the share of stories a quality-preserving change moved by more than the "
        "tolerance (0 is robust), and the mean change."
    )
    heatmap = Path(directory) / "robustness.png"
    if heatmap.is_file():
        image = out.png("robustness.png", heatmap.read_bytes())
        section.figures.append(Figure(image, "robustness heatmap"))
    if len(result.discrimination):
        out.csv("robustness_discrimination.csv", result.discrimination)
        shown = result.discrimination.copy()
        shown["preferred original [ci]"] = [
            estimate_cell(r, "p_value", stars=False) for r in shown.to_dict("records")
        ]
        shown["p"] = shown["p_value"].map(fmt_p)
        columns = ["metric", "group", "n_pairs", "preferred original [ci]", "p"]
        section.tables.append(Table(shown[columns], "Discrimination"))
    if len(result.invariance):
        out.csv("robustness_invariance.csv", result.invariance)
        shown = result.invariance.rename(columns={"changed_share": "estimate"})
        shown["moved [ci]"] = [
            estimate_cell(r, "p_value", stars=False) for r in shown.to_dict("records")
        ]
        shown = _formatted(shown, ["mean_change", "mean_abs_change"])
        columns = ["metric", "test", "n_pairs", "moved [ci]", "mean_change", "mean_abs_change"]
        section.tables.append(Table(shown[columns], "Invariance"))
    signatures = [{"what": "robustness", "signature": result.signature.render()}]
    signatures += [
        {"what": f"metric {m}", "signature": s} for m, s in result.metric_signatures.items()
    ]
    section.tables.append(Table(pd.DataFrame(signatures), "Signatures of the robustness tests"))
    return section


def mauve_section(directory: str | Path, out: ReportFiles) -> Section:
    """MAUVE of each system against people (a ``storyeval mauve`` directory): the divergence
    curves, the table with intervals across k-means seeds, warnings and signatures."""
    from storyeval.analyses.distribution import read_mauve

    table = read_mauve(directory)
    section = Section("Distribution of the stories (MAUVE)")
    section.paragraphs.append(
        f"From `storyeval mauve`: each system's stories against the {table.reference!r} "
        "stories, MAUVE and MAUVE* (1: indistinguishable in feature space), the mean over "
        "k-means seeds with a t interval across seeds."
    )
    figure = Path(directory) / "divergence.png"
    if figure.is_file():
        section.figures.append(
            Figure(out.png("mauve_divergence.png", figure.read_bytes()), "divergence curves")
        )
    out.csv("mauve.csv", table.frame)
    shown = table.frame.copy()
    shown["estimate [ci]"] = [
        estimate_cell(r, "p_value", stars=False) for r in shown.to_dict("records")
    ]
    section.tables.append(Table(shown[["system", "statistic", "estimate [ci]", "n"]], "MAUVE"))
    section.paragraphs.extend(f"Warning: {note}" for note in table.notes)
    rows = [{"what": name, "signature": signature} for name, signature in table.signatures.items()]
    if rows:
        section.tables.append(Table(pd.DataFrame(rows), "Signatures of MAUVE"))
    return section


def judge_audit_section(directory: str | Path, out: ReportFiles) -> Section:
    """A judge's audit (a ``storyeval judge-audit`` directory): one verdict per check and
    criterion with its estimate and interval, what was not checked, and the signature."""
    from storyeval.judge.audit import read_audit

    audit = read_audit(directory)
    section = Section("Audit of the judge")
    section.paragraphs.append(
        "From `storyeval judge-audit`: whether the judge separates the systems, repeats "
        "itself, prefers the first story shown, rewards length beyond people's ratings, "
        "prefers its own model family's stories, scores a story lower when an error "
        "destroys it, and ignores edits that keep it."
    )
    if len(audit.checks):
        out.csv("judge_audit.csv", audit.checks)
        shown = audit.checks.copy()
        shown["estimate [ci]"] = [
            estimate_cell(r, "p_value", stars=False) for r in shown.to_dict("records")
        ]
        columns = ["check", "criterion", "statistic", "estimate [ci]", "n", "verdict"]
        section.tables.append(Table(shown[columns], "Checks"))
    section.paragraphs.extend(f"Not checked: {line}" for line in audit.skipped)
    if audit.signature is not None:
        rows = [{"what": "judge audit", "signature": audit.signature.render()}]
        section.tables.append(Table(pd.DataFrame(rows), "Signature of the audit"))
    return section


def curves_section(directory: str | Path, out: ReportFiles) -> Section:
    """Metrics along long stories (a ``storyeval curves`` directory): the figure, the
    segmentation and the signatures."""
    from storyeval.analyses.curves import read_curves

    table, signatures = read_curves(directory)
    section = Section("Along the stories (chapters and windows)")
    stories = table["item_id"].nunique()
    segments = table.groupby("item_id")["segment"].nunique()
    section.paragraphs.append(
        f"From `storyeval curves`: {stories} stories cut into {int(segments.sum())} chapters or "
        "windows, each scored with the previous one as its prompt; per system, the mean value "
        "in each tenth of the stories' length."
    )
    figure = Path(directory) / "curves.png"
    if figure.is_file():
        section.figures.append(Figure(out.png("curves.png", figure.read_bytes()), "curves"))
    out.csv("curves.csv", table)
    rows = [{"what": name, "signature": signature} for name, signature in signatures.items()]
    if rows:
        section.tables.append(Table(pd.DataFrame(rows), "Signatures of the curves"))
    return section


# --------------------------------------------------------------------------- provenance


def _signature_rows(
    data: ReportData, inputs: Mapping[str, Sequence[str | Path]] | None
) -> list[dict[str, str]]:
    table = data.table
    rows = [
        {"what": f"metric {m}", "signature": table.metric_signature(m) or "(none)"}
        for m in table.metric_names
    ]
    statistics = list(dict.fromkeys(data.correlations["signature"]))
    for frame in (data.agreement, data.ceiling, data.williams):
        if frame is not None and not frame.empty:
            statistics += [s for s in dict.fromkeys(frame["signature"]) if s not in statistics]
    rows += [{"what": "statistic", "signature": s} for s in statistics]
    for kind, paths in (inputs or {}).items():
        for path in map(Path, paths):
            if path.exists():
                rows.append({"what": f"input {kind}", "signature": f"{path} sha256:{sha256(path)}"})
    rows.append({"what": "storyeval", "signature": __version__})
    return rows


def signature_section(
    data: ReportData, out: ReportFiles, inputs: Mapping[str, Sequence[str | Path]] | None
) -> Section:
    """The signature of every metric and statistic, and the inputs' hashes."""
    signatures = pd.DataFrame(_signature_rows(data, inputs))
    out.csv("signatures.csv", signatures)
    section = Section("Signatures")
    section.paragraphs.append(
        "Every number above was computed with these settings; the CSV files beside this page "
        "carry the signature of each row."
    )
    section.tables.append(Table(signatures))
    return section


def warning_section(data: ReportData) -> Section | None:
    """The warnings raised while computing, grouped (None when there were none)."""
    if not data.warnings:
        return None
    section = Section("Warnings")
    grouped = group_warnings(data.warnings)
    section.paragraphs.extend(grouped[:SHOWN_WARNINGS])
    if len(grouped) > SHOWN_WARNINGS:
        section.paragraphs.append(f"... and {len(grouped) - SHOWN_WARNINGS} more")
    return section
