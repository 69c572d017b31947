"""The judge against a real llama.cpp server: the served recipe of the GPU guide, run on a CPU.

``llama-server`` serves the offline SmolLM2's own GGUF file (Q4_1) and storyeval judges
through ``--base-url``: the label probabilities come from the server's top log-probabilities
and must agree with the local transformers backend, which computes the same weights
dequantized to float32 (llama.cpp multiplies Q4_1 weights by 8-bit activations, hence the
tolerance). Skipped unless a ``llama-server`` binary is found: ``STORYEVAL_LLAMA_SERVER``,
``.llama/bin/llama-server`` (``scripts/llama_server.sh`` builds it from PyPI, about 8
minutes on 2 cores) or ``PATH``. ``make test-served`` builds it and runs these tests.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval.corpus import Story, read_stories
from storyeval.judge import load_rubric
from storyeval.judge.core import judge_stories

pytestmark = [pytest.mark.slow, pytest.mark.served]

#: Largest difference of a label probability between the server and the local backend
#: (0.031 measured over 48 answers of the karpinska rubric on 2026-11-27).
PROBABILITY_TOLERANCE = 0.06


def _llama_server() -> str | None:
    named = os.environ.get("STORYEVAL_LLAMA_SERVER")
    if named:
        return named
    built = Path(__file__).resolve().parents[1] / ".llama" / "bin" / "llama-server"
    if built.exists():
        return str(built)
    return shutil.which("llama-server")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``llama-server`` on 127.0.0.1 with the packaged SmolLM2 GGUF; yields its ``/v1`` URL."""
    binary = _llama_server()
    if binary is None:
        pytest.skip("no llama-server here: run scripts/llama_server.sh (or make test-served)")
    from storyeval.models.loading import _packaged_gguf_path

    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    command = [binary, "-m", str(_packaged_gguf_path()), "--host", "127.0.0.1"]
    command += ["--port", str(port), "-c", "8192", "-np", "4", "-t", "2"]
    with log.open("w") as sink:
        server = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _healthy(url):
            assert server.poll() is None, f"llama-server exited: {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "llama-server did not become healthy in 120 s"
            time.sleep(0.25)
        yield f"{url}/v1"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:  # pragma: no cover - a hung server
            server.kill()


def _stories(examples_dir: Path, prompts: tuple[str, ...]) -> list[Story]:
    stories = read_stories(examples_dir / "stories.jsonl")
    return [s for s in stories if s.extra.get("prompt_id") in prompts]


def test_served_probabilities_match_the_local_backend(
    llama_server: str, examples_dir: Path
) -> None:
    from storyeval.judge.backends import OpenAIJudge, TransformersJudge

    stories = _stories(examples_dir, ("s001", "s002"))
    rubric = load_rubric("karpinska")
    served = judge_stories(
        stories, rubric, [OpenAIJudge("smollm2", base_url=llama_server, concurrency=4)]
    )
    local = judge_stories(stories, rubric, [TransformersJudge()])
    assert not served.failures
    assert len(served.judgments) == len(stories) * len(rubric.criteria)
    assert {j.extra["parse_status"] for j in served.judgments} == {"probabilities"}
    # every answer's tokens and the model that gave it, as the server reports them
    assert all(
        j.extra["prompt_tokens"] > 50 and j.extra["completion_tokens"] >= 1
        for j in served.judgments
    )
    assert sum(served.tokens["smollm2"][:1]) == sum(
        j.extra["prompt_tokens"] for j in served.judgments
    )
    assert len({j.extra["served_model"] for j in served.judgments}) == 1
    assert served.signatures["smollm2"].fields["served"] != "unlisted"
    assert not any("model changed" in note for note in served.notes)
    key = [(j.item_id, j.criterion) for j in served.judgments]
    assert key == [(j.item_id, j.criterion) for j in local.judgments]
    served_p = np.array([j.extra["probabilities"] for j in served.judgments])
    local_p = np.array([j.extra["probabilities"] for j in local.judgments])
    assert np.abs(served_p - local_p).max() < PROBABILITY_TOLERANCE
    served_v = np.array([j.value for j in served.judgments], dtype=float)
    local_v = np.array([j.value for j in local.judgments], dtype=float)
    assert np.corrcoef(served_v, local_v)[0, 1] > 0.9


