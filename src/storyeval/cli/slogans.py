"""``storyeval slogans INPUT -o OUTPUT``: skeleton-constrained slogan suggestions."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import compute_settings, device_option, threads_option, user_error

_REPEAT_FILLERS = typer.Option(
    False,
    "--repeat-fillers",
    help="Let a request's suggestions reuse each other's corpus words (storyeval before 0.10).",
)
_PRESET = typer.Option(
    None,
    "--preset",
    help="clark2021: the thesis' set-up: skeletons from Wikiquote (--skeletons, made by "
    "`storyeval slogan-lines`) and each target's 5 nearest GloVe neighbours as slot words.",
)
REPLICATION_NEIGHBOURS = 5


def _replication(preset: str, skeletons: Path | None, neighbours: int) -> int:
    """The neighbours of the replication preset; it needs a Wikiquote skeleton file."""
    from storyeval.base.errors import StoryevalError

    if preset != "clark2021":
        raise StoryevalError(f"unknown preset {preset!r}; the one preset is clark2021")
    if skeletons is None:
        raise StoryevalError(
            "--preset clark2021 takes its skeletons from Wikiquote, as the thesis did: make "
            "them with `storyeval slogan-lines enwikiquote-...xml.bz2 -o lines.txt` and pass "
            "--skeletons lines.txt"
        )
    return neighbours or REPLICATION_NEIGHBOURS


def slogans_command(
    requests: Path = typer.Argument(
        ..., help="JSONL: `id`, `keywords` (a list of words) and optionally `draft` per line."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The JSONL file to write."),
    skeletons: Path = typer.Option(
        None, "--skeletons", help="Lines to take skeletons from (default: storyeval's 80 lines)."
    ),
    model: str = typer.Option(
        None, "--model", help="Causal LM for grammaticality (default: offline SmolLM2)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the target-word and skeleton draws."),
    suggestions: int = typer.Option(3, "--suggestions", min=1, max=3, help="Suggestions each."),
    beam: int = typer.Option(None, "--beam", min=1, help="Beam width of the slot filling (4)."),
    neighbours: int = typer.Option(
        0,
        "--neighbours",
        min=0,
        max=20,
        help="Also offer each target's N nearest GloVe neighbours as slot words (beyond the "
        "skeleton corpus' frequent words and the writer's own).",
    ),
    device: str = device_option(),
    threads: int = threads_option(),
    repeat_fillers: bool = _REPEAT_FILLERS,
    preset: str = _PRESET,
) -> None:
    """Slogan suggestions after BRAINSUP (Clark 2021, section 2.5.2): target words sampled from
    the keywords and draft, three skeletons whose part-of-speech slots hold them, slots filled
    by beam search over target use, LM log-probability and word diversity. Prints how many
    distinct words the suggestions begin with.

    Each output line: id, suggestions (at most three), skeletons, targets, used_targets,
    signature.
    """
    import dataclasses

    from storyeval.base.errors import StoryevalError
    from storyeval.corpus import write_records
    from storyeval.generate.slogans import (
        SkeletonBank,
        SloganSettings,
        first_word_diversity,
        read_requests,
        suggestion_records,
    )
    from storyeval.models import load_causal_lm, load_spacy
    from storyeval.models.devices import place

    device, _ = compute_settings(device, "float32", threads)
    try:
        if output.suffix.lower() != ".jsonl":
            raise StoryevalError(f"{output}: write the suggestions to a .jsonl file")
        if preset is not None:
            neighbours = _replication(preset, skeletons, neighbours)
        parsed = read_requests(requests)
        nlp = load_spacy()
        bank = SkeletonBank.load(skeletons, nlp=nlp)
        lm = place(load_causal_lm(model), device)
        settings = SloganSettings(
            suggestions=suggestions, neighbours=neighbours, distinct_fillers=not repeat_fillers
        )
        if beam is not None:
            settings = dataclasses.replace(settings, beam=beam)
        records = list(
            suggestion_records(parsed, bank=bank, lm=lm, nlp=nlp, seed=seed, settings=settings)
        )
        write_records(output, records)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    failed = sum(1 for r in records if r.get("error"))
    for record in records[:3]:
        typer.echo(f"{record['id']}: " + " | ".join(record["suggestions"]))
    variety = first_word_diversity(records)
    typer.echo(
        f"first words: {variety['distinct_first_words']} distinct in {variety['suggestions']} "
        f"suggestions (most often {variety['top_first_word']!r}, {variety['top_count']}x)"
    )
    typer.echo(
        f"wrote {len(records)} request(s) to {output}"
        + (f" ({failed} without a content word)" if failed else "")
    )


def slogan_lines_command(
    dump: Path = typer.Argument(
        ..., help="A Wikiquote dump (enwikiquote-...-pages-articles.xml, or .xml.bz2)."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The skeleton file to write (.txt)."),
    min_words: int = typer.Option(3, "--min-words", min=1, help="Shortest line kept."),
    max_words: int = typer.Option(14, "--max-words", min=1, help="Longest line kept."),
    limit: int = typer.Option(None, "--limit", min=1, help="Stop after N lines."),
) -> None:
    """Skeleton lines from a Wikiquote dump, so `storyeval slogans --skeletons FILE` draws from
    thousands of quotations (Clark (2021), section 2.5.2): top-level quotes of article pages,
    outside Disputed/Misattributed/Quotes about sections, wiki markup stripped, one sentence of
    --min-words to --max-words words, each once."""
    from storyeval.base.io import write_text_atomic
    from storyeval.generate.quotes import read_wikiquote

    try:
        quotes = read_wikiquote(dump, min_words=min_words, max_words=max_words, limit=limit)
        header = (
            f"# {len(quotes)} quotation lines from {dump.name} (Wikiquote, CC BY-SA), "
            f"{min_words}-{max_words} words; storyeval slogan-lines\n"
        )
        write_text_atomic(output, header + "".join(q.text + "\n" for q in quotes))
    except (OSError, ValueError) as exc:
        raise user_error(exc) from None
    pages = len({q.page for q in quotes})
    typer.echo(f"wrote {len(quotes)} lines from {pages} pages to {output}")


def register(app: typer.Typer) -> None:
    """Add the ``slogans`` command to the application."""
    app.command("slogans", rich_help_panel="Generate")(slogans_command)
    app.command("slogan-lines", rich_help_panel="Generate")(slogan_lines_command)
