"""``storyeval index``: a reference corpus indexed for n-gram novelty and the creativity index."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from storyeval.cli._common import user_errors


def index_command(
    corpus: list[Path] = typer.Argument(
        ...,
        help="Story files (.jsonl/.csv: each story a document) and plain text files (each "
        "file a document).",
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The index directory (replaced)."),
    depth: int = typer.Option(
        16,
        "--depth",
        min=2,
        max=64,
        help="Longest span in words a query can match (n-gram novelty's n and the creativity "
        "index's L go up to it).",
    ),
) -> None:
    """Index a reference corpus (a training set, the human stories, any text) for the
    ngram_novelty and creativity_index metrics: a word-level suffix array, memory-mapped when
    read, e.g. storyeval score STORIES --metrics ngram_novelty,creativity_index
    -O novelty.index=DIR."""
    from storyeval.metrics.novelty import build_index, corpus_documents

    started = time.perf_counter()
    with user_errors():
        index = build_index(
            corpus_documents(corpus),
            output,
            depth=depth,
            progress=lambda line: typer.echo(line, err=True),
        )
    typer.echo(
        f"indexed {index.words:,} words in {index.documents:,} documents "
        f"({len(index.vocabulary):,} distinct) in {time.perf_counter() - started:.1f} s -> "
        f"{output}; identity {index.identity}"
    )


def register(app: typer.Typer) -> None:
    """Add the ``index`` command to the application."""
    app.command("index", rich_help_panel="Metrics")(index_command)
