"""``storyeval generate``: stories from a prompts file with any causal LM and decoding setting."""

from __future__ import annotations

from pathlib import Path

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


def generate(
    prompts: Path = typer.Argument(
        ...,
        help="Prompts file (.jsonl or .csv): `id` and `prompt` per record; `reference` or `story` "
        "(a human continuation) becomes the reference of the generated stories.",
    ),
    output: Path = typer.Option(
        ..., "-o", "--output", help="Write the stories here (.jsonl/.csv)."
    ),
    model: str = typer.Option(
        None, "--model", help="Causal LM: a local directory or hub name (default: offline SmolLM2)."
    ),
    greedy: bool = typer.Option(False, "--greedy", help="Greedy decoding instead of sampling."),
    top_k: int = typer.Option(None, "--top-k", min=1, help="Top-k sampling (e.g. 40)."),
    top_p: float = typer.Option(None, "--top-p", help="Nucleus sampling (e.g. 0.9)."),
    temperature: float = typer.Option(None, "--temperature", help="Sampling temperature (1.0)."),
    repetition_penalty: float = typer.Option(
        1.0, "--repetition-penalty", help="CTRL-style repetition penalty (1.0 = none)."
    ),
    max_new_tokens: int = typer.Option(160, "--max-new-tokens", min=1, help="Tokens per story."),
    num_stories: int = typer.Option(1, "--num-stories", min=1, help="Stories per prompt."),
    seed: int = typer.Option(0, "--seed", help="Random seed; same seed, same stories."),
    max_words: int = typer.Option(
        None,
        "--max-words",
        min=1,
        help="Cut at a full sentence within N words (Karpinska et al. 2021: 150).",
    ),
    max_chars: int = typer.Option(
        None,
        "--max-chars",
        min=1,
        help="Cut at a full sentence within N characters (Callan and Foster 2023: 400).",
    ),
    batch_size: int = typer.Option(8, "--batch-size", min=1, help="Prompts per model call."),
    system: str = typer.Option(None, "--system", help="System name (default: model-decoding)."),
    priming: Path = typer.Option(
        None,
        "--priming",
        help="Few-shot priming: a story file whose first --priming-count texts (prompt + story) "
        "precede every prompt, each followed by an end-of-text marker (Clark 2021 ch. 6).",
    ),
    priming_count: int = typer.Option(3, "--priming-count", min=1, help="Priming texts to use."),
    separator: str = typer.Option(
        None, "--separator", help="End-of-text marker (default: the model's <|endoftext|>)."
    ),
    copy_threshold: float = typer.Option(
        0.8,
        "--copy-threshold",
        help="With priming: drop and regenerate stories whose overlap with a priming text "
        "exceeds this.",
    ),
    offensive_filter: bool = typer.Option(
        False,
        "--offensive-filter",
        help="Drop and regenerate stories with a listed offensive word.",
    ),
    offensive_words: Path = typer.Option(
        None,
        "--offensive-words",
        help="Your own word list (one term per line; implies --offensive-filter).",
    ),
    max_attempts: int = typer.Option(
        10, "--max-attempts", min=1, help="Generations allowed per story before giving up."
    ),
    limit: int = typer.Option(
        None, "--limit", min=1, help="Only the first N prompts (a quick try)."
    ),
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
    from storyeval.corpus import detect_format, write_stories
    from storyeval.errors import StoryevalError
    from storyeval.generate import (
        DROP_FIELDS,
        DecodingConfig,
        WordListFilter,
        generate_stories,
        generation_summary,
        read_priming_texts,
        read_prompts,
    )

    device, precision = compute_settings(device, precision, threads)
    if top_k is not None and top_p is not None:
        raise exit_with("error: give --top-k or --top-p, not both")
    if max_words is not None and max_chars is not None:
        raise exit_with("error: give --max-words or --max-chars, not both")
    if priming is None and (separator is not None or priming_count != 3):
        raise exit_with("error: --separator and --priming-count need --priming FILE")
    try:
        detect_format(output)
        decoding = DecodingConfig.from_options(
            greedy=greedy,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            repetition_penalty=repetition_penalty,
            max_new_tokens=max_new_tokens,
        )
        records = read_prompts(prompts)
        if limit is not None:
            records = records[:limit]
        priming_texts = read_priming_texts(priming, count=priming_count) if priming else []
        word_filter = None
        if offensive_words is not None:
            word_filter = WordListFilter.from_file(offensive_words)
        elif offensive_filter:
            word_filter = WordListFilter.default()
    except (StoryevalError, ValueError, OSError) as exc:
        raise user_error(exc) from None
    reused = sorted(
        {r.id for r in records for text in priming_texts if text.startswith(r.prompt.strip())}
    )
    if reused:
        typer.echo(
            f"note: prompt(s) {', '.join(reused[:5])} are also priming texts; their stories may "
            "copy the priming text (the copy filter catches that)",
            err=True,
        )
    try:
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
        client = dask_client(engine, scheduler, workers)
        if client is None:
            stories = generate_stories(
                records, progress=progress, block_size=block_size, **settings
            )
        else:
            from storyeval.engine.dask import close, generate_source

            if limit is not None:
                raise ValueError("--limit goes with the local engine")
            try:
                stories = generate_source(
                    prompts,
                    client=client,
                    block_size=block_size,
                    progress=progress,
                    **{**settings, "progress": False},
                )
            finally:
                close(client)
    except (StoryevalError, ValueError) as exc:
        raise user_error(exc) from None
    write_stories(output, stories)
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
