"""LLM judges: rubrics, strict parsing, both-order pairwise judging, the offline model end to
end (deterministic, cached, prefix cache equal to the full forward pass), the OpenAI-compatible
backend against a real local server that serves the real small model, and judge-eval."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval.base.yamlfile import YamlFileError
from storyeval.corpus import Story, read_judgments, read_stories
from storyeval.judge import judge_stories, load_rubric
from storyeval.judge.backends import Decoding, JudgeAnswer
from storyeval.judge.cache import JudgeCache
from storyeval.judge.core import JudgeSettings
from storyeval.judge.prompts import JudgeRequest
from storyeval.judge.rubric import RUBRICS

ONE_CRITERION = """\
name: tiny
criteria:
  - name: coherence
    question: How much sense does the story make?
    scale:
      - {value: 1, description: none}
      - {value: 2, description: little}
      - {value: 3, description: some}
      - {value: 4, description: much}
      - {value: 5, description: complete}
"""


class Scripted:
    """A judge whose written answers are given by the test (for parsing and order logic)."""

    def __init__(self, reply: Any, name: str = "scripted") -> None:
        self.reply, self.name, self.identity, self.calls = reply, name, f"{name}@test", 0

    def answer(
        self, requests: Sequence[JudgeRequest], decoding: Decoding, *, sample: int = 0
    ) -> list[JudgeAnswer]:
        self.calls += 1
        return [JudgeAnswer(None, self.reply(request)) for request in requests]


def _stories() -> list[Story]:
    return [
        Story(
            "p1-x",
            "A door creaked.",
            "Mara opened it and found the garden.",
            system="x",
            extra={"prompt_id": "p1"},
        ),
        Story(
            "p1-y",
            "A door creaked.",
            "Garden the it found and opened Mara.",
            system="y",
            extra={"prompt_id": "p1"},
        ),
        Story(
            "p2-x",
            "Rain fell.",
            "Tom stayed in and read all day.",
            system="x",
            extra={"prompt_id": "p2"},
        ),
        Story(
            "p2-y",
            "Rain fell.",
            "Read day all in Tom stayed and.",
            system="y",
            extra={"prompt_id": "p2"},
        ),
    ]


def test_every_builtin_rubric_loads_and_bad_files_name_the_line(tmp_path: Path) -> None:
    assert set(RUBRICS.names()) >= {"hanna", "karpinska", "callan_foster", "checklist"}
    hanna = load_rubric("hanna")
    assert [c.name for c in hanna.criteria] == [
        "relevance",
        "coherence",
        "empathy",
        "surprise",
        "engagement",
        "complexity",
    ]
    assert load_rubric("callan_foster").criteria[0].values == [1, 2, 3, 4, 5, 6, 7]
    assert load_rubric("checklist").criteria[0].values == [1, 0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(ONE_CRITERION.replace("    question:", "    questoin:"))
    with pytest.raises(YamlFileError, match=r"bad.yaml:4: criteria\[0\].questoin: unknown key"):
        load_rubric(bad)
    bad.write_text(
        "name: t\ncriteria:\n  - {name: a, question: q, scale: [{value: 1, description: d}]}\n"
    )
    with pytest.raises(YamlFileError, match="scale of 2 or more points"):
        load_rubric(bad)
    with pytest.raises(KeyError, match="must be one of"):
        load_rubric("no-such-rubric")


def test_parse_failures_are_counted_and_never_imputed(tmp_path: Path) -> None:
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(ONE_CRITERION)
    replies = iter(["4", "I would say 4", "5.", "Score: 9"])
    judge = Scripted(lambda request: next(replies))
    run = judge_stories(_stories(), load_rubric(rubric_file), [judge])
    assert [(j.item_id, j.value) for j in run.judgments] == [("p1-x", 4.0), ("p2-x", 5.0)]
    assert [(f["item_id"], f["status"], f["raw"]) for f in run.failures] == [
        ("p1-y", "parse_error", "I would say 4"),
        ("p2-y", "parse_error", "Score: 9"),
    ]
    summary = run.summary().iloc[0]
    assert summary["answers"] == 4 and summary["parse_failures"] == 2 and summary["mean"] == 4.5


def test_pairwise_runs_both_orders_and_measures_position_bias(tmp_path: Path) -> None:
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(ONE_CRITERION)
    rubric = load_rubric(rubric_file)
    settings = JudgeSettings(mode="pairwise")
    first = judge_stories(_stories(), rubric, [Scripted(lambda r: "A")], settings=settings)
    assert len(first.comparisons) == 4  # 2 prompts x 2 orders
    stats = first.summary().iloc[0]
    assert stats["first_position_wins"] == 1.0 and stats["position_consistency"] == 0.0

    def fluent(request: JudgeRequest) -> str:  # prefers the story that is not scrambled
        text = request.messages[1]["content"]
        story_a = text.split("Story A: ")[1].split("\n")[0]
        return "A" if story_a.startswith(("Mara", "Tom")) else "B"

    fair = judge_stories(_stories(), rubric, [Scripted(fluent)], settings=settings)
    stats = fair.summary().iloc[0]
    assert stats["first_position_wins"] == 0.5 and stats["position_consistency"] == 1.0
    assert {c["winner"] for c in fair.comparisons} == {"x"}
    assert {c["order"] for c in fair.comparisons} == {"xy", "yx"}
    one = judge_stories(
        _stories(),
        rubric,
        [Scripted(fluent)],
        settings=JudgeSettings(mode="pairwise", both_orders=False, seed=3),
    )
    assert len(one.comparisons) == 2
    assert "orders:seeded-random" in one.signatures["scripted"].render()


@pytest.mark.slow
def test_offline_model_judges_deterministically_with_cache_and_prefix_cache(
    tmp_path: Path, causal_lm: Any
) -> None:
    from storyeval.judge.backends import TransformersJudge

    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(ONE_CRITERION)
    rubric = load_rubric(rubric_file)
    stories = _stories()[:3]
    cached, plain = TransformersJudge(prefix_cache=True), TransformersJudge(prefix_cache=False)
    a = judge_stories(stories, rubric, [cached])
    b = judge_stories(stories, rubric, [plain])
    probs_a = np.array([j.extra["probabilities"] for j in a.judgments])
    probs_b = np.array([j.extra["probabilities"] for j in b.judgments])
    np.testing.assert_allclose(probs_a, probs_b, atol=1e-4)  # the prefix cache changes nothing
    assert all(abs(sum(p) - 1) < 1e-5 for p in probs_a)
    assert all(
        1 <= j.value <= 5 and j.extra["parse_status"] == "probabilities" for j in a.judgments
    )
    again = judge_stories(stories, rubric, [TransformersJudge(prefix_cache=True)])
    assert [j.value for j in again.judgments] == [j.value for j in a.judgments]  # deterministic
    store = JudgeCache(tmp_path / "cache.sqlite")
    first = judge_stories(stories, rubric, [cached], cache=store)
    second = judge_stories(stories, rubric, [cached], cache=store)
    assert first.calls > 0 and second.calls == 0 and second.cached == len(stories)
    assert [j.value for j in second.judgments] == [j.value for j in first.judgments]
    rater = a.judgments[0].rater_id
    assert (
        rater.startswith("judge|model:SmolLM2")
        and "rubric:tiny@" in rater
        and "score:expected" in rater
    )
    assert any("shares a model family" in note for note in a.notes) is False  # systems x, y


def test_batched_judging_equals_each_prompt_read_alone(tiny_models: dict[str, Path]) -> None:
    """Four criteria about three stories of different lengths in one batch (the preamble
    once, each story once, the questions left-padded): each label distribution equals the one
    from the whole prompt read alone, without cache or padding."""
    import torch

    from storyeval.judge.backends import Decoding, TransformersJudge, chat_text
    from storyeval.judge.prompts import absolute_request

    # the batching is what is checked: a two-layer model of SmolLM2's architecture suffices

    rubric = load_rubric("karpinska")
    stories = _stories()[:3]
    requests = [absolute_request(s, rubric, c) for c in rubric.criteria for s in stories]
    judge = TransformersJudge(str(tiny_models["lm"]), batch_size=2)
    answers = judge.answer(requests, Decoding())
    tokenizer, model = judge.lm.tokenizer, judge.lm.model
    for request, answer in zip(requests, answers, strict=True):
        ids = tokenizer(chat_text(tokenizer, request.messages), add_special_tokens=False)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids["input_ids"]])).logits[0, -1]
        labels = [
            tokenizer(label, add_special_tokens=False)["input_ids"][0] for label in request.labels
        ]
        alone = torch.softmax(logits.float(), dim=-1)[labels].numpy()
        np.testing.assert_allclose(answer.probabilities, alone, atol=2e-5)
    assert judge.calls <= 1 + 2 * 2  # the preamble, then two batches of two passes


def _judge_logits_alone(judge: Any, requests: Sequence[JudgeRequest]) -> list[Any]:
    """Each request's label distribution from its whole prompt read alone, no cache."""
    import torch

    from storyeval.judge.backends import chat_text

    tokenizer, model = judge.lm.tokenizer, judge.lm.model
    found = []
    for request in requests:
        ids = tokenizer(chat_text(tokenizer, request.messages), add_special_tokens=False)
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids["input_ids"]])).logits[0, -1]
        labels = [
            tokenizer(label, add_special_tokens=False)["input_ids"][0] for label in request.labels
        ]
        found.append(torch.softmax(logits.float(), dim=-1)[labels].numpy())
    return found


