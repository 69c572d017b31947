"""Benchmark: six exact fast paths, each a ratio against the code it replaced, measured in one
run on this machine.

* ``head``: the preference head's fit with its gradient in closed form (NumPy) against the
  same full-batch Adam through torch's autograd, on a training set the size of the example
  corpus (180 stories, 384 encoder features, about 600 pairs); the largest weight difference is
  printed beside the ratio (target: >= 4x, difference <= 1e-9);
* ``levenshtein``: Myers' bit-parallel edit distance against the plain dynamic programme on
  two texts of 2,000 characters (target: >= 20x, the same distance);
* ``sentences``: splitting 20 long texts (the example stories joined twelve at a time,
  about 900 words) a second time, remembered, against the first (target: >= 50x);
* ``wordnet``: a fresh process's first WordNet look-up through storyeval's reader against
  NLTK's ``nltk.corpus.wordnet``, which first maps WordNet 3.0 onto itself (target: >= 1.3x,
  the same synsets);
* ``export``: ``view --export`` of the example corpus with 42 metrics through httpx's ASGI
  transport in one event loop against the test client it used before (target: >= 1.2x, the
  same pages);
* ``item_rows``: the rows of 1,000 stories' cards (prompt pages) in a score table of 5,000
  stories and 42 metrics, from each item's positions found once against masking the whole
  table for each story, as every card did (target: >= 3x, the same rows; the masks made an
  export of every prompt page quadratic in the corpus).

Run: python benchmarks/bench_fast_paths.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def _best(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


def head(repeats: int) -> dict[str, float]:
    from storyeval.learn.preference import PreferenceConfig, fit_head
    from storyeval.learn.preference import head as heads

    rng = np.random.default_rng(0)
    features, lengths = rng.normal(size=(180, 384)), rng.normal(size=180)
    targets = rng.normal(size=180)
    pairs = [(int(i), int(j), 1.0) for i, j in rng.integers(0, 180, size=(600, 2)) if i != j]
    config = PreferenceConfig()

    closed_form = heads._fit_linear
    fast, new = _best(lambda: fit_head(features, lengths, targets, pairs, config), repeats)
    heads._fit_linear = heads._fit_with_autograd
    try:
        slow, old = _best(lambda: fit_head(features, lengths, targets, pairs, config), repeats)
    finally:
        heads._fit_linear = closed_form
    difference = max(float(np.abs(new.weights[k] - old.weights[k]).max()) for k in old.weights)
    return {"autograd_s": slow, "closed_form_s": fast, "ratio": slow / fast, "max_diff": difference}


def _plain_levenshtein(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, item in enumerate(a, start=1):
        current = [i] + [0] * len(b)
        for j, other in enumerate(b, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (item != other))
        previous = current
    return previous[-1]


def levenshtein(repeats: int) -> dict[str, float]:
    from storyeval.metrics.edits import levenshtein as bit_parallel

    rng = random.Random(0)
    a = "".join(rng.choice("abcdefghij ") for _ in range(2000))
    b = a[:700] + "an edit" + a[760:1500] + a[1530:]
    fast, distance = _best(lambda: bit_parallel(a, b), repeats)
    slow, expected = _best(lambda: _plain_levenshtein(a, b), 1)
    assert distance == expected, (distance, expected)
    return {"plain_s": slow, "bit_parallel_s": fast, "ratio": slow / fast, "distance": distance}


def sentences(repeats: int) -> dict[str, float]:
    from storyeval.corpus import read_stories
    from storyeval.text import _pysbd_sentences, split_sentences

    stories = [s.story for s in read_stories(ROOT / "examples" / "stories.jsonl")]
    texts = [" ".join(stories[i : i + 12]) for i in range(0, 240, 12)][:20]
    _pysbd_sentences.cache_clear()
    started = time.perf_counter()
    for text in texts:
        split_sentences(text)
    first = time.perf_counter() - started
    again, _ = _best(lambda: [split_sentences(text) for text in texts], repeats)
    words = float(np.mean([len(t.split()) for t in texts]))
    return {"first_s": first, "again_s": again, "ratio": first / again, "words": words}


_LOOKUP = (
    "import time; started = time.perf_counter(); {load}; "
    "found = [s.name() for s in wordnet.synsets('dog', pos='n')]; "
    "print(time.perf_counter() - started, len(found))"
)


def wordnet(repeats: int) -> dict[str, float]:
    import subprocess
    import sys

    def first_lookup(load: str) -> tuple[float, int]:
        runs = []
        for _ in range(repeats):
            done = subprocess.run(
                [sys.executable, "-c", _LOOKUP.format(load=load)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            seconds, count = done.stdout.split()
            runs.append((float(seconds), int(count)))
        return min(runs)

    nltk_s, nltk_found = first_lookup("from nltk.corpus import wordnet")
    ours_s, ours_found = first_lookup(
        "from storyeval.perturb.lexicon import _wordnet; wordnet = _wordnet()"
    )
    assert ours_found == nltk_found, (ours_found, nltk_found)
    return {"nltk_s": nltk_s, "storyeval_s": ours_s, "ratio": nltk_s / ours_s}


def _example_view_data() -> Any:
    """The example corpus, its ratings and 42 metrics' scores, joined as the viewer does."""
    import json
    import tempfile

    from storyeval.corpus import read_stories
    from storyeval.view import load_view_data

    folder = Path(tempfile.mkdtemp())
    rows = [
        {"item_id": story.id, "metric": f"metric_{k:02d}", "value": 1 / (k + 3) + len(story.story)}
        for story in read_stories(ROOT / "examples" / "stories.jsonl")
        for k in range(42)
    ]
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    examples = ROOT / "examples"
    return load_view_data(
        [examples / "stories.jsonl", folder / "scores.jsonl", examples / "judgments.jsonl"]
    )


