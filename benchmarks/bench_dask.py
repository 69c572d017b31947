"""Benchmark: scoring on Dask against the local engine (issue 17), ratios measured in one run.

Scores the same corpus with the model metrics (BERTScore, MoverScore-free, perplexity: the
work that dominates a real run) three ways: the local engine, a local Dask cluster with one
worker, and one with two workers (one CPU each: ``--num-cpus 1``), and prints

* the speed-up of 2 workers over 1 (target >= 1.7x on this 2-core machine);
* Dask's overhead against the local engine on a small corpus (target <= 1.2x);
* the measured per-story cost of each part, from which docs/scaling.md estimates the cost of
  scoring 1M stories on N GPUs.

The corpus is the 180 example stories repeated (``--copies``) with distinct ids and a mark
that makes every copy's texts distinct (identical texts would be encoded once by the local
engine's per-run cache but once per block on the cluster). Models
are loaded once per worker before timing (a warm-up run), as a long-running cluster would.

Run: python benchmarks/bench_dask.py [--copies 4] [--metrics bertscore_f,perplexity]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def corpus(copies: int, directory: Path) -> Path:
    rows = [json.loads(line) for line in (ROOT / "examples" / "stories.jsonl").open()]
    path = directory / f"stories-x{copies}.jsonl"
    with path.open("w") as out:
        for k in range(copies):
            for row in rows:
                # every copy's texts differ, so no engine's per-run cache of encoded texts
                # turns a copy into free work
                mark = f" ({k})" if k else ""
                copy = {**row, "id": f"{row['id']}#{k}", "story": row["story"] + mark}
                if row.get("reference"):
                    copy["reference"] = row["reference"] + mark
                out.write(json.dumps(copy) + "\n")
    return path


def timed(function):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--small", type=int, default=1, help="copies in the overhead corpus")
    parser.add_argument("--metrics", default="bertscore_f,perplexity")
    parser.add_argument("--block-size", type=int, default=60)
    args = parser.parse_args()
    import warnings

    warnings.simplefilter("ignore")
    from storyeval.engine.dask import close, connect
    from storyeval.metrics.files import score_file, score_source
    from storyeval.models.devices import configure_threads

    folder = Path(tempfile.mkdtemp())
    big, small = corpus(args.copies, folder), corpus(args.small, folder)
    settings = {"missing": "skip", "bootstrap": 0, "block_size": args.block_size}
    n_big = 180 * args.copies
    print(f"corpus: {n_big} stories ({args.copies} x the examples); metrics {args.metrics}; "
          f"blocks of {args.block_size}; load {', '.join(f'{x:.2f}' for x in os.getloadavg())}")  # fmt: skip
    threads = configure_threads(1)
    score_file(small, args.metrics, **settings)  # load the models in this process
    local_small, _ = timed(lambda: score_file(small, args.metrics, **settings))
    local_big, _ = timed(lambda: score_file(big, args.metrics, **settings))
    results = {}
    for workers in (1, 2):
        client = connect(workers=workers)
        try:
            score_source(small, args.metrics, client=client, **settings)  # load models on workers
            results[workers] = timed(
                functools.partial(score_source, big, args.metrics, client=client, **settings)
            )[0]
            if workers == 1:
                results["small"] = timed(
                    functools.partial(score_source, small, args.metrics, client=client, **settings)
                )[0]
        finally:
            close(client)
    print(
        f"local engine ({threads} thread)      : {local_big:8.1f} s  ({local_big / n_big * 1000:.0f} ms per story)"
    )
    print(f"dask, 1 worker                 : {results[1]:8.1f} s")
    print(f"dask, 2 workers                : {results[2]:8.1f} s")
    print(f"speed-up of 2 workers over 1   : {results[1] / results[2]:8.2f}x (target >= 1.7)")
    print(f"small corpus ({180 * args.small} stories): local {local_small:.1f} s, dask 1 worker "
          f"{results['small']:.1f} s: overhead {results['small'] / local_small:.2f}x (target <= 1.2)")  # fmt: skip
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
