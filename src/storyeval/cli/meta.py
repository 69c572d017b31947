"""Meta-evaluation commands: correlate, compare, agreement, ceiling, discriminate, drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import (
    aggregate_option,
    check_choice,
    check_choices,
    criterion_option,
    judgments_option,
    metric_option,
    output_option,
    scores_option,
    stories_option,
    user_errors,
)
from storyeval.cli._tables import check_table_path, print_table, reported_warnings, write_table

drift_app = typer.Typer(
    help="Robustness of correlations: quality drift, subsets, dataset drift (Guan and Huang 2020, 4.4).",
    no_args_is_help=True,
)


def _load(
    scores: list[Path],
    judgments: list[Path],
    stories: Path | None,
    aggregate: str,
    metric: list[str] | None,
    criterion: list[str] | None,
    study: str | None,
    condition: str | None,
    fields: list[str] | None = None,
) -> Any:
    from storyeval.meta import load_meta_table
    from storyeval.meta.data import AGGREGATIONS

    check_choice(aggregate, AGGREGATIONS, "--aggregate")
    return load_meta_table(
        scores,
        judgments,
        stories=stories,
        aggregation=aggregate,
        metrics=metric or None,
        criteria=criterion or None,
        study=study,
        condition=condition,
        item_fields=fields or (),
    )


def _systems_only(table: Any, keep: list[str] | None, drop: list[str] | None) -> Any:
    """The table without the systems left out by ``--systems``/``--exclude-systems``."""
    import numpy as np

    if not keep and not drop:
        return table
    systems = table.items["system"]
    known = set(systems.dropna())
    for name in [*(keep or []), *(drop or [])]:
        if name not in known:
            raise ValueError(
                f"no item of system {name!r}; systems: {', '.join(sorted(map(str, known)))}"
            )
    mask = np.ones(len(systems), dtype=bool)
    if keep:
        mask &= systems.isin(keep).to_numpy()
    if drop:
        mask &= ~systems.isin(drop).to_numpy()
    if not mask.any():
        raise ValueError("the system filters leave no item")
    return table.subset(mask)


PPI_JUDGE = typer.Option(
    None,
    "--ppi-judge",
    help="A judge's judgments of every scored story (people's being a random subset): also "
    "each correlation by the prediction-powered bootstrap (Zrnic 2024), to OUT-ppi.",
)


def correlate_command(
    scores: list[Path] = scores_option(),
    judgments: list[Path] = judgments_option(),
    output: Path = output_option(),
    stories: Path = stories_option(),
    level: list[str] = typer.Option(
        None,
        "--level",
        "-l",
        help="pooled, story, system or within_system (repeat; default: the first three).",
    ),
    method: list[str] = typer.Option(
        None,
        "--method",
        "-m",
        help="pearson, spearman or kendall (repeat; default: all three); acc_eq: pairwise "
        "accuracy with tie calibration (Deutsch et al. 2023); spa: soft pairwise accuracy "
        "(Thompson et al. 2024; system level).",
    ),
    kendall_variant: str = typer.Option("b", "--kendall-variant", help="Kendall tau-b or tau-c."),
    aggregate: str = aggregate_option(),
    metric: list[str] = metric_option(),
    criterion: list[str] = criterion_option(),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap replicates (0: no interval)."),
    confidence: float = typer.Option(0.95, "--confidence", help="Interval coverage."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    adjust: str = typer.Option(
        "none", "--adjust", help="Multiple-comparison correction: none, bh, bonferroni, holm."
    ),
    study: str = typer.Option(None, "--study", help="Only judgments of this study."),
    condition: str = typer.Option(None, "--condition", help="Only judgments of this condition."),
    systems: list[str] = typer.Option(
        None, "--systems", help="Only these systems (repeat); e.g. leave the human stories out."
    ),
    exclude_systems: list[str] = typer.Option(
        None, "--exclude-systems", help="Leave these systems out (repeat), e.g. human."
    ),
    ppi_judge: Path = PPI_JUDGE,
) -> None:
    """Correlate every metric with every human criterion at the pooled, story and system levels.

    Story level: within each prompt across its systems, averaged over prompts (the bootstrap
    resamples prompts). System level: over per-system means. Within-system level (asked for
    with --level within_system): within each system across its stories, averaged over
    systems. Writes one row per metric x criterion x level x method with estimate, p_value,
    ci_low, ci_high, n.
    """
    from storyeval.meta import ALL_LEVELS, LEVELS, METHODS, adjust_pvalues, correlate
    from storyeval.meta.levels import available_levels
    from storyeval.meta.significance import CORRECTIONS
    from storyeval.meta.tie_accuracy import PAIRWISE_METHODS

    check_table_path(output)
    levels = check_choices(level or list(LEVELS), ALL_LEVELS, "--level")
    methods = check_choices(method or list(METHODS), (*METHODS, *PAIRWISE_METHODS), "--method")
    if "spa" in methods and level and "system" not in levels:
        raise typer.BadParameter(
            "spa is a system-level statistic: add --level system", param_hint="--method"
        )
    check_choice(kendall_variant, ("b", "c"), "--kendall-variant")
    check_choice(adjust, ("none", *CORRECTIONS), "--adjust")
    with user_errors(), reported_warnings():
        table = _load(scores, judgments, stories, aggregate, metric, criterion, study, condition)
        table = _systems_only(table, systems, exclude_systems)
        if not level:  # the default: every level the data support, a note for the others
            levels, notes = available_levels(table, levels, stories_given=bool(stories))
            for note in notes:
                typer.echo(f"note: {note}", err=True)
        result = correlate(
            table,
            levels=levels,
            methods=methods,
            kendall_variant=kendall_variant,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
        )
        if adjust != "none":
            result = adjust_pvalues(result, method=adjust, by=["level", "method"])
    write_table(result, output)
    print_table(result, ["metric", "criterion", "level", "method", "estimate [ci]", "p", "n"])
    typer.echo(f"wrote {len(result)} rows to {output}")
    if ppi_judge is not None:
        _ppi_correlations(scores, judgments, ppi_judge, output, methods, n_boot, confidence, seed)
    for sig in dict.fromkeys(result["signature"]):
        typer.echo(f"signature: {sig}")
    for name, sigs in table.metric_signatures.items():
        typer.echo(f"metric {name}: {'; '.join(sigs) or '(no signature)'}")


def _ppi_correlations(
    scores: list[Path], judgments: list[Path], judge: Path, output: Path,
    methods: list[str], n_boot: int, confidence: float, seed: int,
) -> None:  # fmt: skip
    """``correlate --ppi-judge``: every correlation by the prediction-powered bootstrap."""
    import pandas as pd

    from storyeval.corpus import read_judgments, read_scores
    from storyeval.meta.ppi import ppi_correlations

    def frame(records: list[Any]) -> pd.DataFrame:
        return pd.DataFrame(
            [{"item_id": r.item_id, "criterion": r.criterion, "value": r.value} for r in records]
        )

    with user_errors():
        score_rows = [
            {"item_id": s.item_id, "metric": s.metric, "value": s.value}
            for path in scores for s in read_scores(path)
        ]  # fmt: skip
        people = frame([j for path in judgments for j in read_judgments(path)])
        plain = [m for m in methods if m in ("pearson", "spearman", "kendall")]
        table = ppi_correlations(
            pd.DataFrame(score_rows), people, frame(read_judgments(judge)), methods=plain,
            n_boot=n_boot, confidence=confidence, seed=seed,
        )  # fmt: skip
        target = output.with_name(f"{output.stem}-ppi{output.suffix}")
        write_table(table, target)
    shown = [
        "metric",
        "criterion",
        "method",
        "estimate",
        "ci_low",
        "ci_high",
        "classical_ci_low",
        "classical_ci_high",
        "lam",
    ]
    typer.echo("prediction-powered correlations (the classical columns: people alone):")
    typer.echo(table[shown].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    typer.echo(f"wrote {target}")


def compare_command(
    scores: list[Path] = scores_option(),
    judgments: list[Path] = judgments_option(),
    output: Path = output_option(),
    stories: Path = stories_option(),
    criterion: list[str] = criterion_option(),
    metric: list[str] = typer.Option(None, "--metric", help="Only these metrics (repeat, >= 2)."),
    method: str = typer.Option(
        "spearman",
        "--method",
        "-m",
        help="pearson, spearman or kendall (Williams tests); acc_eq: tie-calibrated pairwise "
        "accuracy (paired permutation test, swapping per prompt).",
    ),
    level: str = typer.Option(
        "pooled", "--level", "-l", help="pooled or system (acc_eq: also story, within_system)."
    ),
    alternative: str = typer.Option(
        "greater", "--alternative", help="greater (A correlates more than B), two-sided, less."
    ),
    adjust: str = typer.Option(
        "bh", "--adjust", help="Correction per criterion: none, bh, bonferroni, holm."
    ),
    aggregate: str = aggregate_option(),
    systems: list[str] = typer.Option(
        None, "--systems", help="Only these systems (repeat); e.g. leave the human stories out."
    ),
    exclude_systems: list[str] = typer.Option(
        None, "--exclude-systems", help="Leave these systems out (repeat), e.g. human."
    ),
    lower_is_better: list[str] = typer.Option(
        None,
        "--lower-is-better",
        help="A metric where lower is better, negated before the test (repeat; registered "
        "metrics declare theirs).",
    ),
) -> None:
    """Williams tests: does metric A correlate with people more strongly than metric B? Each
    metric is oriented so that higher is better (perplexity and other lower-is-better metrics
    negated)."""
    from storyeval.meta import METHODS, compare_metrics
    from storyeval.meta.significance import ALTERNATIVES, CORRECTIONS

    check_table_path(output)
    check_choice(method, (*METHODS, "acc_eq"), "--method")
    acc_levels = ("pooled", "story", "system", "within_system")
    check_choice(level, acc_levels if method == "acc_eq" else ("pooled", "system"), "--level")
    check_choice(alternative, ALTERNATIVES, "--alternative")
    check_choice(adjust, ("none", *CORRECTIONS), "--adjust")
    with user_errors(), reported_warnings():
        table = _load(scores, judgments, stories, aggregate, None, criterion, None, None)
        table = _systems_only(table, systems, exclude_systems)
        result = compare_metrics(
            table,
            metrics=metric or None,
            method=method,
            level=level,
            alternative=alternative,
            correction=None if adjust == "none" else adjust,
            lower_is_better=lower_is_better or (),
        )
    write_table(result, output)
    columns = ["criterion", "metric_a", "metric_b", "r_a", "r_b", "statistic", "p", "n"]
    if "p_adjusted" in result.columns:
        columns.append("p_adjusted")
    print_table(result.round({"r_a": 3, "r_b": 3, "statistic": 3, "p_adjusted": 4}), columns)
    typer.echo(f"wrote {len(result)} rows to {output}")
    if not result.empty:
        typer.echo(f"signature: {result['signature'].iloc[0]}")


def agreement_command(
    judgments: list[Path] = judgments_option(),
    output: Path = output_option(),
    criterion: list[str] = criterion_option(),
    statistic: list[str] = typer.Option(
        None, "--statistic", help="alpha, fleiss, icc, full_agreement (repeat; default: all)."
    ),
    alpha_level: list[str] = typer.Option(
        None, "--alpha-level", help="nominal, ordinal, interval (repeat; default: all)."
    ),
    n_boot: int = typer.Option(1000, "--n-boot", help="Bootstrap replicates for alpha and kappa."),
    confidence: float = typer.Option(0.95, "--confidence"),
    seed: int = typer.Option(0, "--seed"),
    study: str = typer.Option(None, "--study", help="Only judgments of this study."),
    condition: str = typer.Option(None, "--condition", help="Only judgments of this condition."),
) -> None:
    """Inter-rater agreement per criterion: Krippendorff's alpha, Fleiss' kappa, ICC, % full agreement."""
    from storyeval.meta import agreement, describe_ratings
    from storyeval.meta.agreement import AGREEMENT_STATISTICS, ALPHA_LEVELS
    from storyeval.meta.data import filter_judgments, read_judgment_files

    check_table_path(output)
    stats = check_choices(
        statistic or list(AGREEMENT_STATISTICS), AGREEMENT_STATISTICS, "--statistic"
    )
    levels = check_choices(alpha_level or list(ALPHA_LEVELS), ALPHA_LEVELS, "--alpha-level")
    with user_errors(), reported_warnings():
        records = filter_judgments(read_judgment_files(judgments), study=study, condition=condition)
        result = agreement(
            records,
            criteria=criterion or None,
            statistics=stats,
            alpha_levels=levels,
            n_boot=n_boot,
            confidence=confidence,
            seed=seed,
        )
        summary = describe_ratings(records)
    write_table(result, output)
    typer.echo(summary.round(3).to_string(index=False))
    print_table(result, ["criterion", "method", "estimate [ci]", "n", "n_raters"], limit=60)
    typer.echo(f"wrote {len(result)} rows to {output}")


CEILING_AGGREGATE = typer.Option(
    "mean",
    "--aggregate",
    help="What each rater is compared with: mean (of the others), or the others' label under a "
    "competence model fitted without the rater: mace, dawid-skene, ordinal (its posterior "
    "uncertainty carried into the intervals, as correlate --aggregate does).",
)


def ceiling_command(
    judgments: list[Path] = judgments_option(),
    output: Path = output_option(),
    stories: Path = stories_option(),
    level: list[str] = typer.Option(
        None, "--level", "-l", help="pooled, story, system (repeat; default: pooled)."
    ),
    method: list[str] = typer.Option(
        None, "--method", "-m", help="pearson, spearman, kendall (repeat; default: all)."
    ),
    criterion: list[str] = criterion_option(),
    min_items: int = typer.Option(
        10, "--min-items", help="Skip raters sharing fewer items with the others."
    ),
    n_boot: int = typer.Option(1000, "--n-boot"),
    seed: int = typer.Option(0, "--seed"),
    aggregate: str = CEILING_AGGREGATE,
) -> None:
    """The human ceiling: each rater against the mean of the other raters (or their label
    under a competence model fitted without the rater, its uncertainty in the intervals)."""
    from storyeval.corpus import read_stories
    from storyeval.meta import LEVELS, METHODS, human_ceiling
    from storyeval.meta.data import item_info, judgments_frame, read_judgment_files

    check_table_path(output)
    levels = check_choices(level or ["pooled"], LEVELS, "--level")
    methods = check_choices(method or list(METHODS), METHODS, "--method")
    check_choice(aggregate, ("mean", "mace", "dawid-skene", "ordinal"), "--aggregate")
    with user_errors(), reported_warnings():
        frame = judgments_frame(read_judgment_files(judgments))
        story_records = read_stories(stories) if stories is not None else None
        import pandas as pd

        items = item_info(
            pd.DataFrame(columns=["item_id"]),
            frame,
            story_records,
            sorted(set(frame["item_id"])),
            (),
        )
        result = human_ceiling(
            frame,
            items=items,
            criteria=criterion or None,
            levels=levels,
            methods=methods,
            min_items=min_items,
            n_boot=n_boot,
            seed=seed,
            aggregation=aggregate,
        )
    write_table(result, output)
    print_table(result, ["rater", "criterion", "level", "method", "estimate [ci]", "n"], limit=60)
    typer.echo(f"wrote {len(result)} rows to {output}")


def discriminate_command(
    scores: list[Path] = scores_option(),
    output: Path = output_option(),
    pairs: Path = typer.Option(
        None,
        "--pairs",
        help="Pair file (.jsonl/.csv) with original_id, altered_id [, other columns].",
    ),
    perturbed: Path = typer.Option(
        None, "--perturbed", help="Output of `storyeval perturb` (id, source_id, techniques)."
    ),
    altered_scores: Path = typer.Option(
        None, "--altered-scores", help="Scores of the altered stories under the original ids."
    ),
    by: str = typer.Option(None, "--by", help="Break down by this pair column (e.g. techniques)."),
    lower_is_better: list[str] = typer.Option(
        None, "--lower-is-better", help="A metric where lower is better (repeat)."
    ),
    metric: list[str] = metric_option(),
    confidence: float = typer.Option(0.95, "--confidence"),
    tie_tolerance: float = typer.Option(
        0.0, "--tie-tolerance", help="Score differences up to this are ties."
    ),
) -> None:
    """Discrimination test: how often does each metric score the original above the altered story?"""
    from storyeval.meta import (
        discrimination,
        pairs_from_perturbations,
        pairs_from_score_files,
        read_pairs,
    )
    from storyeval.meta.data import read_score_files

    check_table_path(output)
    sources = [x for x in (pairs, perturbed, altered_scores) if x is not None]
    if len(sources) != 1:
        raise typer.BadParameter(
            "give exactly one of --pairs, --perturbed, --altered-scores", param_hint="--pairs"
        )
    if altered_scores is not None and len(scores) != 1:
        raise typer.BadParameter("--altered-scores pairs with exactly one --scores file")
    if perturbed is not None and by is None:
        by = "techniques"
    with user_errors(), reported_warnings():
        if altered_scores is not None:
            pair_frame, records = pairs_from_score_files(scores[0], altered_scores)
        else:
            pair_frame = (
                read_pairs(pairs) if pairs is not None else pairs_from_perturbations(perturbed)
            )
            records = read_score_files(scores)
        result = discrimination(
            records,
            pair_frame,
            metrics=metric or None,
            lower_is_better=lower_is_better or (),
            by=by,
            confidence=confidence,
            tie_tolerance=tie_tolerance,
        )
    write_table(result, output)
    print_table(
        result,
        ["metric", "group", "direction", "n_pairs", "wins", "ties", "losses", "estimate [ci]", "p"],
        limit=60,
    )
    typer.echo(f"wrote {len(result)} rows to {output}")
    if not result.empty:
        typer.echo(f"signature: {result['signature'].iloc[0]}")


@drift_app.command("quality")
def drift_quality(
    scores: list[Path] = scores_option(),
    judgments: list[Path] = judgments_option(),
    criterion: str = typer.Option(..., "--criterion", help="The human score that defines quality."),
    output: Path = output_option(),
    composition: Path = typer.Option(
        None, "--composition", help="Also write the set composition (set, level, probability) here."
    ),
    stories: Path = stories_option(),
    levels: int = typer.Option(
        None, "--levels", help="K: quality levels 0..K (default: inferred)."
    ),
    low: float = typer.Option(
        None, "--low", help="Low end of the human scale (default: observed min)."
    ),
    high: float = typer.Option(
        None, "--high", help="High end of the human scale (default: observed max)."
    ),
    sets: str = typer.Option(
        None, "--sets", help="Set indices, e.g. 1-8 or 1,3,5 (default: 1..K+1)."
    ),
    repeats: int = typer.Option(20, "--repeats", help="Independent samplings of each set."),
    method: list[str] = typer.Option(
        None, "--method", "-m", help="Correlation (repeat; default pearson)."
    ),
    aggregate: str = aggregate_option(),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Quality drift: correlations on biased sets, set I keeping level k with p = 1/(|I-k|+1)."""
    from storyeval.meta import METHODS, quality_drift

    check_table_path(output)
    if composition is not None:
        check_table_path(composition)
    methods = check_choices(method or ["pearson"], METHODS, "--method")
    set_list = _parse_sets(sets) if sets else None
    with user_errors(), reported_warnings():
        table = _load(scores, judgments, stories, aggregate, None, [criterion], None, None)
        result, comp = quality_drift(
            table,
            criterion=criterion,
            methods=methods,
            n_levels=levels,
            low=low,
            high=high,
            sets=set_list,
            repeats=repeats,
            seed=seed,
        )
    write_table(result, output)
    if composition is not None:
        write_table(comp, composition)
    shown = result.round({"estimate": 3, "sd": 3, "min": 3, "max": 3, "n": 1})
    typer.echo(
        shown[["metric", "set", "method", "estimate", "sd", "min", "max", "n"]].to_string(
            index=False
        )
    )
    typer.echo(f"wrote {len(result)} rows to {output}")
    typer.echo(f"signature: {result['signature'].iloc[0]}")


