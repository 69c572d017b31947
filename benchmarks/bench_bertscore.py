"""Benchmark: storyeval's BERTScore against the bert-score package, same model and layer.

Scores the same 500 story/reference pairs in one process with both implementations (each
model loaded before timing, each run repeated and the best time kept) and prints both times,
their ratio and the largest score difference.

Pairs: the 120 machine stories of examples/stories.jsonl and variants of them (without the
first or last one or two sentences), each against its human reference: 500 distinct
candidates and 60 references.

Run: python benchmarks/bench_bertscore.py [--repeats 5] [--pairs 500]

The two implementations alternate and the best time of each is kept, so that other work on
a shared machine disturbs the ratio as little as possible.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def pairs(n: int) -> tuple[list[str], list[str]]:
    from storyeval.corpus import read_stories
    from storyeval.text import split_sentences

    candidates: list[str] = []
    references: list[str] = []
    machine = [s for s in read_stories(ROOT / "examples" / "stories.jsonl") if s.references]
    for cut in range(5):
        for story in machine:
            sentences = split_sentences(story.story)
            variant = [
                sentences,
                sentences[1:],
                sentences[:-1],
                sentences[2:],
                sentences[:-2],
            ][cut]
            text = " ".join(variant)
            if text.strip() and text not in candidates:
                candidates.append(text)
                references.append(story.references[0])
    if len(candidates) < n:
        raise SystemExit(f"only {len(candidates)} distinct candidates; ask for fewer pairs")
    return candidates[:n], references[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layer", type=int, default=4)
    args = parser.parse_args()

    import torch
    from bert_score import BERTScorer

    from storyeval.corpus import Story
    from storyeval.metrics import score_stories
    from storyeval.models import load_encoder

    candidates, references = pairs(args.pairs)
    encoder = load_encoder()
    stories = [
        Story(f"c{i}", "", c, reference=r, system="bench")
        for i, (c, r) in enumerate(zip(candidates, references, strict=True))
    ]
    scorer = BERTScorer(model_type=encoder.path, num_layers=args.layer, lang="en")

    def ours() -> np.ndarray:
        run = score_stories(
            stories, "bertscore_f", options={"bertscore.layer": args.layer}, bootstrap=0
        )
        return np.array([s.value for s in run.scores])

    def theirs() -> np.ndarray:
        _, _, f = scorer.score(candidates, references)
        return f.numpy().astype(np.float64)

    ours()  # warm up both (first-call allocations, lazy imports)
    theirs()
    times: dict[str, list[float]] = {"storyeval": [], "bert-score": []}
    cpu: dict[str, list[float]] = {"storyeval": [], "bert-score": []}
    results = {}
    for _ in range(args.repeats):
        for name, function in (("storyeval", ours), ("bert-score", theirs)):
            started, started_cpu = time.perf_counter(), time.process_time()
            results[name] = function()
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - started_cpu)
    best = {name: min(values) for name, values in times.items()}
    best_cpu = {name: min(values) for name, values in cpu.items()}
    difference = float(np.abs(results["storyeval"] - results["bert-score"]).max())
    print(f"pairs: {len(candidates)} (distinct texts: {len(set(candidates) | set(references))})")
    print(f"model: {encoder.identity}, layer {args.layer}, torch threads {torch.get_num_threads()}")
    print(f"bert-score : {best['bert-score']:.3f} s (best of {args.repeats})")
    print(f"storyeval  : {best['storyeval']:.3f} s (best of {args.repeats})")
    print(f"speed-up   : {best['bert-score'] / best['storyeval']:.2f}x (target >= 1.5x)")
    print(
        f"CPU time   : bert-score {best_cpu['bert-score']:.3f} s, storyeval "
        f"{best_cpu['storyeval']:.3f} s, ratio {best_cpu['bert-score'] / best_cpu['storyeval']:.2f}x"
    )
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"max |F difference|: {difference:.2e} (target < 1e-4)")


if __name__ == "__main__":
    main()
