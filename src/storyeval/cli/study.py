"""``storyeval study``: check study files, create links, export, analyse, write statements."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from storyeval.cli._common import check_choice, exit_with, user_errors

if TYPE_CHECKING:
    from storyeval.human.study import Study

study_app = typer.Typer(
    help="Human evaluation studies: check, links, export, analyse, statement, simulate-adaptive.",
    no_args_is_help=True,
)


def _load(path: Path) -> Study:
    from storyeval.human.study import load_study

    return load_study(path)


@study_app.command("check")
def check(files: list[Path] = typer.Argument(..., help="Study files or folders of them.")) -> None:
    """Validate study files and print what each would run (exit 2 with FILE:LINE: key: reason)."""
    from storyeval.human.assign import participants_needed
    from storyeval.human.study import StudyFileError, iter_study_files

    failed = False
    for path in iter_study_files(files):
        try:
            study = _load(path)
        except StudyFileError as exc:
            failed = True
            for problem in exc.problems:
                typer.echo(problem, err=True)
            continue
        conditions = ", ".join(study.conditions)
        typer.echo(
            f"{path}: study {study.name!r} version {study.version}, protocol {study.protocol}, "
            f"{len(study.items)} items ({conditions}), {study.raters_per_item} rater(s) per item, "
            f"{study.items_per_participant} per participant (cap {study.max_items_per_participant}), "
            f"about {participants_needed(study)} participants, {len(study.training)} training example(s), "
            f"{len(study.checks)} attention check(s)"
        )
        for warning in _warnings(study):
            typer.echo(f"{path}: warning: {warning}", err=True)
    if failed:
        raise typer.Exit(2)


def _warnings(study: Study) -> list[str]:
    config = study.config
    notes = []
    machine = any((t.system or "") != "human" for item in study.items for t in item.texts)
    if machine and not config.content_warning:
        notes.append(
            "machine-generated texts but no content_warning (Karpinska et al. 2021 advises warning raters)"
        )
    if not study.training:
        notes.append(
            "no training examples (Clark 2021 found example-based training the most useful)"
        )
    if study.protocol not in ("triangle",) and study.raters_per_item < 3:
        notes.append("fewer than 3 raters per item")
    if study.protocol in ("likert", "side_by_side") and not all(
        c.definition for c in config.criteria
    ):
        notes.append("some criteria have no definition shown to raters")
    if study.protocol == "likert" and not any(
        t.system == "human" for i in study.items for t in i.texts
    ):
        notes.append(
            "no human-written stories are rated: Karpinska et al. (2021) rates references on the same scale, or use side_by_side"
        )
    return notes


@study_app.command("links")
def links(
    file: Path = typer.Argument(..., help="The study file."),
    db: str = typer.Option(..., "--db", help="Database URL (as given to storyeval serve)."),
    count: int = typer.Option(..., "-n", "--count", help="Number of links to create."),
    base_url: str = typer.Option(
        "http://localhost:8000", "--base-url", help="Public address of the server."
    ),
    output: Path = typer.Option(
        None, "-o", "--output", help="Write the links here (one per line)."
    ),
) -> None:
    """Create participant links in the study's database (the server need not be running)."""
    import time

    from storyeval.base.io import write_text_atomic
    from storyeval.server.db import Database
    from storyeval.server.participants import create_participants
    from storyeval.server.study_store import register_study

    study = _load(file)
    with user_errors():
        database = Database(db)
        database.create_all()
        now = time.time()
        register_study(database, study, now=now)
        created = database.run(
            lambda conn: create_participants(conn, "study", study.name, count, now=now)
        )
    urls = [f"{base_url.rstrip('/')}/p/{p.token}" for p in created]
    if output is not None:
        write_text_atomic(output, "".join(u + "\n" for u in urls))
        typer.echo(f"{len(urls)} links written to {output}")
    else:
        for url in urls:
            typer.echo(url)


