"""Compute the BERTScore rescaling baseline that storyeval ships for its offline encoder.

A baseline ``b`` is the expected BERTScore of unrelated text pairs; rescaling maps ``x`` to
``(x - b) / (1 - b)`` so that unrelated pairs score about 0 (Zhang et al. 2020, "Rescaling
BERTScore with baselines"). bert-score computed its baselines from 1M random pairs of Common
Crawl sentences and ships them for hub models only. The offline encoder (all-MiniLM-L6-v2)
has none, so this script computes one, for every layer, from random pairs of sentences of
*different* stories in examples/human.jsonl (prompts and stories, split by pysbd): a small,
single-domain sample, which the metric cards and the file header say.

Run: python scripts/bertscore_baseline.py [--pairs 20000] [--seed 0]
Writes: src/storyeval/metrics/data/bertscore_baseline_all-MiniLM-L6-v2.csv
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "src" / "storyeval" / "metrics" / "data" / "bertscore_baseline_all-MiniLM-L6-v2.csv"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=TARGET)
    args = parser.parse_args()

    from storyeval.corpus import read_stories
    from storyeval.metrics.context import EncoderCache, num_layers
    from storyeval.metrics.embedding import Greedy
    from storyeval.models import load_encoder
    from storyeval.text import split_sentences

    stories = read_stories(ROOT / "examples" / "human.jsonl")
    sentences: list[tuple[int, str]] = []
    for index, story in enumerate(stories):
        for text in (story.prompt, story.story):
            sentences += [(index, s) for s in split_sentences(text)]
    rng = np.random.default_rng(args.seed)
    pairs: list[tuple[str, str]] = []
    while len(pairs) < args.pairs:
        i, j = rng.integers(0, len(sentences), size=2)
        if sentences[i][0] != sentences[j][0]:
            pairs.append((sentences[i][1], sentences[j][1]))
    encoder = load_encoder()
    cache = EncoderCache(encoder)
    layers = list(range(num_layers(encoder.model) + 1))
    cache.request([s for _, s in sentences], layers)
    cache.run()
    rows = []
    for layer in layers:
        greedy = Greedy(cache, layer)
        scores = np.array([greedy.pair(c, r) for c, r in pairs])
        rows.append((layer, *scores.mean(axis=0)))
        print(f"layer {layer}: P {rows[-1][1]:.6f} R {rows[-1][2]:.6f} F {rows[-1][3]:.6f}")
    header = [
        f"# BERTScore baseline for {encoder.identity} (no idf), computed by scripts/bertscore_baseline.py",
        f"# from {len(pairs)} random pairs (seed {args.seed}) of sentences of different stories in",
        f"# examples/human.jsonl ({len(sentences)} sentences, 60 stories): a small single-domain",
        "# sample, not bert-score's 1M Common Crawl pairs; rows are hidden-state layers (0 = embeddings).",
        "LAYER,P,R,F",
    ]
    body = [f"{layer},{p:.8f},{r:.8f},{f:.8f}" for layer, p, r, f in rows]
    args.output.write_text("\n".join(header + body) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
