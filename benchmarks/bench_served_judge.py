"""A judge behind a served model: does storyeval keep the server as busy as a bare client?

Starts llama.cpp's server (``scripts/llama_server.sh`` builds it) on 127.0.0.1 with the
packaged SmolLM2 GGUF and 16 slots, then asks the same questions (``--stories`` stories x the
rubric's criteria, first-token probabilities) two ways at concurrency 1, 4 and 16: storyeval's
judge (``judge_stories`` with the endpoint backend, no cache) and a bare client sending the
same requests from a thread pool. Each measurement gets a freshly started server, so neither
side profits from the other's prompt cache, in the order bare, storyeval, storyeval, bare
(the means of each side: drift on the machine cancels out). Target: storyeval at >= 0.9x the bare client's
answers per second at every concurrency.

It also measures the server's prompt cache: the bare client sends the questions story by story
(a story's criteria share the prompt up to the question, which llama.cpp's slots reuse) and
criterion by criterion, at concurrency 1.

    python benchmarks/bench_served_judge.py [--stories 12] [--repeats 2] [-o out/bench_served_judge.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONCURRENCY = (1, 4, 16)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """llama-server on 127.0.0.1, started fresh (an empty prompt cache) and stopped on exit."""

    def __init__(self, slots: int = 16) -> None:
        from storyeval.models.loading import _packaged_gguf_path

        binary = ROOT / ".llama" / "bin" / "llama-server"
        found = str(binary) if binary.exists() else shutil.which("llama-server")
        if found is None:
            raise SystemExit("no llama-server: run scripts/llama_server.sh first")
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        command = [
            found,
            "-m",
            str(_packaged_gguf_path()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]
        command += ["-c", str(2048 * slots), "-np", str(slots), "-t", "2"]
        self.log = Path(tempfile.mkstemp(suffix=".log")[1])
        self.process = subprocess.Popen(
            command, stdout=self.log.open("w"), stderr=subprocess.STDOUT
        )

    def __enter__(self) -> str:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return f"{self.url}/v1"
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"llama-server did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.25)

    def __exit__(self, *_: Any) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _questions(count: int) -> tuple[list[Any], Any, list[Any]]:
    from storyeval.corpus import read_stories
    from storyeval.judge import load_rubric
    from storyeval.judge.prompts import absolute_request

    stories = read_stories(ROOT / "examples" / "stories.jsonl")[:count]
    rubric = load_rubric("karpinska")
    requests = [absolute_request(s, rubric, c) for c in rubric.criteria for s in stories]
    return stories, rubric, requests


def _bare(url: str, requests: list[Any], concurrency: int) -> float:
    """Answers per second of a thread pool sending the judge's requests as they are."""
    import openai

    from storyeval.judge.backends import Decoding, OpenAIJudge

    client = openai.OpenAI(base_url=url, api_key="local", max_retries=0)
    shape = OpenAIJudge("smollm2", base_url=url)  # the very same request body
    bodies = [shape._kwargs(r, Decoding(), 0) for r in requests]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(lambda body: client.chat.completions.create(**body), bodies))
    return len(bodies) / (time.perf_counter() - start)


def _storyeval(url: str, stories: list[Any], rubric: Any, concurrency: int) -> float:
    from storyeval.judge.backends import OpenAIJudge
    from storyeval.judge.core import judge_stories

    start = time.perf_counter()
    run = judge_stories(
        stories, rubric, [OpenAIJudge("smollm2", base_url=url, concurrency=concurrency)]
    )
    elapsed = time.perf_counter() - start
    if run.failures:
        raise SystemExit(f"{len(run.failures)} questions failed: {run.failures[:2]}")
    return len(run.judgments) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stories", type=int, default=12)
    parser.add_argument("--repeats", type=int, choices=(1, 2), default=2, help="1: AB; 2: ABBA")
    parser.add_argument("-o", "--output", type=Path, default=Path("out/bench_served_judge.json"))
    args = parser.parse_args()
    stories, rubric, requests = _questions(args.stories)
    rows = []
    for concurrency in CONCURRENCY:
        bares, ours_ = [], []
        for order in ("ab", "ba")[: args.repeats]:  # ABBA: drift on the machine cancels out
            for side in order:
                with Server() as url:
                    if side == "a":
                        bares.append(_bare(url, requests, concurrency))
                    else:
                        ours_.append(_storyeval(url, stories, rubric, concurrency))
        bare, ours = sum(bares) / len(bares), sum(ours_) / len(ours_)
        rows.append({"concurrency": concurrency, "bare_answers_per_s": bare,
                     "storyeval_answers_per_s": ours, "ratio": ours / bare, "met": ours / bare >= 0.9})  # fmt: skip
        print(
            f"concurrency {concurrency}: bare {bare:.2f}/s, storyeval {ours:.2f}/s, ratio {ours / bare:.2f}"
        )
    per_story = len(rubric.criteria)
    story_major = [
        requests[c * len(stories) + s] for s in range(len(stories)) for c in range(per_story)
    ]
    with Server() as url:
        criterion_first = _bare(url, requests, 1)
    with Server() as url:
        story_first = _bare(url, story_major, 1)
    cache = {"criterion_by_criterion_per_s": criterion_first, "story_by_story_per_s": story_first,
             "gain": story_first / criterion_first}  # fmt: skip
    print(f"prompt cache: story by story {story_first:.2f}/s, criterion by criterion "
          f"{criterion_first:.2f}/s ({cache['gain']:.2f}x)")  # fmt: skip
    report = {"questions": len(requests), "rows": rows, "prompt_cache": cache}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
