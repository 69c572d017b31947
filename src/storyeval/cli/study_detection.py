"""``storyeval study detection-arms``, ``code-sheet`` and ``coding``: Clark's (2021) chapter 6
beyond one study: training arms compared (Table 6.2) and raters' explanations coded with a
codebook (Tables 6.3 and C.1)."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_errors

_JUDGMENTS = typer.Argument(
    ..., help="Judgment files of the detection studies, one study per training arm."
)
_BASELINE = typer.Option(
    ..., "--baseline", help="The arm the others are tested against (the no-training study)."
)
_TESTS = typer.Option(
    None,
    "--bonferroni-tests",
    help="Tests the Bonferroni correction counts (default: the arms compared; Clark 2021: 15).",
)


def detection_arms(
    judgments: list[Path] = _JUDGMENTS,
    baseline: str = _BASELINE,
    output: Path = typer.Option(..., "-o", "--output", help="CSV file to write."),
    arm_by: str = typer.Option("study", "--arm-by", help="The judgments' field naming the arm."),
    tests: int = _TESTS,
) -> None:
    """Table 6.2 (Clark 2021): per training arm, the Table 6.1 statistics and per-rater
    accuracy, a two-sided t test against the baseline arm with its Bonferroni correction,
    Cohen's d and Tukey's HSD."""
    from storyeval.base.io import write_table
    from storyeval.corpus import read_judgments
    from storyeval.human.detection_arms import compare_training_arms
    from storyeval.human.tables import judgments_table

    with user_errors():
        frame = judgments_table([j for path in judgments for j in read_judgments(path)])
        if arm_by not in frame.columns:
            raise ValueError(f"the judgments have no field {arm_by!r} (see --arm-by)")
        frame = frame[(frame["protocol"] == "detection") & ~frame["check"]]
        if frame.empty:
            raise ValueError("the files hold no detection judgment")
        table = compare_training_arms(frame, baseline=baseline, arm=arm_by, tests=tests)
        write_table(output, table)
    shown = table[["arm", "n_raters", "accuracy", "p_value", "p_bonferroni", "cohen_d", "tukey_p"]]
    typer.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    typer.echo(f"wrote {output}")


def code_sheet(
    responses: list[Path] = typer.Argument(..., help="responses.jsonl of each study (arm)."),
    output: Path = typer.Option(..., "-o", "--output", help="Coding sheet to write (CSV)."),
    per_study: int = typer.Option(50, "--per-study", help="Raters sampled per study."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sample."),
) -> None:
    """A coding sheet of raters' explanations (Clark 2021, Appendix C.3: one explanation from
    each of up to 50 raters per study): each coder fills in ``coder`` and ``labels`` (labels of
    the codebook, separated by ";") in a copy of it."""
    from storyeval.base.io import write_table
    from storyeval.human.coding import coding_sheet, read_responses

    with user_errors():
        records = [r for path in responses for r in read_responses(path)]
        sheet = coding_sheet(records, per_study=per_study, seed=seed)
        if sheet.empty:
            raise ValueError("the responses hold no explanation to code")
        write_table(output, sheet)
    counts = sheet.groupby("study").size()
    typer.echo(", ".join(f"{study}: {n}" for study, n in counts.items()))
    typer.echo(f"wrote {len(sheet)} explanation(s) to code to {output}")


def coding(
    sheets: list[Path] = typer.Argument(..., help="Filled coding sheets (CSV), any coders."),
    output: Path = typer.Option(..., "-o", "--output", help="Directory for the tables."),
    codebook: Path = typer.Option(
        None, "--codebook", help="Codebook YAML (default: Clark 2021, Table C.1)."
    ),
) -> None:
    """The coded explanations: agreement between coders per label (agreement.csv) and the
    share of labels per category and label per study (shares.csv, Table 6.3)."""
    from storyeval.base.io import claim_output_directory, write_table
    from storyeval.human.coding import (
        CLARK2021_CODEBOOK,
        coding_agreement,
        label_shares,
        read_codebook,
        read_codings,
    )

    with user_errors():
        book = read_codebook(codebook) if codebook is not None else CLARK2021_CODEBOOK
        codings = read_codings(sheets, book)
        agreement = coding_agreement(codings, book)
        shares = label_shares(codings, book)
        folder = claim_output_directory(output, "coding tables")
        write_table(folder / "agreement.csv", agreement)
        write_table(folder / "shares.csv", shares)
    if codings["coder"].nunique() < 2:
        typer.echo("note: one coder only; agreement needs comments coded by two or more")
    table = shares[shares["level"] == "category"].pivot(
        index="study", columns="name", values="share"
    )
    typer.echo(table.to_string(float_format=lambda v: f"{v:.1f}"))
    typer.echo(f"wrote agreement.csv, shares.csv to {output}")


def register(app: typer.Typer) -> None:
    """Add the commands to ``storyeval study``."""
    from storyeval.cli.study import study_app

    study_app.command("detection-arms")(detection_arms)
    study_app.command("code-sheet")(code_sheet)
    study_app.command("coding")(coding)
