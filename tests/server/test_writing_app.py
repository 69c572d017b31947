"""Collaborative-writing sessions in the study server (in-process app, real SQLite and
PostgreSQL, real suggestions from the offline SmolLM2): the CYOA and machine-in-the-loop
flows, logging, idempotent and locked turns, token isolation, escaping, resuming pending
generations, and generation that never blocks other writers."""

from __future__ import annotations

import html
import json
import re
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient

from storyeval.collab import read_sessions
from storyeval.collab.config import USE_AGAIN_CHOICES, USE_AGAIN_QUESTION
from storyeval.collab.session import SuggestionResult
from storyeval.server.app import create_app
from storyeval.server.db import Database
from storyeval.server.kinds import load_session
from storyeval.server.participants import create_participants
from storyeval.server.settings import Settings

ADMIN = "writing-admin-token-0123456789"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cyoa"


def write_config(
    folder: Path,
    kind: str = "cyoa",
    name: str | None = None,
    *,
    model: Path | None = None,
    **changes: Any,
) -> Path:
    """The example session file of ``kind`` with short suggestions (``model``: another causal
    LM for every generator, such as the two-layer model for tests of mechanics)."""
    data = yaml.safe_load((EXAMPLE / f"{kind}.yaml").read_text())
    shutil.copy(EXAMPLE / "lighthouse.png", folder / "lighthouse.png")
    for spec in data.get("generators", [data.get("generator")]):
        if spec:  # short suggestions keep the tests quick; an unfinished one is still offered
            spec["decoding"]["max_new_tokens"] = 24
            spec["max_attempts"] = 2
            if model is not None:
                spec["model"] = str(model)
    data.update(changes)
    if name:
        data["name"] = name
    path = folder / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def make_app(tmp_path: Path, config: Path, db_url: str | None = None):
    plugin = load_session(config)
    app = create_app(
        Settings(database_url=db_url or f"sqlite:///{tmp_path / 'w.sqlite3'}", admin_token=ADMIN),
        [plugin],
    )
    return app, plugin


def new_writer(app, plugin) -> str:
    state = app.state.storyeval
    return state.db.run(
        lambda conn: create_participants(conn, plugin.kind, plugin.name, 1, now=time.time())
    )[0].token


def step(page) -> str:
    return re.search(r'name="step" value="([^"]*)"', page.text).group(1)


def box(page) -> str:
    return html.unescape(
        re.search(r'<textarea name="text"[^>]*>([^<]*)</textarea>', page.text).group(1)
    )


def wait_ready(client, base: str, timeout: float = 60):
    deadline = time.monotonic() + timeout
    page = client.get(f"{base}/")
    while page.url.path.endswith("/wait"):
        assert page.headers["refresh"] == "1" and 'http-equiv="refresh"' in page.text
        assert time.monotonic() < deadline, "suggestions never arrived"
        time.sleep(0.2)
        page = client.get(f"{base}/")
    return page


def export(client, plugin):
    response = client.get(f"/admin/{ADMIN}/{plugin.kind}/{plugin.name}/export/sessions.jsonl")
    assert response.status_code == 200
    return [json.loads(line) for line in response.text.splitlines()]


