"""A judge behind a misbehaving OpenAI-compatible server: nothing lost, nothing asked twice,
every token and the answering model accounted for.

A fake server on 127.0.0.1 answers each story's question by a script of behaviours, one per
attempt: rate limits with and without Retry-After, 500 and 503, a timeout, a dropped
connection, truncated and malformed JSON, an empty choice list and a refusal. Every answer is
recorded once or reported as failed with its kind; a run stopped midway resumes from the
cache without asking a finished question again (the server counts the requests)."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")

from storyeval.corpus import Story
from storyeval.judge import load_rubric
from storyeval.judge.backends import OpenAIJudge
from storyeval.judge.cache import JudgeCache
from storyeval.judge.core import judge_stories
from test_judge import ONE_CRITERION

RUBRIC = ONE_CRITERION  # one criterion, five labels


class FakeServer:
    """Behaviours per story marker (``S0``, ``S1``...), one per attempt (the last repeats);
    ``model_after``: the served model's name changes after this many good answers."""

    def __init__(self, script: dict[str, list[str]], model_after: int | None = None) -> None:
        self.script, self.model_after = script, model_after
        self.requests: Counter[str] = Counter()
        self.answered = 0
        self.lock = threading.Lock()
        self.retry_after_waits: list[float] = []
        self.refuse_logprobs = False
        self.in_flight = 0
        self.most_in_flight = 0
        self.delay = 0.0
        self.arrivals: list[str] = []
        self.last_seen: dict[str, float] = {}

    def behaviour(self, marker: str) -> tuple[str, int]:
        with self.lock:
            attempt = self.requests[marker]
            self.requests[marker] += 1
            now = time.monotonic()
            if marker in self.last_seen:
                self.retry_after_waits.append(now - self.last_seen[marker])
            self.last_seen[marker] = now
            steps = self.script.get(marker, ["ok"])
            return steps[min(attempt, len(steps) - 1)], attempt

    def model(self) -> str:
        with self.lock:
            self.answered += 1
            changed = self.model_after is not None and self.answered > self.model_after
            return "judge-v2" if changed else "judge-v1"


def _handler(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _fault(self, step: str) -> bool:
            """Answer with the scripted fault, if the step is one."""
            error = json.dumps({"error": {"message": step, "type": "x"}}).encode()
            statuses = {
                "429": (429, {}),
                "429-retry": (429, {"Retry-After": "0.3"}),
                "500": (500, {}),
                "503": (503, {}),
            }
            bodies = {
                "truncated": b'{"id": "x", "choices": [{"index": 0, "mess',
                "malformed": b"<html>gateway</html>",
            }
            if step in statuses:
                status, headers = statuses[step]
                self._send(status, error, headers)
            elif step in bodies:
                self._send(200, bodies[step])
            elif step == "timeout":
                time.sleep(1.5)  # the client waits 1 s
                self._send(200, b"{}")
            elif step == "reset":
                self.close_connection = True
                self.connection.shutdown(2)
            else:
                return False
            return True

        def do_GET(self) -> None:
            body = {
                "object": "list",
                "data": [{"id": "judge-v1", "object": "model", "owned_by": "fake"}],
            }
            self._send(200, json.dumps(body).encode())

        def do_POST(self) -> None:
            payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if fake.refuse_logprobs and payload.get("logprobs"):
                refusal = {
                    "error": {
                        "message": "logprobs is not supported by this model",
                        "type": "invalid_request_error",
                    }
                }
                return self._send(400, json.dumps(refusal).encode())
            with fake.lock:
                fake.in_flight += 1
                fake.most_in_flight = max(fake.most_in_flight, fake.in_flight)
            time.sleep(fake.delay)
            with fake.lock:
                fake.in_flight -= 1
            text = json.dumps(payload["messages"])
            marker = re.search(r"MARK(S\d+)", text)
            with fake.lock:
                fake.arrivals.append(marker.group(1) if marker else "?")
            step, _ = fake.behaviour(marker.group(1) if marker else "?")
            if self._fault(step):
                return None
            choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "4"}}  # fmt: skip
            if step == "empty":
                choices: list[dict[str, Any]] = []
            elif step == "refusal":
                choice["message"] = {
                    "role": "assistant",
                    "content": None,
                    "refusal": "I cannot judge this.",
                }
                choices = [choice]
            else:
                choices = [choice]
            body = {
                "id": "c", "object": "chat.completion", "created": 0, "model": fake.model(),
                "system_fingerprint": "fp-1", "choices": choices,
                "usage": {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101,
                          "prompt_tokens_details": {"cached_tokens": 60}},
            }  # fmt: skip
            return self._send(200, json.dumps(body).encode())

    return Handler


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(fake: FakeServer) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _stories(count: int) -> list[Story]:
    return [
        Story(f"s{k}", "A prompt.", f"MARKS{k} The cat sat on the mat.", system="x")
        for k in range(count)
    ]


