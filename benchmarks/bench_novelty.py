"""Benchmark: the novelty index (issue 30): building it, and scoring against it at 1k, 10k and
100k stories.

* build: a synthetic corpus of ``--words`` words (Zipf-distributed over 50,000 word types, in
  documents of 300 words, written out as a text file first) indexed by ``storyeval index``'s
  function; prints seconds, MB of text per second and the time a 1 GB corpus would take at
  that rate (target: minutes);
* query: ``ngram_novelty`` and ``creativity_index`` on stories of 300 words drawn from the same
  distribution: milliseconds per story and seconds per 1k stories at each size (linear: the
  same at every size).

Run: python benchmarks/bench_novelty.py [--words 20000000] [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def _corpus(path: Path, words: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{i}" for i in range(50_000)])
    with open(path, "w", encoding="utf-8") as handle:
        for start in range(0, words, 1_000_000):
            ids = np.minimum(rng.zipf(1.2, size=min(1_000_000, words - start)), 50_000) - 1
            for k in range(0, ids.size, 300):
                handle.write(" ".join(vocabulary[ids[k : k + 300]]) + "\n")
    ids = np.minimum(rng.zipf(1.2, size=300 * 1000), 50_000) - 1
    return [" ".join(vocabulary[ids[k : k + 300]]) for k in range(0, ids.size, 300)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--words", type=int, default=20_000_000)
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    from storyeval import functional as F
    from storyeval.metrics.novelty import build_index, corpus_documents

    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "corpus.txt"
        stories = _corpus(text, args.words, seed=0)
        megabytes = text.stat().st_size / 1e6
        started = time.perf_counter()
        documents = ((line, True) for line, _ in corpus_documents([text]) if line)
        index = build_index(documents, Path(tmp) / "index")
        built = time.perf_counter() - started
        print(f"== build: {index.words:,} words, {megabytes:.0f} MB of text")
        print(f"seconds {built:.1f}, {megabytes / built:.1f} MB/s, 1 GB in about "
              f"{1000 / (megabytes / built) / 60:.1f} min at this rate")  # fmt: skip
        print("\n== scoring (300-word stories): seconds per 1k stories at each size")
        for size in (int(s) for s in args.sizes.split(",")):
            texts = [stories[k % len(stories)] for k in range(size)]
            started = time.perf_counter()
            F.ngram_novelty(texts, index=index)
            F.creativity_index(texts, index=index)
            took = time.perf_counter() - started
            print(f"{size:>7,} stories: {took:7.1f} s, {took / size * 1000:6.2f} s per 1k "
                  f"({took / size * 1000 / 2:.1f} ms per story and metric)")  # fmt: skip


if __name__ == "__main__":
    main()
