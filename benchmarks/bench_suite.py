"""Benchmark: the whole default metric suite against one bare encoder forward pass.

Prints, measured in one process on the same stories:

* the time of one bare forward pass of the encoder over every distinct text the suite's
  embedding metrics read (stories, references, prompts and sentences; sorted by length,
  batched, nothing kept) - the floor any implementation of those metrics pays;
* the time of the whole default suite (``score_stories`` without ``metrics``), and its ratio
  to that pass (target: at most 1.3);
* the same ratio for the suite without perplexity (the only metric that runs a second,
  larger network), and with perplexity under bfloat16 autocast (``perplexity.precision``),
  and per-metric times, so the ratio can be read.

Models are loaded before timing (loading is a one-off cost shared by every run).

Run: python benchmarks/bench_suite.py [--limit N] [--bootstrap 1000]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bare_forward(  # type: ignore[no-untyped-def]
    encoder, texts: list[str], max_batch: int = 32, batch_tokens: int = 4096
) -> float:
    """One forward pass of the whole encoder over ``texts`` (sorted by length, in the
    batches the encoder cache makes by default, outputs discarded): the floor for any metric
    that needs their embeddings."""
    import torch

    tokenizer, model = encoder.tokenizer, encoder.model
    started = time.perf_counter()
    ids = tokenizer(texts, add_special_tokens=True, truncation=True)["input_ids"]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    batches: list[list[int]] = []
    for i in order:
        if (
            batches
            and len(batches[-1]) < max_batch
            and (len(batches[-1]) + 1) * len(ids[i]) <= batch_tokens
        ):
            batches[-1].append(i)
        else:
            batches.append([i])
    with torch.inference_mode():
        for batch in batches:
            width = max(len(ids[i]) for i in batch)
            input_ids = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.zeros_like(input_ids)
            for row, i in enumerate(batch):
                input_ids[row, : len(ids[i])] = torch.tensor(ids[i])
                mask[row, : len(ids[i])] = 1
            model(input_ids=input_ids, attention_mask=mask)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="score only the first N stories")
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=1, help="runs of the suite (best kept)")
    args = parser.parse_args()

    import torch

    from storyeval.corpus import read_stories
    from storyeval.metrics import default_suite, score_stories
    from storyeval.metrics.context import ScoringContext
    from storyeval.models import load_causal_lm, load_encoder, load_glove, load_spacy
    from storyeval.text import split_sentences

    stories = read_stories(ROOT / "examples" / "stories.jsonl")
    if args.limit:
        stories = stories[: args.limit]
    encoder = load_encoder()
    load_causal_lm(), load_glove(), load_spacy()
    names, _ = default_suite(stories)

    texts: set[str] = set()
    for story in stories:
        texts.add(story.story.strip())
        texts.update(r.strip() for r in story.references)
        if story.prompt.strip():
            texts.add(story.prompt.strip())
        texts.update(split_sentences(story.story))
        for reference in story.references:
            texts.update(split_sentences(reference))
    distinct = sorted(texts)

    bare_forward(encoder, distinct[:32])  # warm-up
    # the machine may be shared: time the bare pass before and after the suite (and between
    # repeats) and keep the fastest of each, so that a busy moment does not decide the ratio
    bare_times = [bare_forward(encoder, distinct)]
    suite_times, runs = [], []
    for _ in range(args.repeats):
        started = time.perf_counter()
        runs.append(
            score_stories(stories, None, bootstrap=args.bootstrap, context=ScoringContext())
        )
        suite_times.append(time.perf_counter() - started)
        bare_times.append(bare_forward(encoder, distinct))
    best = min(range(len(suite_times)), key=lambda i: suite_times[i])
    run, suite, bare = runs[best], suite_times[best], min(bare_times)
    without_lm = suite - run.timings.get("perplexity", 0.0)
    fast_lm = score_stories(
        stories,
        "perplexity",
        bootstrap=0,
        options={"perplexity.precision": "bfloat16"},
        context=ScoringContext(),
    ).timings["perplexity"]

    cache = run.context.caches[0] if run.context and run.context.caches else None
    print(
        f"stories: {len(stories)}; default suite: {len(names)} metrics; torch threads {torch.get_num_threads()}"
    )
    print(f"distinct encoder texts: {len(distinct)}")
    print(
        f"bare encoder forward pass     : {bare:8.2f} s (best of {len(bare_times)}: "
        + ", ".join(f"{t:.2f}" for t in bare_times)
        + ")"
    )
    if cache is not None:
        print(
            f"suite's encoder pass (cache)  : {run.timings['encoder']:8.2f} s "
            f"({cache.stats.texts} texts, {cache.stats.tokens} tokens, "
            f"{cache.stats.padded_tokens / max(cache.stats.tokens, 1):.2f}x padding)"
        )
    print(f"whole default suite           : {suite:8.2f} s (best of {len(suite_times)})")
    print(f"ratio suite / bare pass       : {suite / bare:8.2f} (target <= 1.3)")
    print(f"ratio suite without perplexity: {without_lm / bare:8.2f}")
    print(
        f"ratio with bfloat16 perplexity: {(without_lm + fast_lm) / bare:8.2f} "
        f"(perplexity {fast_lm:.2f} s instead of {run.timings.get('perplexity', 0.0):.2f} s)"
    )
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("per-metric seconds (after the shared encoder pass):")
    for name, seconds in sorted(run.timings.items(), key=lambda item: -item[1]):
        print(f"  {name:24s} {seconds:8.2f}")


if __name__ == "__main__":
    main()