@study_app.command("export")
def export(
    file: Path = typer.Argument(..., help="The study file."),
    db: str = typer.Option(..., "--db", help="Database URL (as given to storyeval serve)."),
    output: Path = typer.Option(..., "-o", "--output", help="Output directory."),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl or csv for the judgments."),
) -> None:
    """Export judgments (long format), free-text responses, participants and the study definition."""
    from storyeval.server.db import Database
    from storyeval.server.study_store import export_to_directory

    check_choice(fmt, ("jsonl", "csv"), "--format")
    study = _load(file)
    with user_errors():
        counts = export_to_directory(Database(db), study, output, fmt=fmt)
    for name, count in counts.items():
        typer.echo(f"{output / name}: {count} record(s)")


ANALYSE_JUDGMENTS = typer.Option(..., "--judgments", help="Long-format judgments (.jsonl or .csv).")
ANALYSE_MIN_MEDIAN_TIME = typer.Option(
    None,
    "--min-median-time",
    help="Remove raters whose median time per item is below this many seconds (Karpinska et al. 2021 used 40). "
    "Default: the study's quality.min_median_time_s with --study, otherwise no time filter "
    "(the report then counts the raters below 40 s).",
)
ANALYSE_STORIES = typer.Option(
    None,
    "--stories",
    help="Story file: its systems become the condition of judgments without one.",
)
ANALYSE_STUDY_FILE = typer.Option(
    None, "--study", help="Take the exclusion rules from this study file."
)
ANALYSE_KEEP_FAILED_CHECKS = typer.Option(
    False, "--keep-failed-checks", help="Keep raters who failed an attention check."
)
ANALYSE_ALPHA = typer.Option(
    0.05, "--alpha", help="Triangle test: significance level of the test of difference."
)
ANALYSE_BETA = typer.Option(
    None, "--beta", help="Triangle test: beta of the test of similarity (with --pd)."
)
ANALYSE_PD = typer.Option(
    None, "--pd", help="Triangle test: largest proportion of discriminators for similarity."
)
ANALYSE_COMPETENCE = typer.Option(
    None,
    "--competence",
    help="mace (Hovy et al. 2013) or dawid-skene (Dawid and Skene 1979): each rater's "
    "competence (spammers and constant raters flagged) and each item's posterior label; "
    "ordinal: an item-response model of Likert ratings (item location with an interval, rater "
    "severity and discrimination).",
)
ANALYSE_BOOTSTRAP = typer.Option(
    1000,
    "--bootstrap",
    help="Bootstrap resamples for the CI of Krippendorff's alpha (0: none).",
)


ANALYSE_PPI_JUDGE = typer.Option(
    None,
    "--ppi-judge",
    help="A judge's judgments of every item (people's being a random subset): also each "
    "condition's mean per criterion by prediction-powered inference (PPI++), in DIR/ppi.csv.",
)


def _ppi_means(
    judgments: Path, judge: Path, conditions: dict[str, str] | None, output: Path
) -> Path:
    """``study analyse --ppi-judge``: per criterion and condition, the PPI++ mean."""
    from storyeval.base.io import write_table
    from storyeval.corpus import read_judgments
    from storyeval.meta.ppi import ppi_means_by, ppi_table

    frame, _ = ppi_table(
        read_judgments(judgments), read_judgments(judge), by="condition", groups=conditions
    )
    frame["cell"] = frame["criterion"] + " / " + frame["condition"].astype(str)
    return write_table(output / "ppi.csv", ppi_means_by(frame, group="cell"))


