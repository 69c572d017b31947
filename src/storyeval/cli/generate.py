"""``storyeval generate``: stories from a prompts file with any causal LM and decoding setting."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from storyeval.cli._common import (
    block_size_option,
    compute_settings,
    dask_client,
    device_option,
    engine_option,
    exit_with,
    precision_option,
    scheduler_option,
    threads_option,
    user_error,
    workers_option,
)

if TYPE_CHECKING:
    from storyeval.corpus import Story


GENERATE_PROMPTS = typer.Argument(
    ...,
    help="Prompts file (.jsonl or .csv): `id` and `prompt` per record; `reference` or `story` "
    "(a human continuation) becomes the reference of the generated stories.",
)
GENERATE_OUTPUT = typer.Option(..., "-o", "--output", help="Write the stories here (.jsonl/.csv).")
GENERATE_MODEL = typer.Option(
    None, "--model", help="Causal LM: a local directory or hub name (default: offline SmolLM2)."
)
GENERATE_REPETITION_PENALTY = typer.Option(
    1.0, "--repetition-penalty", help="CTRL-style repetition penalty (1.0 = none)."
)
GENERATE_MAX_WORDS = typer.Option(
    None,
    "--max-words",
    min=1,
    help="Cut at a full sentence within N words (Karpinska et al. 2021: 150).",
)
GENERATE_MAX_CHARS = typer.Option(
    None,
    "--max-chars",
    min=1,
    help="Cut at a full sentence within N characters (Callan and Foster 2023: 400).",
)
GENERATE_PRIMING = typer.Option(
    None,
    "--priming",
    help="Few-shot priming: a story file whose first --priming-count texts (prompt + story) "
    "precede every prompt, each followed by an end-of-text marker (Clark 2021 ch. 6).",
)
GENERATE_SEPARATOR = typer.Option(
    None, "--separator", help="End-of-text marker (default: the model's <|endoftext|>)."
)
GENERATE_COPY_THRESHOLD = typer.Option(
    0.8,
    "--copy-threshold",
    help="With priming: drop and regenerate stories whose overlap with a priming text "
    "exceeds this.",
)
GENERATE_OFFENSIVE_FILTER = typer.Option(
    False,
    "--offensive-filter",
    help="Drop and regenerate stories with a listed offensive word.",
)
GENERATE_OFFENSIVE_WORDS = typer.Option(
    None,
    "--offensive-words",
    help="Your own word list (one term per line; implies --offensive-filter).",
)
GENERATE_MAX_ATTEMPTS = typer.Option(
    10, "--max-attempts", min=1, help="Generations allowed per story before giving up."
)
GENERATE_LIMIT = typer.Option(
    None, "--limit", min=1, help="Only the first N prompts (a quick try)."
)


GENERATE_BEAMS = typer.Option(
    1, "--beams", min=1, help="Beam search with N beams (deterministic; e.g. 5, Clark 2021)."
)


def generate(
    prompts: Path = GENERATE_PROMPTS,
    output: Path = GENERATE_OUTPUT,
    model: str = GENERATE_MODEL,
    greedy: bool = typer.Option(False, "--greedy", help="Greedy decoding instead of sampling."),
    beams: int = GENERATE_BEAMS,
    top_k: int = typer.Option(None, "--top-k", min=1, help="Top-k sampling (e.g. 40)."),
    top_p: float = typer.Option(None, "--top-p", help="Nucleus sampling (e.g. 0.9)."),
    temperature: float = typer.Option(None, "--temperature", help="Sampling temperature (1.0)."),
    repetition_penalty: float = GENERATE_REPETITION_PENALTY,
    max_new_tokens: int = typer.Option(160, "--max-new-tokens", min=1, help="Tokens per story."),
    num_stories: int = typer.Option(1, "--num-stories", min=1, help="Stories per prompt."),
    seed: int = typer.Option(0, "--seed", help="Random seed; same seed, same stories."),
    max_words: int = GENERATE_MAX_WORDS,
    max_chars: int = GENERATE_MAX_CHARS,
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Prompts per model call."),
    system: str = typer.Option(None, "--system", help="System name (default: model-decoding)."),
    priming: Path = GENERATE_PRIMING,
    priming_count: int = typer.Option(3, "--priming-count", min=1, help="Priming texts to use."),
    separator: str = GENERATE_SEPARATOR,
    copy_threshold: float = GENERATE_COPY_THRESHOLD,
    offensive_filter: bool = GENERATE_OFFENSIVE_FILTER,
    offensive_words: Path = GENERATE_OFFENSIVE_WORDS,
    max_attempts: int = GENERATE_MAX_ATTEMPTS,
    limit: int = GENERATE_LIMIT,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
    device: str = device_option(),
    precision: str = precision_option(),
    threads: int = threads_option(),
    engine: str = engine_option(),
    scheduler: str = scheduler_option(),
    workers: int = workers_option(),
    block_size: int = block_size_option(500, "prompts"),
) -> None:
    """Generate stories from prompts with any causal LM and decoding setting.

    Every story records a signature of the model and every setting, so the run can be repeated
    exactly. Outputs copying a priming text (> 80% overlap) or containing a listed offensive
    word are dropped, generated again and counted.
    """
    from storyeval.base.errors import StoryevalError
    from storyeval.corpus import detect_format, write_stories
    from storyeval.generate import DecodingConfig, read_priming_texts, read_prompts

    device, precision = compute_settings(device, precision, threads)
    _check_exclusive(top_k, top_p, max_words, max_chars, priming, separator, priming_count)
    try:
        detect_format(output)
        decoding = DecodingConfig.from_options(
            greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
            repetition_penalty=repetition_penalty, max_new_tokens=max_new_tokens, beams=beams,
        )  # fmt: skip
        records = read_prompts(prompts)[:limit]
        priming_texts = read_priming_texts(priming, count=priming_count) if priming else []
        word_filter = _word_filter(offensive_filter, offensive_words)
    except (StoryevalError, ValueError, OSError) as exc:
        raise user_error(exc) from None
    _note_priming_prompts(records, priming_texts)
    settings = {
        "model": model,
        "decoding": decoding,
        "num_stories": num_stories,
        "seed": seed,
        "batch_size": batch_size,
        "max_words": max_words,
        "max_chars": max_chars,
        "system": system,
        "priming": priming_texts,
        "separator": separator,
        "copy_threshold": copy_threshold,
        "word_filter": word_filter,
        "max_attempts": max_attempts,
        "device": device,
        "precision": precision,
    }
    try:
        client = dask_client(engine, scheduler, workers)
        if client is not None and limit is not None:
            raise ValueError("--limit goes with the local engine")
        stories = _run(records, prompts, settings, client, block_size, progress)
    except (StoryevalError, ValueError) as exc:
        raise user_error(exc) from None
    write_stories(output, stories)
    _report(stories, output)


def _check_exclusive(
    top_k: int | None,
    top_p: float | None,
    max_words: int | None,
    max_chars: int | None,
    priming: Path | None,
    separator: str | None,
    priming_count: int,
) -> None:
    """Exit on options that cannot go together."""
    if top_k is not None and top_p is not None:
        raise exit_with("error: give --top-k or --top-p, not both")
    if max_words is not None and max_chars is not None:
        raise exit_with("error: give --max-words or --max-chars, not both")
    if priming is None and (separator is not None or priming_count != 3):
        raise exit_with("error: --separator and --priming-count need --priming FILE")


def _word_filter(offensive_filter: bool, offensive_words: Path | None) -> Any:
    """The offensive-word filter asked for: the user's list, the default one, or none."""
    from storyeval.generate import WordListFilter

    if offensive_words is not None:
        return WordListFilter.from_file(offensive_words)
    return WordListFilter.default() if offensive_filter else None