def _parse_sets(text: str) -> list[int]:
    try:
        if "-" in text and "," not in text:
            first, last = (int(p) for p in text.split("-", 1))
            return list(range(first, last + 1))
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise typer.BadParameter(
            f"expected e.g. 1-8 or 1,3,5; got {text!r}", param_hint="--sets"
        ) from None


@drift_app.command("subsets")
def drift_subsets(
    scores: list[Path] = scores_option(),
    judgments: list[Path] = judgments_option(),
    by: str = typer.Option(
        ..., "--by", help="An item column: system, prompt_id, or a story field."
    ),
    output: Path = output_option(),
    stories: Path = stories_option(),
    include_with_each: str = typer.Option(
        None, "--include-with-each", help="A value whose items join every other subset."
    ),
    level: list[str] = typer.Option(None, "--level", "-l", help="Levels (repeat; default pooled)."),
    method: list[str] = typer.Option(
        None, "--method", "-m", help="Methods (repeat; default pearson)."
    ),
    min_items: int = typer.Option(3, "--min-items"),
    aggregate: str = aggregate_option(),
    n_boot: int = typer.Option(1000, "--n-boot"),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Correlations within the subsets defined by a column (error type, system, dataset...)."""
    from storyeval.meta import LEVELS, METHODS, subset_correlations

    check_table_path(output)
    levels = check_choices(level or ["pooled"], LEVELS, "--level")
    methods = check_choices(method or ["pearson"], METHODS, "--method")
    fields = [] if by in ("system", "prompt_id") else [by]
    with user_errors(), reported_warnings():
        table = _load(scores, judgments, stories, aggregate, None, None, None, None, fields)
        result = subset_correlations(
            table,
            by,
            include_with_each=include_with_each,
            levels=levels,
            methods=methods,
            min_items=min_items,
            n_boot=n_boot,
            seed=seed,
        )
    write_table(result, output)
    print_table(
        result,
        ["subset", "metric", "criterion", "level", "method", "estimate [ci]", "p", "n"],
        limit=60,
    )
    typer.echo(f"wrote {len(result)} rows to {output}")


@drift_app.command("dataset")
def drift_dataset(
    spec: Path = typer.Argument(
        ..., help="CSV/JSONL listing runs: train, test, scores, judgments [, stories]."
    ),
    output: Path = output_option(),
    method: list[str] = typer.Option(
        None, "--method", "-m", help="Methods (repeat; default: all)."
    ),
    criterion: list[str] = criterion_option(),
    aggregate: str = aggregate_option(),
    n_boot: int = typer.Option(1000, "--n-boot"),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Dataset drift: metrics trained on one corpus and tested on another, beside in-domain."""
    from storyeval.meta import METHODS, dataset_drift, load_drift_runs

    check_table_path(output)
    methods = check_choices(method or list(METHODS), METHODS, "--method")
    with user_errors(), reported_warnings():
        runs = load_drift_runs(spec, aggregation=aggregate, criteria=criterion or None)
        result = dataset_drift(
            runs, methods=methods, n_boot=n_boot, seed=seed, criteria=criterion or None
        )
    write_table(result, output)
    print_table(
        result,
        ["train", "test", "metric", "criterion", "method", "estimate [ci]", "p", "n"],
        limit=60,
    )
    typer.echo(f"wrote {len(result)} rows to {output}")


def register(app: typer.Typer) -> None:
    """Add the meta-evaluation commands (correlate, agreement, compare, discriminate, drift) to the application."""
    panel = "Meta-evaluation"
    app.command("correlate", rich_help_panel=panel)(correlate_command)
    app.command("compare", rich_help_panel=panel)(compare_command)
    app.command("agreement", rich_help_panel=panel)(agreement_command)
    app.command("ceiling", rich_help_panel=panel)(ceiling_command)
    app.command("discriminate", rich_help_panel=panel)(discriminate_command)
    app.add_typer(drift_app, name="drift", rich_help_panel=panel)