@study_app.command("analyse")
def analyse(
    judgments: Path = ANALYSE_JUDGMENTS,
    output: Path = typer.Option(..., "-o", "--output", help="Output directory for the CSV tables."),
    min_median_time: float = ANALYSE_MIN_MEDIAN_TIME,
    stories: Path = ANALYSE_STORIES,
    study_file: Path = ANALYSE_STUDY_FILE,
    keep_failed_checks: bool = ANALYSE_KEEP_FAILED_CHECKS,
    alpha: float = ANALYSE_ALPHA,
    beta: float = ANALYSE_BETA,
    pd: float = ANALYSE_PD,
    bootstrap: int = ANALYSE_BOOTSTRAP,
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
    competence: str = ANALYSE_COMPETENCE,
    ppi_judge: Path = ANALYSE_PPI_JUDGE,
) -> None:
    """Summaries, agreement and tests: writes DIR/summary.csv, agreement.csv, tests.csv,
    filtering.csv, raters.csv (and detection.csv, pairwise.csv, triangle.csv when relevant;
    competence.csv and posteriors.csv with --competence)."""
    from storyeval.human.analysis import analyse_judgments

    threshold = min_median_time
    exclude = not keep_failed_checks
    if study_file is not None:
        study = _load(study_file)
        if threshold is None:
            threshold = study.config.quality.min_median_time_s
        if not keep_failed_checks:
            exclude = study.config.quality.exclude_failed_checks
    if (beta is None) != (pd is None):
        raise exit_with("error: the triangle test of similarity needs both --beta and --pd")
    conditions = texts = None
    if stories is not None:
        from storyeval.corpus import read_stories

        with user_errors():
            read = read_stories(stories)
        conditions = {s.id: s.system for s in read if s.system}
        texts = {s.id: s.story for s in read}
    with user_errors():
        result = analyse_judgments(
            judgments,
            conditions=conditions,
            texts=texts,
            min_median_time_s=threshold,
            exclude_failed_checks=exclude,
            triangle_alpha=alpha,
            triangle_beta=beta,
            triangle_pd=pd,
            n_boot=bootstrap,
            seed=seed,
            competence=competence,
        )
        paths = result.write(output)
        if ppi_judge is not None:
            paths.append(_ppi_means(judgments, ppi_judge, conditions, output))
    _print_analysis(result, paths)
    if result.competence is not None:
        _print_competence(result.competence)


def _print_competence(table: Any) -> None:
    """The raters flagged by the competence model, per criterion."""
    flagged = table[table["spammer"] | table["constant"]]
    model = table["model"].iloc[0] if len(table) else ""
    if flagged.empty:
        typer.echo(f"competence ({model}): no rater flagged")
    for row in flagged.itertuples(index=False):
        why = "always the same answer" if row.constant else "answers at chance"
        typer.echo(
            f"competence ({model}, {row.criterion}): rater {row.rater_id} {why} "
            f"(competence {row.competence:.2f}, {row.labels} labels)"
        )


def _print_analysis(result: Any, paths: Sequence[Path]) -> None:
    """Print the filtering steps, the summary and the tests of an analysis."""
    from rich.console import Console

    console = Console()
    for _, row in result.filtering.iterrows():
        note = f"; {row['note']}" if isinstance(row.get("note"), str) else ""
        console.print(
            f"{row['step']} ({row['threshold']}): removed {row['raters_removed']} of {row['raters_before']} raters "
            f"and {row['judgments_removed']} of {row['judgments_before']} judgments{note}"
        )
    console.print(_summary_table(result.summary))
    if len(result.tests):
        console.print(_tests_table(result.tests))
    console.print(f"signature: {result.signature}")
    for path in paths:
        console.print(f"wrote {path}")


def _summary_table(summary: Any) -> Any:
    from rich.table import Table

    view = Table(title="summary")
    for column in ("criterion", "condition", "n", "mean", "sd"):
        view.add_column(column)
    for _, row in summary.iterrows():
        view.add_row(
            row["criterion"],
            row["condition"],
            str(row["n"]),
            f"{row['mean']:.2f}",
            f"{row['sd']:.2f}",
        )
    return view


def _tests_table(frame: Any) -> Any:
    from rich.table import Table

    tests = Table(title="tests")
    columns = (
        "criterion",
        "comparison",
        "estimate",
        "statistic",
        "df",
        "p_value",
        "95% CI",
        "method",
    )
    for column in columns:
        tests.add_column(column)
    for _, row in frame.iterrows():
        ci = (
            f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]" if row["ci_low"] == row["ci_low"] else ""
        )
        df = f"{row['df']:.1f}" if row["df"] == row["df"] else ""
        tests.add_row(
            row["criterion"],
            row["comparison"],
            f"{row['estimate']:.3f}",
            f"{row['statistic']:.2f}",
            df,
            f"{row['p_value']:.3g}",
            ci,
            row["method"].split(" (")[0],
        )
    return tests


