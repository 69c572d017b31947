"""Judge speed, as ratios measured in one run on the same model and stories.

1. Absolute judging from the answer probabilities (one forward pass per story and criterion)
   against generate-then-parse (the judge writes its answer, which is parsed): target >= 3x.
2. Probabilities with the rubric prefix computed once per criterion (prefix cache) against
   the full prompt every time.

    python benchmarks/bench_judge.py [--stories N] [--threads T]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from storyeval.corpus import read_stories
from storyeval.judge import judge_stories, load_rubric
from storyeval.judge.backends import Decoding, TransformersJudge
from storyeval.judge.core import JudgeSettings
from storyeval.judge.rubric import Rubric

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _timed(label: str, run: object) -> float:
    started = time.perf_counter()
    result = run()  # type: ignore[operator]
    seconds = time.perf_counter() - started
    print(
        f"{label:42s} {seconds:7.2f} s  ({len(result.judgments)} scores, {len(result.failures)} parse failures)"
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stories", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    stories = read_stories(EXAMPLES / "stories.jsonl")[: args.stories]
    rubric = load_rubric("karpinska")
    written = Rubric.model_validate({**rubric.model_dump(), "analyse_first": False})
    cached, plain = TransformersJudge(prefix_cache=True), TransformersJudge(prefix_cache=False)
    judge_stories(stories[:2], rubric, [cached])  # warm-up: model loaded, kernels ready
    probabilities = _timed(
        "probabilities, prefix cache", lambda: judge_stories(stories, rubric, [cached])
    )
    full = _timed(
        "probabilities, full prompt each time", lambda: judge_stories(stories, rubric, [plain])
    )

    class Writer(TransformersJudge):
        """The same model, answering in writing (as a server without log-probabilities)."""

        def answer(self, requests, decoding, *, sample=0):  # type: ignore[no-untyped-def]
            from dataclasses import replace

            return self._written([replace(r, generate=True) for r in requests], decoding, sample)

    writer = Writer(prefix_cache=False)
    settings = JudgeSettings(decoding=Decoding(0.0, 8, 0))
    generated = _timed(
        "generate (8 tokens) then parse",
        lambda: judge_stories(stories, written, [writer], settings=settings),
    )
    print(
        f"\nprobabilities vs generate-then-parse: {generated / probabilities:.2f}x (target >= 3x)"
    )
    print(f"prefix cache vs full prompt:          {full / probabilities:.2f}x")


if __name__ == "__main__":
    main()
