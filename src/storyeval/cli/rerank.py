"""``storyeval rerank``: keep the continuations an n-gram language model finds most fluent."""

from __future__ import annotations

from pathlib import Path

import typer

from storyeval.cli._common import user_error


def rerank(
    stories: Path = typer.Argument(..., help="Generated continuations (several per prompt)."),
    train: Path = typer.Option(
        ..., "--train", help="A story file whose stories train the n-gram model (its sentences)."
    ),
    output: Path = typer.Option(..., "-o", "--output", help="The kept continuations (.jsonl)."),
    order: int = typer.Option(5, "--order", min=1, max=9, help="n of the n-gram model."),
    keep: int = typer.Option(1, "--keep", min=1, help="Continuations kept per system and prompt."),
    per_word: bool = typer.Option(
        False, "--per-word", help="Rank by log-probability per word rather than in total."
    ),
    discount: float = typer.Option(0.1, "--discount", help="Kneser-Ney discount, in (0, 1)."),
) -> None:
    """Rerank sampled continuations with an interpolated Kneser-Ney n-gram model trained on
    `--train` and keep the best `--keep` per system and prompt: the step Clark (2021, section
    3.7) takes before its human evaluation of ENGEN (100 samples per context and model,
    reranked by a 5-gram model of the training data), e.g. after `storyeval generate PROMPTS
    --model DIR --num-stories 100`. Each kept record gains ngram_logprob, rerank_rank,
    rerank_candidates and rerank_signature."""
    from dataclasses import replace

    from storyeval.base.errors import StoryevalError
    from storyeval.corpus import read_stories, write_stories
    from storyeval.generate.ngram_lm import KneserNeyLM, ngram_tokens, rerank_continuations
    from storyeval.learn.data import corpus_hash
    from storyeval.text import split_sentences

    try:
        training = read_stories(train)
        sentences = [ngram_tokens(s) for t in training for s in split_sentences(t.story)]
        lm = KneserNeyLM.fit(sentences, order=order, discount=discount)
        result = rerank_continuations(
            read_stories(stories), lm, keep=keep, per_word=per_word, corpus=corpus_hash(training)
        )
        rendered = result.signature.render()
        kept = [replace(s, extra={**s.extra, "rerank_signature": rendered}) for s in result.stories]
        write_stories(output, kept)
    except (StoryevalError, OSError, ValueError) as exc:
        raise user_error(exc) from None
    typer.echo(f"kept {len(kept)} of the continuations ({len(sentences)} training sentences)")
    typer.echo(f"signature: {rendered}")


def register(app: typer.Typer) -> None:
    """Add ``storyeval rerank``."""
    app.command("rerank", rich_help_panel="Generate")(rerank)
