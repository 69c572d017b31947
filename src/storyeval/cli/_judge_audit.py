"""``storyeval judge-audit``: check a judge's biases before trusting it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import exit_with, user_errors

AUDIT_JUDGE = typer.Option(
    ...,
    "--judge",
    help="The judge's answers on the stories (storyeval judge's output; repeat for runs with "
    "other seeds: stability).",
)
AUDIT_PERTURBED = typer.Option(
    None,
    "--perturbed",
    help="Perturbed stories (storyeval perturb's output, with source_id and techniques).",
)
AUDIT_PERTURBED_JUDGE = typer.Option(
    None, "--perturbed-judge", help="The judge's answers on the --perturbed stories."
)
AUDIT_OWN = typer.Option(
    None,
    "--own-systems",
    help="Comma-separated systems of the judge's own model family (self-preference).",
)


def judge_audit(
    judge: list[Path] = AUDIT_JUDGE,
    stories: Path = typer.Option(..., "--stories", help="The judged stories (systems, texts)."),
    humans: Path = typer.Option(None, "--humans", help="People's judgments of the stories."),
    comparisons: Path = typer.Option(
        None, "--comparisons", help="The judge's pairwise run (both orders): position bias."
    ),
    perturbed: Path = AUDIT_PERTURBED,
    perturbed_judge: Path = AUDIT_PERTURBED_JUDGE,
    own_systems: str = AUDIT_OWN,
    output: Path = typer.Option(..., "-o", "--output", help="A directory for audit.csv/.md."),
    bootstrap: int = typer.Option(1000, "--bootstrap", min=10, help="Bootstrap replicates."),
    seed: int = typer.Option(0, "--seed", help="Seed of the bootstrap."),
) -> None:
    """Audit a judge (Judgemark-style): separability of systems, stability across runs,
    position bias, length bias (beyond people's ratings when given), self-preference, and
    sensitivity to perturbations that destroy a story and to edits that keep it. One
    verdict line per check; audit.csv and audit.md in the output directory."""
    from storyeval.corpus import read_judgments, read_stories
    from storyeval.judge.audit import audit_judge, write_audit

    if (perturbed is None) != (perturbed_judge is None):
        raise exit_with("error: --perturbed and --perturbed-judge go together")
    with user_errors():
        result = audit_judge(
            [read_judgments(path) for path in judge],
            read_stories(stories),
            humans=read_judgments(humans) if humans else (),
            comparisons=_records(comparisons) if comparisons else (),
            perturbed=read_stories(perturbed) if perturbed else (),
            perturbed_judgments=read_judgments(perturbed_judge) if perturbed_judge else (),
            own_systems=[s.strip() for s in (own_systems or "").split(",") if s.strip()],
            n_boot=bootstrap,
            seed=seed,
        )
        files = write_audit(result, output)
    for line in result.verdicts():
        typer.echo(line)
    for line in result.skipped:
        typer.echo(f"not checked: {line}")
    typer.echo(f"wrote {', '.join(str(f) for f in files)}")


def _records(path: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