def test_questions_one_slot_at_a_time_when_the_repeated_caches_do_not_fit(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token budget that holds three stories' caches but not their four questions' copies
    (a 7B judge on a card, scaled down): the questions go one criterion per pass after the
    stories' one cache, and every answer still equals its prompt read alone (a two-layer
    model of SmolLM2's architecture)."""
    from storyeval.judge import batching
    from storyeval.judge.backends import TransformersJudge
    from storyeval.judge.prompts import absolute_request

    rubric = load_rubric("karpinska")
    stories = _stories()[:3]
    requests = [absolute_request(s, rubric, c) for c in rubric.criteria for s in stories]
    judge = TransformersJudge(str(tiny_models["lm"]), batch_size=3)
    longest = max(len(judge._encode(r.messages[-1]["content"])) for r in requests)
    budget = 3 * (longest + 400)  # three stories and the preamble, not twelve rows of them
    for name in ("token_budget", "cache_budget"):
        monkeypatch.setattr(batching, name, lambda model, device, precision: budget)
    passes: list[int] = []
    by_slot = batching.Batcher._questions_by_slot
    monkeypatch.setattr(
        batching.Batcher,
        "_questions_by_slot",
        lambda self, *args: passes.append(1) or by_slot(self, *args),
    )
    answers = judge.answer(requests, Decoding())
    assert passes, "the budget should have sent the questions one slot at a time"
    assert judge.calls == 1 + 1 + len(rubric.criteria)  # preamble, stories, one pass a question
    for answer, alone in zip(answers, _judge_logits_alone(judge, requests), strict=True):
        np.testing.assert_allclose(answer.probabilities, alone, atol=2e-5)


def test_a_batch_that_runs_out_of_gpu_memory_is_split_and_retried(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that runs out of memory on more than one story a pass: the batch is halved
    until it fits, the answers are the same, and one story that cannot fit is a clear error
    (a two-layer model of SmolLM2's architecture)."""
    import torch

    from storyeval.base.errors import StoryevalError
    from storyeval.judge.backends import TransformersJudge
    from storyeval.judge.prompts import absolute_request

    rubric = load_rubric("karpinska")
    stories = _stories()[:3]
    requests = [absolute_request(s, rubric, c) for c in rubric.criteria for s in stories]
    judge = TransformersJudge(str(tiny_models["lm"]), batch_size=3)
    real = judge.lm.model.forward
    limit = {"rows": 4}  # the preamble (1 row) and one story's questions (4 rows) fit

    def forward(*args: Any, **kwargs: Any) -> Any:
        if kwargs["input_ids"].shape[0] > limit["rows"]:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(judge.lm.model, "forward", forward)
    answers = judge.answer(requests, Decoding())
    for answer, alone in zip(answers, _judge_logits_alone(judge, requests), strict=True):
        np.testing.assert_allclose(answer.probabilities, alone, atol=2e-5)
    limit["rows"] = 1  # not even one story's four questions
    with pytest.raises(StoryevalError, match="do not fit in cpu's memory"):
        judge.answer(requests[:4], Decoding())


def test_a_batchs_tokens_follow_the_models_size_and_the_free_gpu_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 7B Llama in bfloat16: 512 KiB of keys and values a token (32 layers, 32 heads of
    128) and one layer's activations; half of 110 GiB free then holds about 78k tokens, a
    1.7B-shaped model about twice as many; off a GPU the fixed CPU budget. The repeated
    caches of the questions' pass cost their keys and values alone."""
    from types import SimpleNamespace

    from transformers import LlamaConfig

    from storyeval.judge import batching
    from storyeval.models import devices

    big = LlamaConfig(hidden_size=4096, num_attention_heads=32, num_hidden_layers=32,
                      num_key_value_heads=32, intermediate_size=11008)  # fmt: skip
    small = LlamaConfig(hidden_size=2048, num_attention_heads=32, num_hidden_layers=24,
                        num_key_value_heads=32, intermediate_size=5440)  # fmt: skip
    cache = 2 * 32 * 32 * 128 * 2
    assert batching.token_bytes(big, "bfloat16") == cache + (3 * 11008 + 4 * 4096 + 32 * 2048) * 2
    assert batching.token_bytes(big, "float32") == 2 * batching.token_bytes(big, "bfloat16")
    monkeypatch.setattr(
        devices, "free_gpu_bytes", lambda d: 110 * 2**30 if d.startswith("cuda") else None
    )
    budget = batching.token_budget(SimpleNamespace(config=big), "cuda", "bfloat16")
    assert budget == int(0.5 * 110 * 2**30 / batching.token_bytes(big, "bfloat16"))
    assert 75_000 < budget < 80_000
    bigger = batching.token_budget(SimpleNamespace(config=small), "cuda:0", "bfloat16")
    assert 1.9 * budget < bigger < 2.1 * budget  # attention scores weigh more in a small model
    assert batching.token_budget(SimpleNamespace(config=big), "cpu", "float32") == 16384
    # the questions' pass: its cost is the repeated caches. 60 stories of 700 tokens asked 6
    # questions (252k cached tokens) take one pass on the 1.7B model, one a question on the 7B
    assert batching.kv_bytes(big, "bfloat16") == cache
    copies = batching.cache_budget(SimpleNamespace(config=big), "cuda", "bfloat16")
    assert copies == int(0.45 * 110 * 2**30 / cache) and copies < 60 * 6 * 700
    assert batching.cache_budget(SimpleNamespace(config=small), "cuda", "bfloat16") > 60 * 6 * 700
    assert batching.cache_budget(SimpleNamespace(config=big), "cpu", "float32") == 16384


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def chat_server(causal_lm: Any) -> Iterator[str]:
    """A real OpenAI-compatible HTTP server on 127.0.0.1 that serves the offline SmolLM2: chat
    completions with the top log-probabilities of the first token, and greedy text."""
    import torch
    import uvicorn
    from fastapi import FastAPI

    from storyeval.judge.backends import chat_text

    app = FastAPI()
    tokenizer, model = causal_lm.tokenizer, causal_lm.model

    @app.post("/v1/chat/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        text = chat_text(tokenizer, body["messages"])
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(ids).logits[0, -1].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        top = torch.topk(logprobs, int(body.get("top_logprobs") or 1))
        token = tokenizer.decode([int(top.indices[0])])
        content = [
            {
                "token": token,
                "logprob": float(top.values[0]),
                "bytes": None,
                "top_logprobs": [
                    {"token": tokenizer.decode([int(i)]), "logprob": float(v), "bytes": None}
                    for v, i in zip(top.values, top.indices, strict=True)
                ],
            }
        ]
        choice = {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": token},
        }
        if body.get("logprobs"):
            choice["logprobs"] = {"content": content}
        return {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [choice],
        }

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start"
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.mark.slow
def test_openai_backend_reads_log_probabilities_from_a_real_local_server(
    tmp_path: Path, chat_server: str
) -> None:
    from storyeval.judge.backends import OpenAIJudge, TransformersJudge

    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(ONE_CRITERION)
    rubric = load_rubric(rubric_file)
    stories = _stories()[:2]
    remote = judge_stories(
        stories, rubric, [OpenAIJudge("smollm2", base_url=chat_server, concurrency=2)]
    )
    local = judge_stories(stories, rubric, [TransformersJudge(prefix_cache=False)])
    assert not remote.failures and remote.calls == 2
    remote_probs = np.array([j.extra["probabilities"] for j in remote.judgments])
    local_probs = np.array([j.extra["probabilities"] for j in local.judgments])
    np.testing.assert_allclose(
        remote_probs, local_probs, atol=1e-3
    )  # the same model, the same prompt
    assert remote.judgments[0].rater_id.startswith("judge|model:smollm2@http://127.0.0.1")


@pytest.mark.slow
def test_cli_judge_then_judge_eval_and_rank(
    tmp_path: Path, run_cli: Any, examples_dir: Path, tiny_models: dict[str, Path]
) -> None:
    """The commands' plumbing, judged by a two-layer model of SmolLM2's architecture (the
    offline judge's own verdicts are tested above)."""
    stories = [
        s
        for s in read_stories(examples_dir / "stories.jsonl")
        if s.extra.get("prompt_id") in ("s001", "s002", "s003")
    ]
    story_file = tmp_path / "stories.jsonl"
    story_file.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories))
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(ONE_CRITERION)
    out = tmp_path / "judge.jsonl"
    code, stdout, err = run_cli(
        "judge",
        str(story_file),
        "-o",
        str(out),
        "--rubric",
        str(rubric_file),
        "--model",
        str(tiny_models["lm"]),
        "--cache",
        str(tmp_path / "c.sqlite"),
    )
    assert code == 0, err
    judged = read_judgments(out)
    assert len(judged) == len(stories) and "signature (SmolLM2" in stdout
    code, stdout, err = run_cli(
        "judge",
        str(story_file),
        "-o",
        str(out),
        "--rubric",
        str(rubric_file),
        "--model",
        str(tiny_models["lm"]),
        "--cache",
        str(tmp_path / "c.sqlite"),
    )
    assert code == 0 and "0 model calls" in stdout
    humans = tmp_path / "humans.jsonl"
    ids = {s.id for s in stories}
    lines = [
        line
        for line in (examples_dir / "judgments.jsonl").read_text().splitlines()
        if json.loads(line)["item_id"] in ids
    ]
    humans.write_text("\n".join(lines) + "\n")
    code, stdout, err = run_cli(
        "judge-eval",
        "--judge",
        str(out),
        "--humans",
        str(humans),
        "--stories",
        str(story_file),
        "-o",
        str(tmp_path / "eval"),
        "--bootstrap",
        "50",
    )
    assert code == 0, err
    headline = (tmp_path / "eval" / "headline.csv").read_text()
    assert "coherence" in headline and (tmp_path / "eval" / "calibration.csv").is_file()
    pairs = tmp_path / "pairs.jsonl"
    code, stdout, err = run_cli(
        "judge",
        str(story_file),
        "-o",
        str(pairs),
        "--rubric",
        str(rubric_file),
        "--model",
        str(tiny_models["lm"]),
        "--mode",
        "pairwise",
        "--no-cache",
    )
    assert code == 0, err
    comparisons = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert len(comparisons) == 3 * 3 * 2  # 3 prompts x 3 system pairs x 2 orders
    code, stdout, err = run_cli(
        "rank", str(pairs), "-o", str(tmp_path / "rank.csv"), "--bootstrap", "50", "--plan", "2"
    )
    assert code == 0, err
    import pandas as pd

    table = pd.read_csv(tmp_path / "rank.csv")
    assert {"system", "method", "estimate", "ci_low", "ci_high"} <= set(table.columns)
    assert set(table["method"]) == {"bradley-terry", "elo"} and len(table) == 6


def test_several_judges_give_their_mean_and_agreement(tmp_path: Path) -> None:
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(ONE_CRITERION)
    stories = _stories()
    scores = {"p1-x": "5", "p1-y": "1", "p2-x": "4", "p2-y": "2"}

    def scorer(offset: int) -> Any:
        def reply(request: JudgeRequest) -> str:
            story = request.subject.split("Story: ")[1]
            key = next(s.id for s in stories if s.story == story)
            return str(min(5, int(scores[key]) + offset))

        return reply

    run = judge_stories(
        stories, load_rubric(rubric_file), [Scripted(scorer(0), "one"), Scripted(scorer(1), "two")]
    )
    mean, agreement = run.ensemble()
    assert dict(zip(mean["item_id"], mean["value"], strict=True)) == {
        "p1-x": 5.0,
        "p1-y": 1.5,
        "p2-x": 4.5,
        "p2-y": 2.5,
    }
    alpha = agreement[agreement["method"] == "krippendorff_alpha_interval"]["estimate"].iloc[0]
    assert 0.8 < alpha <= 1.0
    assert set(run.signatures) == {"one", "two"}


def test_a_pairwise_judge_is_checked_against_peoples_preferences(
    tmp_path: Path, run_cli: Any
) -> None:
    from storyeval.importers import import_file, write_import
    from storyeval.judge.evaluate import preference_agreement

    pairs = tmp_path / "litbench.jsonl"
    records = [
        {
            "id": "p1",
            "prompt": "Rain.",
            "chosen_story": "Rain sang on the tin roof all night.",
            "rejected_story": "It rained.",
        },
        {
            "id": "p2",
            "prompt": "Snow.",
            "chosen_story": "Snow.",
            "rejected_story": "A white hush fell over the town.",
        },
        {
            "id": "p3",
            "prompt": "Wind.",
            "story_a": "Wind.",
            "story_b": "The wind pulled the door wide open.",
            "preferred": "b",
        },
    ]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in records))
    written = write_import(import_file("pairwise", pairs), tmp_path / "data")
    stories = read_stories(written["stories"])
    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(ONE_CRITERION)

    def longer(request: JudgeRequest) -> str:
        text = request.subject
        a = text.split("Story A: ")[1].split("\n\nStory B: ")[0]
        b = text.split("Story B: ")[1]
        return "A" if len(a) > len(b) else "B"

    run = judge_stories(
        stories,
        load_rubric(rubric_file),
        [Scripted(longer)],
        settings=JudgeSettings(mode="pairwise"),
    )
    people = [json.loads(line) for line in written["comparisons"].read_text().splitlines()]
    table = preference_agreement(run.comparisons, people).iloc[0]
    assert table["pairs"] == 3 and table["agree"] == 2 and table["accuracy"] == pytest.approx(2 / 3)
    assert table["accuracy_ties_half"] == pytest.approx(2 / 3)  # no tie
    # a judge whose two orders disagree on every pair ties them all: half credit, not NaN
    first_always = [dict(c, winner=c["system_a"]) for c in run.comparisons]
    flipped = [
        dict(c, system_a=c["system_b"], system_b=c["system_a"], winner=c["system_b"])
        for c in first_always
    ]
    tied = preference_agreement(first_always + flipped, people).iloc[0]
    assert tied["judge_ties"] == 3 and tied["accuracy_ties_half"] == 0.5
    judged = tmp_path / "judge-pairs.jsonl"
    judged.write_text("".join(json.dumps(c) + "\n" for c in run.comparisons))
    code, stdout, err = run_cli(
        "judge-eval",
        "--judge",
        str(judged),
        "--human-pairs",
        str(written["comparisons"]),
        "-o",
        str(tmp_path / "eval"),
    )
    assert code == 0, err
    assert (tmp_path / "eval" / "preferences.csv").is_file() and "0.667" in stdout


def test_a_story_longer_than_the_judges_context_is_refused_not_cut(tmp_path: Path) -> None:
    """SmolLM2's context is 8,192 tokens: a 9,000-word story is refused with a message that
    says how to flag and cut it; with --max-words and truncate it is judged (and noted)."""
    from storyeval.judge.backends import JudgeBackendError, TransformersJudge
    from storyeval.judge.core import JudgeSettings

    rubric_file = tmp_path / "tiny.yaml"
    rubric_file.write_text(ONE_CRITERION)
    rubric = load_rubric(rubric_file)
    long = Story("long", "A prompt.", " ".join(["The rain fell on the town."] * 1500), system="x")
    judge = TransformersJudge()
    with pytest.raises(JudgeBackendError, match=r"longer than .* context of 8192 tokens"):
        judge_stories([long], rubric, [judge])
    settings = JudgeSettings(max_words=300, truncate=True)
    result = judge_stories([long], rubric, [judge], settings=settings)
    assert any("truncated to 300 words" in note for note in result.notes)
    assert "truncate:yes" in result.judgments[0].rater_id