def _judge(url: str, **options: Any) -> OpenAIJudge:
    defaults: dict[str, Any] = {
        "concurrency": 4,
        "retries": 2,
        "timeout": 1.0,
        "logprobs": False,
        "max_wait": 1.0,
    }
    return OpenAIJudge("judge-v1", base_url=url, **(defaults | options))


def test_every_fault_is_retried_or_reported_with_its_kind(tmp_path: Path, serve: Any) -> None:
    script = {
        "S0": ["429", "ok"], "S1": ["429-retry", "ok"], "S2": ["500", "ok"], "S3": ["503", "503", "503"],
        "S4": ["timeout", "ok"], "S5": ["reset", "ok"], "S6": ["truncated", "ok"],
        "S7": ["malformed", "malformed", "malformed"], "S8": ["empty", "ok"], "S9": ["refusal"],
    }  # fmt: skip
    fake = FakeServer(script)
    url = serve(fake)
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(RUBRIC)
    run = judge_stories(_stories(11), load_rubric(rubric_file), [_judge(url)])
    judged = {j.item_id for j in run.judgments}
    failed = {f["item_id"]: f["status"] for f in run.failures}
    assert judged == {"s0", "s1", "s2", "s4", "s5", "s6", "s8", "s10"}  # recovered on a retry
    assert failed == {
        "s3": "failed:server_503",
        "s7": "failed:malformed_response",
        "s9": "failed:refusal",
    }
    assert len(run.judgments) == len(judged)  # each recorded once
    assert fake.requests["S3"] == 3 and fake.requests["S9"] == 3  # retries capped (2 retries)
    waits = [w for w in fake.retry_after_waits if w > 0.25]
    assert waits, "Retry-After of 0.3 s was not respected"
    summary = run.summary().iloc[0]
    assert summary["request_failures"] == 3 and summary["parse_failures"] == 0
    # tokens of the fresh answers: 100 prompt (60 cached) and 1 completion each
    assert run.tokens["judge-v1"] == [800, 8, 480]
    assert run.judgments[0].extra["served_model"] == "judge-v1"
    assert run.judgments[0].extra["prompt_tokens"] == 100


def test_a_run_stopped_midway_resumes_without_asking_again(tmp_path: Path, serve: Any) -> None:
    fake = FakeServer({})
    url = serve(fake)
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(RUBRIC)
    rubric = load_rubric(rubric_file)
    cache = JudgeCache(tmp_path / "cache.sqlite")
    # a budget stops the first run after about 5 answers (101 tokens each)
    first = judge_stories(
        _stories(12), rubric, [_judge(url, concurrency=1, max_tokens_total=500)], cache=cache
    )
    answered = len(first.judgments)
    assert 0 < answered < 12
    assert {f["status"] for f in first.failures} == {"failed:budget"}
    asked = sum(fake.requests.values())
    again = judge_stories(_stories(12), rubric, [_judge(url, concurrency=4)], cache=cache)
    assert len(again.judgments) == 12 and not again.failures
    assert sum(fake.requests.values()) - asked == 12 - answered  # only the unanswered
    assert again.cached == answered


def test_a_model_change_mid_run_is_warned_and_signed(tmp_path: Path, serve: Any) -> None:
    fake = FakeServer({}, model_after=3)
    url = serve(fake)
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(RUBRIC)
    run = judge_stories(_stories(6), load_rubric(rubric_file), [_judge(url, concurrency=1)])
    assert any(
        "model changed from answer 4 on: judge-v1 (fp-1) -> judge-v2 (fp-1)" in n for n in run.notes
    )
    assert run.signatures["judge-v1"].fields["served"] == "judge-v1/fake"
    assert [j.extra["served_model"] for j in run.judgments] == ["judge-v1"] * 3 + ["judge-v2"] * 3


def test_a_refused_setting_is_dropped_once_and_noted(tmp_path: Path, serve: Any) -> None:
    fake = FakeServer({})
    fake.refuse_logprobs = True
    url = serve(fake)
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(RUBRIC)
    judge = _judge(url, logprobs=True, concurrency=1)
    run = judge_stories(_stories(3), load_rubric(rubric_file), [judge])
    assert len(run.judgments) == 3 and not run.failures  # answered from the text instead
    assert judge.refused == ["logprobs"] and not judge.logprobs
    assert sum(fake.requests.values()) == 3  # the refused request is not counted: it was re-asked
    assert any("refused logprobs" in note for note in run.notes)