@pytest.mark.slow
def test_cyoa_writer_completes_a_story_in_process(tmp_path, tiny_models):
    app, plugin = make_app(tmp_path, write_config(tmp_path, rounds=1, model=tiny_models["lm"]))
    client = TestClient(app)
    token = new_writer(app, plugin)
    base = f"/cyoa/{token}"
    page = client.get(f"/p/{token}")
    assert page.url.path == f"{base}/welcome" and "Content warning" in page.text
    assert client.post(f"{base}/start", data={}).status_code == 422  # consent needed
    page = client.post(f"{base}/start", data={"consent": "yes"})
    assert page.url.path == f"{base}/write" and 'src="' + base + '/image"' in page.text
    assert client.get(f"{base}/image").headers["content-type"] == "image/png"
    for round_number in (1,):  # the browser test writes all five rounds
        token_step = step(page)
        short = client.post(f"{base}/write", data={"step": token_step, "text": "Too short."})
        assert short.status_code == 422
        assert "between 20 and 260 characters; this one has 10" in short.text
        line = f"Round {round_number}: the keeper climbed the stairs <b>slowly</b>."
        page = client.post(f"{base}/write", data={"step": token_step, "text": line})
        again = client.post(
            f"{base}/write", data={"step": token_step, "text": "A second copy of the same line."}
        )
        assert again.status_code == 200  # a stale form is not applied twice
        page = wait_ready(client, base)
        assert page.url.path == f"{base}/choose"
        assert "&lt;b&gt;slowly&lt;/b&gt;" in page.text  # the writer's HTML is shown as text
        assert page.text.count('name="option"') == 2 and "Option 1" in page.text
        page = client.post(f"{base}/choose", data={"step": step(page), "option": "2"})
        assert page.url.path == f"{base}/edit"
        assert 'value="switch-1"' in page.text  # option 2 is in the box
        page = client.post(
            f"{base}/edit", data={"step": step(page), "action": "switch-1", "text": "my draft"}
        )
        first = box(page)  # the box now holds option 1
        assert "(in the box below)" in page.text and 'value="switch-2"' in page.text
        kept = (first + " The lamp went out.")[:200]
        page = client.post(f"{base}/edit", data={"step": step(page), "action": "add", "text": kept})
        stale = client.post(f"{base}/choose", data={"step": "2-choose", "option": "2"})
        assert stale.url.path in (f"{base}/write", f"{base}/survey")  # the turn is locked
    assert page.url.path == f"{base}/survey"
    form = {"step": step(page)}
    incomplete = client.post(f"{base}/survey", data=form)
    assert incomplete.status_code == 422 and "Please answer" in incomplete.text
    form.update({f"likert-{s.name}": "4" for s in plugin.config.likert.statements})
    form["q-why_choose"] = "The first one fit better."
    first = plugin.config.likert.statements[0].name
    superscript = client.post(f"{base}/survey", data={**form, f"likert-{first}": "\u00b3"})
    assert superscript.status_code == 422, "a superscript three is not the answer 3"
    long = client.post(f"{base}/survey", data={**form, "q-why_choose": "x" * 6000})
    assert long.status_code == 422 and "at most 5000 characters" in long.text
    body = "&".join(f"{k}={v}" for k, v in form.items()).replace(" ", "+")
    twice = client.post(
        f"{base}/survey",
        content=body + f"&likert-{first}=1",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert twice.status_code == 422 and "more than once" in twice.text
    page = client.post(f"{base}/survey", data=form)
    assert page.url.path == f"{base}/done"
    code = re.search(r'id="completion-code">([^<]+)<', page.text).group(1)
    [record] = export(client, plugin)
    assert record["status"] == "complete" and record["completion_code"] == code
    assert record["story"].count("The lamp went out.") == 1
    suggestion_turns = [t for t in record["turns"] if t["author"] == "suggestion"]
    assert len(suggestion_turns) == 1 and len(record["turns"]) == 2
    for turn in suggestion_turns:
        assert {s["generator"] for s in turn["suggestions"]} == {"nucleus", "top-k"}
        assert sorted(s["position"] for s in turn["suggestions"]) == [1, 2]
        assert [e["action"] for e in turn["events"]] == ["choose", "switch", "submit"]
        assert turn["events"][1]["draft"] == "my draft"
        at_one = next(s for s in turn["suggestions"] if s["position"] == 1)
        assert turn["chosen"] == at_one["generator"] and turn["switches"] == 1
        assert turn["text"].startswith(at_one["text"])
        for s in turn["suggestions"]:
            assert s["signature"].startswith("suggest|model:SmolLM2") and s["generation_s"] > 0
    writer_turns = [t for t in record["turns"] if t["author"] == "writer"]
    assert all(t["time_s"] is not None for t in writer_turns)
    assert record["survey"]["likert"][0] == {
        "name": "happy",
        "statement": "I'm happy with my final story.",
        "value": 4,
        "scale": 5,
        "label": "Agree",
    }
    path = tmp_path / "sessions.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in export(client, plugin)))
    [parsed] = read_sessions(path)
    assert [t.chosen for t in parsed.suggestion_turns] == [t["chosen"] for t in suggestion_turns]


@pytest.mark.slow
def test_mil_pushes_the_machine_sentence_into_the_edit_box(tmp_path, tiny_models):
    app, plugin = make_app(
        tmp_path, write_config(tmp_path, "mil", sentences=3, model=tiny_models["lm"])
    )
    client = TestClient(app)
    token = new_writer(app, plugin)
    base = f"/mil/{token}"
    page = client.post(f"{base}/start", data={"consent": "yes"})
    page = client.post(
        f"{base}/write", data={"step": step(page), "text": "Tom lost his hat on the pier."}
    )
    page = wait_ready(client, base)
    assert (
        page.url.path == f"{base}/edit" and "The computer suggests the next sentence" in page.text
    )
    suggestion = box(page)
    assert suggestion and 'name="option"' not in page.text
    page = client.post(
        f"{base}/edit", data={"step": step(page), "action": "add", "text": "He looked everywhere."}
    )
    page = client.post(f"{base}/write", data={"step": step(page), "text": "The wind had taken it."})
    assert page.url.path == f"{base}/survey"  # three sentences: the third was the writer's
    assert USE_AGAIN_QUESTION in page.text and "Were the suggested sentences" in page.text
    form = {"step": step(page), **_likert_form(page), "q-interface": "fine"}
    refused = client.post(f"{base}/survey", data=form)  # the use-again answer is required
    assert refused.status_code == 422 and "Please choose one answer." in refused.text
    client.post(f"{base}/survey", data={**form, "use_again": USE_AGAIN_CHOICES[1]})
    [record] = export(client, plugin)
    assert [t["author"] for t in record["turns"]] == ["writer", "suggestion", "writer"]
    assert record["turns"][1]["suggestions"][0]["text"] == suggestion
    assert record["turns"][1]["events"][0]["action"] == "push"
    assert record["condition"] == "mil" and record["status"] == "complete"
    assert record["survey"]["use_again"] == USE_AGAIN_CHOICES[1]


def _likert_form(page) -> dict[str, str]:
    return {name: "5" for name in sorted(set(re.findall(r'name="(likert-[^"]+)"', page.text)))}


def test_mil_solo_writers_write_alone_and_are_not_asked_about_suggestions(tmp_path):
    config = write_config(tmp_path, "mil", sentences=3, conditions=["solo", "mil"])
    app, plugin = make_app(tmp_path, config)
    client = TestClient(app)
    token = new_writer(app, plugin)  # the first writer is assigned to the solo condition
    base = f"/mil/{token}"
    page = client.post(f"{base}/start", data={"consent": "yes"})
    for text in ["Tom lost his hat on the pier.", "He looked everywhere.", "The wind took it."]:
        assert page.url.path == f"{base}/write"
        page = client.post(f"{base}/write", data={"step": step(page), "text": text})
    assert page.url.path == f"{base}/survey"
    assert "suggest" not in page.text.lower() and USE_AGAIN_QUESTION not in page.text
    assert "Describe any tools that could have helped" in page.text
    form = {"step": step(page), **_likert_form(page), "q-interface": "fine", "q-tools": "none"}
    assert client.post(f"{base}/survey", data=form).url.path == f"{base}/done"
    [record] = export(client, plugin)
    assert record["condition"] == "solo" and record["status"] == "complete"
    assert [t["author"] for t in record["turns"]] == ["writer"] * 3
    assert "use_again" not in record["survey"]
    assert len(record["survey"]["likert"]) == 6  # the story's five and enjoyment


def test_links_are_private_and_admin_pages_need_the_token(tmp_path):
    app, plugin = make_app(tmp_path, write_config(tmp_path, rounds=1))
    client = TestClient(app)
    token = new_writer(app, plugin)
    assert client.get(f"/mil/{token}/write").status_code == 404  # another session type
    assert client.get("/cyoa/not-a-real-token/write").status_code == 404
    assert (
        client.get(
            f"/admin/wrong-token-0123456789/cyoa/{plugin.name}/export/sessions.jsonl"
        ).status_code
        == 403
    )
    assert client.get(f"/admin/{ADMIN}/cyoa/{plugin.name}/").status_code == 200
    other = new_writer(app, plugin)
    client.post(f"/cyoa/{token}/start", data={"consent": "yes"})
    # the other writer has not started: their link leads to their own welcome page
    assert client.get(f"/cyoa/{other}/").url.path == f"/cyoa/{other}/welcome"
    assert client.get(f"/admin/{ADMIN}/cyoa/{plugin.name}/progress.json").json()["started"] == 1


def test_store_steps_are_serialised_on_both_backends(tmp_path, db_url):
    """Two threads add the two suggestions of one turn at the same time: the row lock keeps
    both (no lost update), on SQLite and on a real PostgreSQL server."""
    from storyeval.server import writing_store

    plugin = load_session(write_config(tmp_path, rounds=1))
    db = Database(db_url)
    db.create_all()
    db.run(lambda conn: writing_store.register(conn, plugin.config))
    [person] = db.run(lambda conn: create_participants(conn, "cyoa", plugin.name, 1, now=0.0))
    db.run(lambda conn: writing_store.start(conn, plugin.config, person, 0.0))
    again = db.run(lambda conn: writing_store.start(conn, plugin.config, person, 1.0))
    assert again.phase == "write"  # starting twice is harmless
    stepped = db.run(
        lambda conn: writing_store.step(
            conn,
            plugin.config,
            person.id,
            2.0,
            lambda s: s.submit_text("A line long enough to be a turn.", now=2.0),
        )
    )
    requests = stepped[1]
    barrier = threading.Barrier(len(requests))

    def add(request):
        barrier.wait()
        result = SuggestionResult(f"Text of {request.generator}.", "sig", request.seed, 3.0, 3.0)
        db.run(
            lambda conn: writing_store.step(
                conn,
                plugin.config,
                person.id,
                3.0,
                lambda s: s.add_suggestion(request.request_id, result, now=3.0),
            )
        )

    threads = [threading.Thread(target=add, args=(r,)) for r in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with db.read() as conn:
        session = writing_store.load(conn, plugin.config, person.id)
    assert session.phase == "choose"
    assert sorted(s["text"] for s in session.ordered_suggestions()) == [
        "Text of nucleus.",
        "Text of top-k.",
    ]
    db.dispose()


def test_a_changed_session_file_is_refused_once_writers_started(tmp_path):
    config = write_config(tmp_path, rounds=1)
    app, plugin = make_app(tmp_path, config)
    client = TestClient(app)
    token = new_writer(app, plugin)
    client.post(f"/cyoa/{token}/start", data={"consent": "yes"})
    write_config(tmp_path, rounds=3)  # same name, other content
    with pytest.raises(ValueError, match="another version of the file"):
        make_app(tmp_path, config)


@pytest.mark.slow
def test_pending_suggestions_are_generated_after_a_restart(tmp_path, tiny_models):
    """A turn submitted while no server ran (or one killed mid-generation) stays pending in
    the database; the next server queues it again."""
    from storyeval.server import writing_store

    config = write_config(tmp_path, rounds=1, model=tiny_models["lm"])
    plugin = load_session(config)
    db = Database(f"sqlite:///{tmp_path / 'w.sqlite3'}")
    db.create_all()
    db.run(lambda conn: writing_store.register(conn, plugin.config))
    [person] = db.run(lambda conn: create_participants(conn, "cyoa", plugin.name, 1, now=0.0))
    db.run(lambda conn: writing_store.start(conn, plugin.config, person, 0.0))
    db.run(
        lambda conn: writing_store.step(
            conn,
            plugin.config,
            person.id,
            1.0,
            lambda s: s.submit_text("The ship left the harbour at dawn.", now=1.0),
        )
    )
    db.dispose()
    app, plugin = make_app(tmp_path, config)
    client = TestClient(app)
    page = wait_ready(client, f"/cyoa/{person.token}")
    assert page.url.path.endswith("/choose")


@pytest.mark.slow
def test_a_slow_model_never_blocks_other_writers(tmp_path, tiny_models):
    """Writer A's suggestions take seconds (up to 40 new tokens each); meanwhile writer B's
    pages and A's waiting page answer at once, because generation runs in the worker."""
    config = write_config(tmp_path, rounds=1, model=tiny_models["lm"])
    data = yaml.safe_load(config.read_text())
    for spec in data["generators"]:
        spec["decoding"]["max_new_tokens"] = 40
        spec["max_sentences"] = None
    config.write_text(yaml.safe_dump(data))
    app, plugin = make_app(tmp_path, config)
    client = TestClient(app)
    a, b = new_writer(app, plugin), new_writer(app, plugin)
    page_a = client.post(f"/cyoa/{a}/start", data={"consent": "yes"})
    client.post(f"/cyoa/{b}/start", data={"consent": "yes"})
    started = time.perf_counter()
    page_a = client.post(
        f"/cyoa/{a}/write",
        data={"step": step(page_a), "text": "The storm broke over the lighthouse."},
    )
    submit_time = time.perf_counter() - started
    assert page_a.url.path == f"/cyoa/{a}/wait"
    latencies = []
    for _ in range(10):
        t0 = time.perf_counter()
        assert client.get(f"/cyoa/{b}/write").status_code == 200
        assert client.get(f"/cyoa/{a}/wait").status_code == 200
        latencies.append(time.perf_counter() - t0)
    assert plugin.worker.in_flight, "every request above was served while the model ran"
    assert submit_time < 1.0 and max(latencies) < 1.0, (submit_time, latencies)
    assert plugin.worker.wait_idle(timeout=180)
    assert wait_ready(client, f"/cyoa/{a}").url.path.endswith("/choose")