def _note_priming_prompts(records: Sequence[Story], priming_texts: Sequence[str]) -> None:
    """Warn when a prompt is also the start of a priming text (its story may copy it)."""
    reused = sorted(
        {r.id for r in records for text in priming_texts if text.startswith(r.prompt.strip())}
    )
    if reused:
        typer.echo(
            f"note: prompt(s) {', '.join(reused[:5])} are also priming texts; their stories may "
            "copy the priming text (the copy filter catches that)",
            err=True,
        )


def _run(
    records: list[Story],
    prompts: Path,
    settings: dict[str, Any],
    client: Any,
    block_size: int,
    progress: bool,
) -> list[Story]:
    """Generate on the local engine (``client`` None) or on the Dask cluster."""
    from storyeval.generate import generate_stories

    if client is None:
        return generate_stories(records, progress=progress, block_size=block_size, **settings)
    from storyeval.engine.dask import close
    from storyeval.generate.core import generate_source

    try:
        return generate_source(
            prompts, client=client, block_size=block_size, progress=progress, **settings
        )
    finally:
        close(client)


def _report(stories: list[Story], output: Path) -> None:
    """Say what was written, what was dropped and regenerated, and the signature."""
    from storyeval.generate import DROP_FIELDS, generation_summary

    summary = generation_summary(stories)
    dropped = ", ".join(f"{summary[key]} {key.removeprefix('dropped_')}" for key in DROP_FIELDS)
    typer.echo(
        f"wrote {summary['stories']} stories to {output} ({summary['generations']} generations; "
        f"dropped and regenerated: {dropped})"
    )
    typer.echo(f"signature: {stories[0].extra['signature']}")


def register(app: typer.Typer) -> None:
    """Add the ``generate`` command to the application."""
    app.command(rich_help_panel="Generate")(generate)