def test_cli_reports_tokens_cost_and_failures_by_kind(
    tmp_path: Path, serve: Any, run_cli: Any
) -> None:
    fake = FakeServer({"S1": ["503"]})
    url = serve(fake)
    (tmp_path / "tiny.yaml").write_text(RUBRIC)
    stories = tmp_path / "stories.jsonl"
    stories.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in _stories(4)))
    code, out, err = run_cli(
        "judge", str(stories), "--rubric", str(tmp_path / "tiny.yaml"), "--base-url", url,
        "--model", "judge-v1", "--retries", "1", "--no-cache", "--price", "2,10",
        "-o", str(tmp_path / "judged.jsonl"),
    )  # fmt: skip
    assert code == 0, err
    # 3 answers of 100 prompt (60 cached) and 1 completion tokens: 300 * 2 + 3 * 10 per million
    assert "tokens (judge-v1): 300 prompt (180 cached), 3 completion" in out
    assert "cost 0.0006, 0.1575 per 1,000 stories" in out
    assert "requests with no answer after the retries: server_503 1" in out
    failures = [
        json.loads(x) for x in (tmp_path / "judged.failures.jsonl").read_text().splitlines()
    ]
    assert failures[0]["status"] == "failed:server_503" and "503" in failures[0]["raw"]


def test_a_jury_of_served_judges_asks_at_once(tmp_path: Path, serve: Any) -> None:
    """Two judges, each one request at a time with its own budget: the server sees both at
    once (not one judge after the other), and the records come in judge order."""
    fake = FakeServer({})
    fake.delay = 0.2
    url = serve(fake)
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(RUBRIC)
    first = _judge(url, concurrency=1)
    second = OpenAIJudge(
        "judge-b", base_url=url, concurrency=1, logprobs=False, max_tokens_total=250
    )
    run = judge_stories(_stories(4), load_rubric(rubric_file), [first, second])
    assert fake.most_in_flight == 2
    raters = [j.rater_id for j in run.judgments]
    assert raters == sorted(raters, key=raters.index)  # one judge's records, then the other's
    assert (
        len([r for r in raters if "judge-b" in r]) == 3
    )  # its own budget: 3 answers of 101 tokens
    assert {f["status"] for f in run.failures} == {"failed:budget"}


def test_a_storys_questions_are_sent_together_for_the_prompt_cache(
    tmp_path: Path, serve: Any
) -> None:
    """Two criteria, three stories, one request at a time: the server sees each story's two
    questions one after the other (they share the prompt up to the question), and the
    records keep the order of the questions (criterion by criterion)."""
    fake = FakeServer({})
    url = serve(fake)
    rubric_file = tmp_path / "two.yaml"
    rubric_file.write_text(
        RUBRIC + RUBRIC.split("criteria:\n", 1)[1].replace("coherence", "fluency")
    )
    run = judge_stories(_stories(3), load_rubric(rubric_file), [_judge(url, concurrency=1)])
    assert fake.arrivals == ["S0", "S0", "S1", "S1", "S2", "S2"]
    assert [(j.item_id, j.criterion) for j in run.judgments][:3] == [
        ("s0", "coherence"),
        ("s1", "coherence"),
        ("s2", "coherence"),
    ]


def test_a_cost_budget_stops_cleanly(tmp_path: Path, serve: Any, run_cli: Any) -> None:
    """``--max-cost 0.25`` at 1,000 per million prompt tokens: 0.1 an answer, so three
    answers, then the questions left are failed as over budget (and asked by the next run)."""
    fake = FakeServer({})
    url = serve(fake)
    (tmp_path / "tiny.yaml").write_text(RUBRIC)
    stories = tmp_path / "stories.jsonl"
    stories.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in _stories(6)))
    command = ["judge", str(stories), "--rubric", str(tmp_path / "tiny.yaml"), "--base-url", url,
               "--model", "judge-v1", "--concurrency", "1", "--cache", str(tmp_path / "c.sqlite"),
               "-o", str(tmp_path / "judged.jsonl")]  # fmt: skip
    code, out, err = run_cli(*command, "--price", "1000,0", "--max-cost", "0.25")
    assert code == 0, err
    assert "requests with no answer after the retries: budget 3" in out
    code, out, err = run_cli(*command)  # no budget: only the three left are asked
    assert code == 0, err
    assert sum(fake.requests.values()) == 6 and "3 from the cache" in out
    code, _, err = run_cli(*command, "--max-cost", "1")
    assert code == 2 and "--price" in err
