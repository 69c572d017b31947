"""``storyeval perturb``: negative samples and robustness probes from human stories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from storyeval.base.errors import StoryevalError
from storyeval.cli._common import (
    block_size_option,
    dask_client,
    engine_option,
    exit_with,
    scheduler_option,
    user_error,
    workers_option,
)

# The help text lists the registry; it is kept in step with it by a test.
_TECHNIQUES_HELP = (
    "Comma-separated techniques: repetition, substitution, reordering, negation (default: these "
    "four, UNION's); or a suite name: discrimination (causal_reordering, antonym_swap, "
    "entity_swap, repeated_plot), invariance (synonym, contraction, punctuation, typos), "
    "invariance-lm (paraphrase: LM rewrites, slow)."
)


PERTURB_OUTPUT = typer.Option(..., "-o", "--output", help="Where to write the perturbed stories.")
PERTURB_MIX = typer.Option(
    False,
    "--mix",
    help="Draw a UNION mixture from the listed techniques for each story (number of "
    "techniques 1-4 with p=.5/.2/.2/.1; weights repetition .1, substitution .3, "
    "reordering .4, negation .2). Without it every listed technique is applied to every story.",
)
PERTURB_MIX_WEIGHTS = typer.Option(
    None,
    "--mix-weights",
    help="With --mix: weights that replace the paper's, e.g. 'repetition=0.25,reordering=0.25' "
    "(techniques not named keep theirs).",
)
PERTURB_EACH = typer.Option(
    False, "--each", help="One output per story and technique (instead of all combined)."
)
PERTURB_SEED = typer.Option(
    0, "--seed", help="Random seed (outputs depend on it and the story id only)."
)
PERTURB_DELEX = typer.Option(
    False, "--delex", help="Replace character names by [MALE]/[FEMALE]/[NEUTRAL] first."
)
PERTURB_KEYWORD_RATE = typer.Option(
    0.15, "--keyword-rate", help="Share of keywords replaced by word-level substitution."
)
PERTURB_ANTONYMS = typer.Option(
    None,
    "--antonyms",
    help="A ConceptNet-style antonym file (word|||/r/Antonym|||antonym lines; also UNION's "
    "/r/NotDesires, /r/NotCapableOf, /r/NotHasProperty) whose antonyms join WordNet's for "
    "substitution.",
)
PERTURB_PARAPHRASE_MODEL = typer.Option(
    None,
    "--paraphrase-model",
    help="Instruction-tuned LM of the paraphrase technique (default: the offline one).",
)
PERTURB_SKIP_INAPPLICABLE = typer.Option(
    False,
    "--skip-inapplicable",
    help="Leave out stories a technique cannot change (e.g. one sentence for reordering) "
    "instead of stopping with an error.",
)
PERTURB_QUIET = typer.Option(
    False, "--quiet", "-q", help="No progress bar (shown only on a terminal anyway)."
)


def perturb(
    stories: Path = typer.Argument(..., help="A story file (.jsonl or .csv)."),
    output: Path = PERTURB_OUTPUT,
    techniques: str = typer.Option(None, "--techniques", "-t", help=_TECHNIQUES_HELP),
    mix: bool = PERTURB_MIX,
    mix_weights: str = PERTURB_MIX_WEIGHTS,
    each: bool = PERTURB_EACH,
    seed: int = PERTURB_SEED,
    samples: int = typer.Option(1, "--samples", min=1, help="Outputs per story (and technique)."),
    delex: bool = PERTURB_DELEX,
    keyword_rate: float = PERTURB_KEYWORD_RATE,
    antonyms: Path = PERTURB_ANTONYMS,
    paraphrase_model: str = PERTURB_PARAPHRASE_MODEL,
    skip_inapplicable: bool = PERTURB_SKIP_INAPPLICABLE,
    quiet: bool = PERTURB_QUIET,
    engine: str = engine_option(),
    scheduler: str = scheduler_option(),
    workers: int = workers_option(),
    block_size: int = block_size_option(),
) -> None:
    """Perturb stories (Guan & Huang 2020): repetition, substitution, reordering, negation.

    Each output record has id, source_id, prompt, story, techniques, edits (what changed and
    where) and the run's signature.
    """
    import sys

    from storyeval.corpus import write_records

    if mix and each:
        raise exit_with("error: --mix and --each cannot be combined")
    if mix_weights and not mix:
        raise exit_with("error: --mix-weights weighs the techniques of --mix: add --mix")
    options = _options(keyword_rate, paraphrase_model, antonyms, mix_weights)
    try:
        from storyeval.perturb import parse_techniques

        names = parse_techniques(techniques)
    except ValueError as exc:
        raise exit_with(f"error: --techniques: {exc}") from None
    settings: dict[str, Any] = {
        "techniques": names,
        "mode": "mix" if mix else "each" if each else "all",
        "seed": seed,
        "samples": samples,
        "options": options,
        "delexicalize": delex,
        "skip_inapplicable": skip_inapplicable,
    }
    client = dask_client(engine, scheduler, workers)
    progress = not quiet and sys.stderr.isatty()
    run = _run(stories, settings, client, block_size, progress)
    write_records(output, run.records())
    typer.echo(f"wrote {len(run.stories)} perturbed stories to {output} ({run.summary()})")
    redrawn = [story for story in run.stories if story.redraws]
    for story in redrawn[:10]:
        shown = "; ".join(
            f"{r.technique} -> {r.replacement or 'none'} ({r.reason})" for r in story.redraws
        )
        typer.echo(f"  redrawn {story.id}: {shown}", err=True)
    if len(redrawn) > 10:
        typer.echo(f"  ... and {len(redrawn) - 10} more (each record's 'redrawn' field)", err=True)
    if run.skipped:
        typer.echo(f"left out {len(run.skipped)} (no technique could change them):", err=True)
        for story_id, reason in list(run.skipped.items())[:10]:
            typer.echo(f"  {story_id}: {reason}", err=True)
    typer.echo(f"signature: {run.signature.render()}")


def _options(
    keyword_rate: float,
    paraphrase_model: str | None,
    antonyms: Path | None,
    mix_weights: str | None,
) -> Any:
    """The techniques' options; a bad rate, weight or antonym file exits now."""
    import dataclasses

    from storyeval.perturb import PerturbOptions, parse_mix_weights
    from storyeval.perturb.lexicon import antonym_file_identity

    try:
        weights = parse_mix_weights(mix_weights)
    except ValueError as exc:
        raise exit_with(f"error: --mix-weights: {exc}") from None
    try:
        options = PerturbOptions(
            keyword_rate=keyword_rate, paraphrase_model=paraphrase_model, mix_weights=weights
        )
    except ValueError as exc:
        raise exit_with(f"error: --keyword-rate: {exc}") from None
    if antonyms is not None:
        try:
            antonym_file_identity(antonyms)  # a missing or malformed file fails now
        except (ValueError, OSError) as exc:
            raise user_error(exc) from None
        options = dataclasses.replace(options, antonyms_file=str(antonyms))
    return options


def _run(
    stories: Path, settings: dict[str, Any], client: Any, block_size: int, progress: bool
) -> Any:
    """Perturb on the local engine (``client`` None) or on the Dask cluster; warnings are
    reported by the command, not printed."""
    import warnings

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            if client is None:
                from storyeval.corpus import read_stories
                from storyeval.engine.blocks import LocalExecutor
                from storyeval.perturb.engine import perturb_on

                executor = LocalExecutor(read_stories(stories), where=str(stories))
                return perturb_on(executor, block_size=block_size, progress=progress, **settings)
            from storyeval.perturb.engine import perturb_source

            return perturb_source(
                stories, client=client, block_size=block_size, progress=progress, **settings
            )
        except (StoryevalError, ValueError, OSError) as exc:
            raise user_error(exc) from None
        finally:
            if client is not None:
                from storyeval.engine.dask import close

                close(client)


def register(app: typer.Typer) -> None:
    """Add the ``perturb`` command to the application."""
    app.command(rich_help_panel="Learned metrics")(perturb)
