"""``storyeval consistency``: passages of each story that contradict each other."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_errors


def consistency_command(
    stories: Path = typer.Argument(..., help="A story file (.jsonl or .csv)."),
    output: Path = typer.Option(
        ..., "-o", "--output", help="The findings (.csv or .jsonl): each pair of sentences."
    ),
    nli: str = typer.Option(
        None,
        "--nli",
        help="An NLI classifier (hub name or directory, e.g. roberta-large-mnli); default: the "
        "weaker rule-based check (a statement repeated with its negation flipped or a word "
        "replaced by its antonym).",
    ),
    threshold: float = typer.Option(
        0.5,
        "--threshold",
        min=0.0,
        max=1.0,
        help="--nli/--judge: the contradiction (or yes) probability of a finding.",
    ),
    judge: str = typer.Option(
        None,
        "--judge",
        help="An LLM judge asked about each pair of sentences that share words: a local causal "
        "LM (hub name or directory; 'offline' for the packaged SmolLM2) or, with --base-url, "
        "a model an OpenAI-compatible server knows.",
    ),
    base_url: str = typer.Option(None, "--base-url", help="--judge: the server's address."),
) -> None:
    """Find the sentences of each story that contradict an earlier one, each finding quoted
    with both sentences; prints the stories with findings per system. Plant contradictions to
    measure a check with `storyeval perturb STORIES -t contradiction --each`."""
    from storyeval.analyses.consistency import find_contradictions
    from storyeval.cli._tables import check_table_path, write_table
    from storyeval.corpus import read_stories

    check_table_path(output)
    with user_errors():
        read = read_stories(stories)
        backend = None
        if judge is not None:
            from storyeval.judge.backends import BackendSpec

            spec = BackendSpec(models=(None if judge == "offline" else judge,), base_url=base_url)
            backend = spec.build()[0]
        findings = find_contradictions(read, nli=nli, judge=backend, threshold=threshold)
        write_table(findings, output)
    flagged = set(findings["item_id"])
    systems: dict[str, list[int]] = {}
    for story in read:
        systems.setdefault(story.system or "", [0, 0])
        systems[story.system or ""][0] += 1
        systems[story.system or ""][1] += story.id in flagged
    for system, (total, with_findings) in sorted(systems.items()):
        typer.echo(f"{system or '(no system)'}: {with_findings} of {total} stories with a finding")
    method = (
        findings["method"].iloc[0]
        if len(findings)
        else ("nli" if nli else "judge" if judge else "rules")
    )
    typer.echo(f"{len(findings)} findings ({method}) -> {output}")


def register(app: typer.Typer) -> None:
    """Add the ``consistency`` command to the application."""
    app.command("consistency", rich_help_panel="Metrics")(consistency_command)