def test_cli_pairwise_judge_through_llama_server_then_rank(
    llama_server: str, examples_dir: Path, tmp_path: Path, run_cli: Any
) -> None:
    story_file = tmp_path / "stories.jsonl"
    stories = _stories(examples_dir, ("s001",))
    story_file.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories))
    out = tmp_path / "pairs.jsonl"
    code, stdout, err = run_cli(
        "judge", str(story_file), "--mode", "pairwise", "--rubric", "karpinska",
        "--base-url", llama_server, "--model", "smollm2", "--concurrency", "4",
        "--no-cache", "-o", str(out),
    )  # fmt: skip
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    pairs = len(stories) * (len(stories) - 1) // 2
    assert len(rows) == pairs * 2 * 4  # both orders, four criteria
    assert {r["parse_status"] for r in rows} == {"probabilities"}
    assert all(0.0 <= r["p_first"] <= 1.0 for r in rows)
    assert f"model:smollm2@{llama_server}" in stdout
    code, _, err = run_cli(
        "rank", str(out), "-o", str(tmp_path / "ranking.csv"), "--bootstrap", "0"
    )
    assert code == 0, err
    assert (tmp_path / "ranking.csv").read_text().count("\n") >= len(stories)


ANALYSE_FIRST = """\
name: written
analyse_first: true
criteria:
  - name: coherence
    question: How much sense does the story make?
    scale:
      - {value: 1, description: none}
      - {value: 2, description: some}
      - {value: 3, description: complete}
"""


def test_written_answers_through_llama_server_are_parsed_or_counted(
    llama_server: str, examples_dir: Path, tmp_path: Path
) -> None:
    from storyeval.judge.backends import Decoding, OpenAIJudge
    from storyeval.judge.core import JudgeSettings

    rubric_file = tmp_path / "written.yaml"
    rubric_file.write_text(ANALYSE_FIRST)
    stories = _stories(examples_dir, ("s001",))[:3]
    settings = JudgeSettings(decoding=Decoding(max_new_tokens=40))
    run = judge_stories(
        stories,
        load_rubric(rubric_file),
        [OpenAIJudge("smollm2", base_url=llama_server, concurrency=3)],
        settings=settings,
    )
    assert run.calls == len(stories)  # one written answer per story, nothing read twice
    assert len(run.judgments) + len(run.failures) == len(stories)
    assert all(f["raw"].strip() for f in run.failures)  # the text came back, it did not parse
    assert all(j.extra["parse_status"] != "probabilities" for j in run.judgments)


def test_judge_audit_of_a_served_judge(
    llama_server: str, examples_dir: Path, tmp_path: Path, run_cli: Any
) -> None:
    """``judge-audit`` runs an endpoint judge on the stories, their pairs and perturbed
    copies, and audits it."""
    story_file = tmp_path / "stories.jsonl"
    stories = _stories(examples_dir, ("s001", "s002"))
    story_file.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories))
    code, out, err = run_cli(
        "judge-audit", "--stories", str(story_file), "--base-url", llama_server,
        "--model", "smollm2", "--rubric", "karpinska", "--perturb", "repetition",
        "--concurrency", "4", "--no-cache", "--bootstrap", "50", "-o", str(tmp_path / "audit"),
    )  # fmt: skip
    assert code == 0, err
    judged = [json.loads(line) for line in (tmp_path / "audit" / "judge.jsonl").open()]
    assert len(judged) == len(stories) * 4
    assert all(f"model:smollm2@{llama_server}" in j["rater_id"] for j in judged)
    assert "position_bias (coherence):" in out and "perturbation:repetition (coherence):" in out
    assert "signature: judge_audit|" in out