def export(repeats: int) -> dict[str, float]:
    import tempfile
    from collections import deque

    from fastapi.testclient import TestClient

    from storyeval.view.app import create_view_app
    from storyeval.view.export import _rewrite, _seeds, export_site, page_file

    data = _example_view_data()

    def test_client_crawl() -> Path:  # the crawl export_site replaced
        target = Path(tempfile.mkdtemp())
        client = TestClient(create_view_app(data, allowed_hosts=["testserver"]))
        known = {url: page_file(url) for url, _ in _seeds(data)}
        queue, skipped = deque(known), set[str]()
        while queue:
            url = queue.popleft()
            body = _rewrite(client.get(url).text, queue, known, 5000, skipped)
            (target / known[url]).write_text(body, encoding="utf-8")
        return target

    def in_one_loop() -> Path:
        target = Path(tempfile.mkdtemp()) / "site"
        export_site(data, target)
        return target

    fast, new = _best(in_one_loop, repeats)
    slow, old = _best(test_client_crawl, repeats)
    pages = sorted(p.name for p in old.glob("*.html"))  # the crawled pages (no extras)
    assert all((old / name).read_bytes() == (new / name).read_bytes() for name in pages)
    return {"test_client_s": slow, "asgi_s": fast, "ratio": slow / fast, "pages": len(pages)}


def item_rows(repeats: int) -> dict[str, float]:
    import pandas as pd

    from storyeval.view.app import ItemRows

    ids = [f"s{i:05d}" for i in range(5000)]
    table = pd.DataFrame(
        {
            "item_id": np.repeat(ids, 42),
            "metric": np.tile([f"metric_{k:02d}" for k in range(42)], len(ids)),
            "value": np.random.default_rng(0).random(42 * len(ids)),
        }
    )
    wanted = ids[::5]

    def found_once() -> list[Any]:
        rows = ItemRows(table)
        return [rows(item_id) for item_id in wanted]

    fast, new = _best(found_once, repeats)
    slow, old = _best(lambda: [table[table["item_id"] == i] for i in wanted], repeats)
    assert all(
        a.equals(b) and list(a.index) == list(b.index) for a, b in zip(new, old, strict=True)
    )
    return {"masked_s": slow, "item_rows_s": fast, "ratio": slow / fast, "stories": len(wanted)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    benchmarks: tuple[tuple[str, Callable[[int], dict[str, float]]], ...] = (
        ("head", head),
        ("levenshtein", levenshtein),
        ("sentences", sentences),
        ("wordnet", wordnet),
        ("export", export),
        ("item_rows", item_rows),
    )
    for name, run in benchmarks:
        found = run(args.repeats)
        print(name, " ".join(f"{k}={v:.4g}" for k, v in found.items()))


if __name__ == "__main__":
    main()
