"""Benchmark: the set-level diversity measures of issue 30 at 1k, 10k and 100k stories.

Synthetic stories (60 words drawn from a Zipf vocabulary of 20,000 words), four systems, five
samples per prompt and system; every measure through :mod:`storyeval.functional` with its
model-free kernel, so the time is the measure's own (an encoder's pass over the stories is
linear and timed in ``bench_speed.py``):

* ``compression_ratio`` (gzip of each system's stories),
* ``vendi_score`` on 384-dimensional vectors (the embedding kernel's own cost: the eigenvalues
  of the 384 x 384 feature Gram, linear in n), and with ``kernel: ngram`` where the n-gram
  kernel allows it (its Gram is as large as the smaller of a system's stories and distinct
  n-grams: cubic, refused beyond 8,192),
* ``functional_diversity`` (``kernel: ngram``; classes within each prompt's samples),
* precision and recall on 384-dimensional vectors (one system against as many reference
  vectors, one seed): exact k nearest neighbours, quadratic in the subsample, which the default
  caps at 5,000 a side (``P&R``); ``P&R all`` is the uncapped cost (every story), timed at 1k
  and 10k and extrapolated to 100k.

Prints seconds per 1,000 stories at each size: a linear measure keeps the same number.

Run: python benchmarks/bench_set_measures.py [--sizes 1000,10000,100000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np


def _corpus(size: int, seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{i}" for i in range(20_000)])
    ids = np.minimum(rng.zipf(1.3, size=(size, 60)), 20_000) - 1
    texts = [" ".join(vocabulary[row]) for row in ids]
    systems = [f"sys{i % 4}" for i in range(size)]
    prompts = [f"p{i // 20}" for i in range(size)]  # 4 systems x 5 samples per prompt
    return texts, prompts, systems


def _timed(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def _row(size: int, pr_times: dict[int, float]) -> str:
    """One size's line: seconds per 1,000 stories of each measure."""
    from storyeval import functional as F
    from storyeval.metrics.precision_recall import prdc, precision_recall
    from storyeval.metrics.set_diversity import vendi

    texts, prompts, systems = _corpus(size)
    vectors = np.random.default_rng(2).normal(size=(size, 384))
    per_system = [vectors[i::4] for i in range(4)]
    row = [
        _timed(lambda: F.compression_ratio(texts, systems)),
        _timed(lambda: [vendi(v) for v in per_system]),
        _timed(lambda: F.vendi_score(texts, systems, kernel="ngram"))
        if size <= 10_000
        else float("nan"),
        _timed(lambda: F.functional_diversity(texts, prompts, systems, kernel="ngram")),
    ]
    rng = np.random.default_rng(1)
    people, model = rng.normal(size=(size, 384)), rng.normal(size=(size, 384))
    capped = _timed(lambda: precision_recall(people, model, k=5, seeds=1))
    if size <= 10_000:
        pr_times[size] = _timed(lambda: prdc(people, model, k=5))
        every = f"{pr_times[size] / size * 1000:10.3f}"
    else:
        largest = max(pr_times)
        estimate = pr_times[largest] * (size / largest) ** 2
        every = f"~{estimate / size * 1000:9.1f}"
    widths = (12, 8, 12, 11)
    cells = " ".join(f"{t / size * 1000:>{w}.3f}" for t, w in zip(row, widths, strict=True))
    return f"{size:>8,} {cells} {capped / size * 1000:>8.3f} {every}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args()
    print(f"{'stories':>8} {'compression':>12} {'vendi':>8} {'vendi-ngram':>12} {'functional':>11}"
          f" {'P&R':>8} {'P&R all':>10}   (seconds per 1,000 stories)")  # fmt: skip
    pr_times: dict[int, float] = {}
    for size in (int(s) for s in args.sizes.split(",")):
        print(_row(size, pr_times), flush=True)
    print("P&R all at 100k is extrapolated (quadratic) from the largest measured size; the ngram "
          "kernel's Vendi score is not run at 100k (25,000 stories a system: refused).")  # fmt: skip


if __name__ == "__main__":
    main()
