"""Benchmark: ``storyeval view`` on a large corpus (issue 29): 100,000 stories with two scores
each, opened in a fresh process (imports included) until the first table page is served.

* memory: the files read and joined in memory (``--index never``);
* index, first open: the same, then written to the SQLite index;
* index, reopen: the index read again (texts stay on disk; the views query it).

Each case runs in its own process (so its peak memory is its own); the target is a reopen under
3 seconds on this machine, and the ratio to reading the files in memory.

Run: python benchmarks/bench_view.py [--stories 100000]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

CASE = """
import json, resource, sys, time
start = time.perf_counter()
from fastapi.testclient import TestClient
from storyeval.view import create_view_app, load_view_data
from storyeval.view.index import open_view_data
inputs, mode, folder = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
data = load_view_data(inputs) if mode == "memory" else open_view_data(inputs, index_dir=folder)[0]
page = TestClient(create_view_app(data)).get("/")
assert page.status_code == 200
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _corpus(folder: Path, n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [
        "the",
        "a",
        "cat",
        "dog",
        "ran",
        "home",
        "night",
        "light",
        "sea",
        "storm",
        "she",
        "he",
        "found",
        "lost",
        "old",
        "new",
    ]
    stories, scores = folder / "stories.jsonl", folder / "scores.jsonl"
    with stories.open("w", encoding="utf-8") as s_out, scores.open("w", encoding="utf-8") as c_out:
        for i in range(n):
            text = " ".join(rng.choice(words) for _ in range(120)) + "."
            record = {"id": f"s{i:06d}", "prompt": f"Prompt {i // 4}.", "story": text,
                      "system": f"sys{i % 4}", "prompt_id": f"p{i // 4}"}  # fmt: skip
            s_out.write(json.dumps(record) + "\n")
            for metric in ("m1", "m2"):
                score = {"item_id": record["id"], "metric": metric, "value": rng.random(),
                         "signature": f"{metric}|v1"}  # fmt: skip
                c_out.write(json.dumps(score) + "\n")
    return [str(stories), str(scores)]


def _run(inputs: list[str], mode: str, folder: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CASE, ",".join(inputs), mode, str(folder)],
        check=True,
        capture_output=True,
        text=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stories", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        inputs = _corpus(folder, args.stories)
        size = sum(Path(p).stat().st_size for p in inputs) / 1e6
        print(f"{args.stories} stories, {size:.0f} MB of input")
        memory = _run(inputs, "memory", folder / "idx")
        first = _run(inputs, "index", folder / "idx")
        again = _run(inputs, "index", folder / "idx")
        for name, result in (("in memory", memory), ("index, first open", first),
                             ("index, reopen", again)):  # fmt: skip
            print(f"{name:>18}: {result['seconds']:6.2f} s to the first page, "
                  f"peak {result['peak_mb']:.0f} MB")  # fmt: skip
        verdict = "meets" if again["seconds"] < 3 else "misses"
        print(f"reopen / in memory: {again['seconds'] / memory['seconds']:.2f}; "
              f"{verdict} the 3 s target")  # fmt: skip


if __name__ == "__main__":
    main()