study_app.command("analyze", hidden=True, help="Alias of analyse.")(analyse)


@study_app.command("statement")
def statement(
    file: Path = typer.Argument(..., help="The study file that was run."),
    output: Path = typer.Option(..., "-o", "--output", help="Markdown file to write."),
    export_dir: Path = typer.Option(
        None, "--export", help="A folder written by 'storyeval study export'."
    ),
    judgments: Path = typer.Option(
        None, "--judgments", help="The collected judgments (long format)."
    ),
    participants: Path = typer.Option(
        None, "--participants", help="participants.jsonl from the export."
    ),
    min_median_time: float = typer.Option(
        None, "--min-median-time", help="Exclusion threshold (default: the study's)."
    ),
) -> None:
    """Write the design statement (question wording, scales, order, training, checks, exclusions...)."""
    from storyeval.human.statement import write_statement

    study = _load(file)
    if export_dir is not None:
        candidates = [export_dir / "judgments.jsonl", export_dir / "judgments.csv"]
        found = next((p for p in candidates if p.exists()), None)
        if found is None:
            raise exit_with(
                f"error: {export_dir}: no judgments.jsonl or judgments.csv (run 'storyeval study export')"
            )
        if found.stat().st_size > 0:
            judgments = judgments or found
        if (export_dir / "participants.jsonl").exists():
            participants = participants or export_dir / "participants.jsonl"
    with user_errors():
        write_statement(
            study,
            output,
            judgments_path=judgments,
            participants_path=participants,
            min_median_time_s=min_median_time,
        )
    typer.echo(f"wrote {output}")


SIM_TARGET = typer.Option(1.5, "--target-width", help="Interval width at which an item stops.")
SIM_MIN = typer.Option(3, "--min-raters", help="Judgments every item gets first.")
SIM_RATERS = typer.Option(16, "--raters", help="The most raters an item gets (raters_per_item).")
SIM_CONTESTED = typer.Option(
    0.3, "--contested-share", help="Share of items raters disagree on (rater SD 1.5, else 0.5)."
)


@study_app.command("simulate-adaptive")
def simulate_adaptive_command(
    file: Path = typer.Argument(
        None, help="A study file whose assignment.adaptive settings to simulate (else options)."
    ),
    target_width: float = SIM_TARGET,
    min_raters: int = SIM_MIN,
    raters: int = SIM_RATERS,
    items: int = typer.Option(200, "--items", help="Simulated items."),
    contested_share: float = SIM_CONTESTED,
    repeats: int = typer.Option(5, "--repeats", min=1, help="Simulated studies."),
    seed: int = typer.Option(0, "--seed"),
    output: Path = typer.Option(None, "-o", "--output", help="Write the table (.csv or .jsonl)."),
) -> None:
    """How many judgments adaptive assignment saves against giving every item the same
    number of raters, for the same share of items within the target interval width."""
    from storyeval.cli._tables import write_table
    from storyeval.human.adaptive import simulate_adaptive
    from storyeval.human.model import AdaptiveAssignment

    with user_errors():
        if file is not None:
            study = _load(file)
            settings = study.config.assignment.adaptive
            if settings is None:
                raise exit_with(f"error: {file}: the study has no assignment.adaptive section")
            raters, items = study.raters_per_item, len(study.items)
        else:
            settings = AdaptiveAssignment(target_width=target_width, min_raters=min_raters)
        table = simulate_adaptive(
            settings,
            n_items=items,
            raters_per_item=raters,
            contested_share=contested_share,
            repeats=repeats,
            seed=seed,
        )
    if output is not None:
        write_table(table, output)
    typer.echo(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    saving = table[table["design"] == "adaptive"]["saving"]
    typer.echo(
        f"adaptive assignment saved {saving.mean():.0%} of the judgments on average "
        f"(from {saving.min():.0%} to {saving.max():.0%} over {repeats} simulated studies)"
    )


def register(app: typer.Typer) -> None:
    """Add the ``study`` commands to the application."""
    app.add_typer(study_app, name="study", rich_help_panel="Human studies")
