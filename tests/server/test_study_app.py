"""The study server in process (FastAPI TestClient over a real SQLite file): every protocol end
to end, timing, escaping, token isolation, admin authentication, idempotence, validation."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from storyeval.corpus import read_judgments
from storyeval.human.analysis import analyse_judgments
from storyeval.human.study import load_study
from storyeval.server.app import create_app
from storyeval.server.settings import Settings
from storyeval.server.simulate import StudyBrowser
from storyeval.server.study_session import StudySession
from storyeval.server.study_store import StudyVersionError

ADMIN = "test-admin-token-0123456789"


def make_client(
    study, tmp_path: Path, *, db_name: str = "app.sqlite3", burst: int = 10
) -> TestClient:  # type: ignore[no-untyped-def]
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / db_name}", admin_token=ADMIN, enroll_burst=burst
    )
    return TestClient(create_app(settings, [StudySession(study)]))


def new_links(client: TestClient, study, count: int) -> list[str]:  # type: ignore[no-untyped-def]
    response = client.post(
        f"/admin/{ADMIN}/links", data={"kind": "study", "name": study.name, "count": str(count)}
    )
    assert response.status_code == 200
    links = re.findall(r"<code>(http[^<]+)</code>", response.text)
    assert len(links) == count
    return links


def export(client: TestClient, study, tmp_path: Path, fmt: str = "jsonl"):  # type: ignore[no-untyped-def]
    response = client.get(f"/admin/{ADMIN}/study/{study.name}/export/judgments.{fmt}")
    assert response.status_code == 200
    if not response.text.strip():
        return []
    path = tmp_path / f"judgments.{fmt}"
    path.write_text(response.text, encoding="utf-8")
    return read_judgments(path)


EXPECTED_ROWS_PER_PAGE = {
    "likert": 4,
    "side_by_side": 6,
    "pairwise": 2,
    "detection": 1,
    "triangle": 1,
    "best_worst": 8,  # 4 stories x 2 criteria
    "spans": 6,  # 5 labels of the taxonomy and the share of sentences marked
}


@pytest.mark.parametrize(
    "name", ["likert", "side_by_side", "pairwise", "detection", "triangle", "best_worst", "spans"]
)
def test_every_example_study_can_be_completed(name, examples_dir, tmp_path):
    study = load_study(examples_dir / "studies" / f"{name}.yaml")
    client = make_client(study, tmp_path)
    outcomes = [
        StudyBrowser(client, study, seed=i).run(link)
        for i, link in enumerate(new_links(client, study, 2))
    ]
    assert all(o.completion_code for o in outcomes)
    judgments = export(client, study, tmp_path)
    pages = sum(len(o.acknowledged) for o in outcomes)
    assert pages == 2 * study.items_per_participant + 2 * len(study.checks)
    assert len(judgments) == pages * EXPECTED_ROWS_PER_PAGE[study.protocol]
    assert {j.extra["protocol"] for j in judgments} == {study.protocol}
    assert all(j.time_s is not None and j.time_s >= 0 for j in judgments)
    per_rater = Counter(j.rater_id for j in judgments)
    assert len(per_rater) == 2
    # the free-text answers of detection and the end questions are exported separately
    responses = client.get(
        f"/admin/{ADMIN}/study/{study.name}/export/responses.jsonl"
    ).text.splitlines()
    expected = (2 * study.items_per_participant if name == "detection" else 0) + 2 * len(
        study.config.questions
    )
    assert len(responses) == expected
    if name == "pairwise":
        assert {j.value for j in judgments} <= {0.0, 1.0}
        assert all(
            j.extra["chosen"] in (j.extra["system_a"], j.extra["system_b"]) for j in judgments
        )
    if name == "triangle":
        assert all(
            j.value == float(j.extra["chosen_position"] == j.extra["odd_position"])
            for j in judgments
        )


def test_time_per_item_is_measured_by_the_server(make_likert, tmp_path):
    study = make_likert(per_participant=2)
    client = make_client(study, tmp_path)
    StudyBrowser(client, study, think_time_s=0.4).run(new_links(client, study, 1)[0])
    judgments = export(client, study, tmp_path)
    assert len(judgments) == 4
    for j in judgments:
        assert 0.4 <= j.time_s < 5.0, j.time_s
        assert j.extra["gap_s"] >= j.time_s
    pages = {j.extra["page"]: j.time_s for j in judgments}
    assert len(pages) == 2, "one time per page, repeated on each criterion"


def test_html_in_a_story_is_shown_as_text(study_dir, tmp_path):
    hostile = '<script>document.title="pwned"</script><img src=x onerror="alert(1)"> & <b>bold</b>'
    (study_dir / "hostile.jsonl").write_text(
        json.dumps({"id": "x1", "prompt": "<i>prompt</i>", "story": hostile, "system": "human"})
        + "\n",
        encoding="utf-8",
    )
    path = study_dir / "hostile.yaml"
    path.write_text(
        "name: hostile\ntitle: <script>t</script>\nprotocol: likert\nstories: hostile.jsonl\n"
        "criteria:\n  - name: c\n    question: Is <em>this</em> fine?\n    scale: 5\n    labels: {1: '<b>low</b>', 5: high}\n"
        "assignment: {items_per_participant: 1, raters_per_item: 1}\n",
        encoding="utf-8",
    )
    study = load_study(path)
    client = make_client(study, tmp_path)
    link = new_links(client, study, 1)[0]
    page = client.get(link.split("testserver")[1], follow_redirects=True)
    token = str(page.url).split("/")[4]
    page = client.post(f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True)
    assert "/item/" in str(page.url)
    html = page.text
    assert (
        "<script>" not in html and "<img" not in html and "<b>" not in html and "<em>" not in html
    )
    assert "&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in html
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self';" in csp  # its own files only
    assert "unsafe-inline" not in csp and "<script" not in html  # none on an item page
    assert page.headers["referrer-policy"] == "no-referrer"


def test_a_token_cannot_read_or_write_another_participants_items(make_likert, tmp_path):
    study = make_likert()
    client = make_client(study, tmp_path)
    alice_link, bob_link = new_links(client, study, 2)
    pages = {}
    for who, link in (("alice", alice_link), ("bob", bob_link)):
        response = client.get(link.split("testserver")[1], follow_redirects=True)
        token = str(response.url).split("/")[4]
        response = client.post(
            f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True
        )
        pages[who] = (token, int(str(response.url).rstrip("/").split("/")[-1]))
    (alice, alice_slot), (bob, _) = pages["alice"], pages["bob"]
    answers = {c.name: "3" for c in study.criteria}
    assert (
        client.get(f"/study/{bob}/item/{alice_slot}", follow_redirects=False).status_code == 303
    )  # to bob's own page
    assert (
        client.post(
            f"/study/{bob}/item/{alice_slot}", data=answers, follow_redirects=False
        ).status_code
        == 404
    )
    assert (
        client.post(
            f"/study/{bob}/item/{alice_slot}/explain", data={"explanation": "x"}
        ).status_code
        == 404
    )
    forged = "A" * 43
    assert client.get(f"/study/{forged}/").status_code == 404
    assert client.get(f"/p/{forged}").status_code == 404
    assert client.post(f"/study/{forged}/item/{alice_slot}", data=answers).status_code == 404
    assert export(client, study, tmp_path) == []
    # alice's own page is untouched and still answerable
    assert (
        client.post(
            f"/study/{alice}/item/{alice_slot}", data=answers, follow_redirects=False
        ).status_code
        == 303
    )
    assert len(export(client, study, tmp_path)) == len(study.criteria)


@pytest.mark.parametrize(
    "path",
    [
        "/admin/{t}/",
        "/admin/{t}/study/likert-test/",
        "/admin/{t}/study/likert-test/progress.json",
        "/admin/{t}/study/likert-test/export/judgments.jsonl",
        "/admin/{t}/study/likert-test/export/judgments.csv",
        "/admin/{t}/study/likert-test/export/responses.jsonl",
        "/admin/{t}/study/likert-test/export/participants.jsonl",
        "/admin/{t}/study/likert-test/export/study.json",
        "/admin/{t}/links/study/likert-test.csv",
    ],
)
def test_admin_pages_refuse_without_the_admin_token(path, make_likert, tmp_path):
    study = make_likert()
    client = make_client(study, tmp_path)
    for wrong in ("", "x", ADMIN[:-1], ADMIN + "x", "participant-token-" + "a" * 30):
        response = client.get(path.format(t=wrong))
        assert response.status_code in (403, 404), (wrong, response.status_code)
        assert "likert-test" not in response.text or response.status_code == 404
    assert (
        client.post(
            f"/admin/{ADMIN[:-1]}/links", data={"kind": "study", "name": study.name, "count": "3"}
        ).status_code
        == 403
    )
    assert client.get(path.format(t=ADMIN)).status_code == 200


def test_double_submission_is_stored_once(make_likert, tmp_path):
    """A replay of the same answers is acknowledged as the original (303); other answers for
    an answered item are told so (409) and change nothing."""
    study = make_likert()
    client = make_client(study, tmp_path)
    response = client.get(
        new_links(client, study, 1)[0].split("testserver")[1], follow_redirects=True
    )
    token = str(response.url).split("/")[4]
    item = client.post(f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True)
    path = str(item.url).split("testserver")[1]
    first = client.post(path, data={c.name: "2" for c in study.criteria}, follow_redirects=False)
    replay = client.post(path, data={c.name: "2" for c in study.criteria}, follow_redirects=False)
    other = client.post(path, data={c.name: "5" for c in study.criteria}, follow_redirects=False)
    assert first.status_code == replay.status_code == 303
    assert other.status_code == 409 and "already answered" in other.text
    judgments = export(client, study, tmp_path)
    assert [j.value for j in judgments] == [2.0] * len(study.criteria)


def test_incomplete_answers_are_refused_and_the_page_keeps_its_time(make_likert, tmp_path):
    study = make_likert()
    client = make_client(study, tmp_path)
    response = client.get(
        new_links(client, study, 1)[0].split("testserver")[1], follow_redirects=True
    )
    token = str(response.url).split("/")[4]
    item = client.post(f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True)
    path = str(item.url).split("testserver")[1]
    partial = client.post(path, data={study.criteria[0].name: "4", study.criteria[1].name: "9"})
    assert partial.status_code == 422 and "Please answer every question" in partial.text
    assert 'value="4" checked' in partial.text, "the given answer is kept"
    assert client.post(path, data={study.criteria[0].name: "4"}).status_code == 422
    assert export(client, study, tmp_path) == []
    assert (
        client.post(
            path, data={c.name: "4" for c in study.criteria}, follow_redirects=False
        ).status_code
        == 303
    )
    assert client.get(f"/study/{token}/welcome", follow_redirects=False).status_code == 303, (
        "no going back"
    )


def test_open_enrollment_keeps_one_participant_per_external_id(study_dir, tmp_path):
    """One participant per id; ``max_participants`` counts those who consented (opening the
    link holds no place), and a join past the cap is "full"."""
    text = study_dir / "x.yaml"
    text.write_text(
        "name: open-study\ntitle: Open\nprotocol: detection\nstories: stories.jsonl\n"
        "select: {systems: [human, smollm2-p0.9], per_system: 4}\n"
        "assignment: {items_per_participant: 2, raters_per_item: 1}\n"
        "enrollment: {open: true, external_id_param: PROLIFIC_PID, max_participants: 3}\n",
        encoding="utf-8",
    )
    study = load_study(text)
    client = make_client(study, tmp_path, burst=100)
    first = client.get("/join/study/open-study?PROLIFIC_PID=abc", follow_redirects=False)
    again = client.get("/join/study/open-study?PROLIFIC_PID=abc", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == again.headers["location"]
    other = client.get("/join/study/open-study?PROLIFIC_PID=def", follow_redirects=False)
    assert other.headers["location"] != first.headers["location"]
    assert client.get("/join/study/other-study").status_code == 404
    for pid in ("v1", "v2", "v3", "v4"):  # page loads without consent hold no place
        assert client.get(f"/join/study/open-study?PROLIFIC_PID={pid}").url.path.endswith(
            "/welcome"
        )
    for pid in ("abc", "def", "ghi"):
        page = client.get(f"/join/study/open-study?PROLIFIC_PID={pid}")
        token = page.url.path.split("/")[2]
        started = client.post(f"/study/{token}/start", data={"consent": "yes"})
        assert "/item/" in started.url.path, started.text[:300]
    full = client.get("/join/study/open-study?PROLIFIC_PID=zzz", follow_redirects=False)
    assert full.status_code == 200 and "full" in full.text
    waiting = client.get("/join/study/open-study?PROLIFIC_PID=v1")  # joined before the cap
    assert waiting.url.path.endswith("/full"), "a place is needed to consent"
    people = client.get(
        f"/admin/{ADMIN}/study/open-study/export/participants.jsonl"
    ).text.splitlines()
    ids = sorted(json.loads(p)["external_id"] for p in people)
    assert ids == ["abc", "def", "ghi", "v1", "v2", "v3", "v4"]


def test_a_changed_study_file_cannot_reuse_the_database(make_likert, tmp_path):
    study = make_likert()
    make_client(study, tmp_path)
    changed = make_likert(per_system=3)
    with pytest.raises(StudyVersionError):
        make_client(changed, tmp_path)


def test_training_shows_the_answer_and_the_explanation(examples_dir, tmp_path):
    study = load_study(examples_dir / "studies" / "detection.yaml")
    client = make_client(study, tmp_path)
    response = client.get(
        new_links(client, study, 1)[0].split("testserver")[1], follow_redirects=True
    )
    token = str(response.url).split("/")[4]
    page = client.post(f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True)
    assert str(page.url).endswith("/training/0") and "Training example 1 of 3" in page.text
    feedback = client.post(
        f"/study/{token}/training/0", data={"source": "4"}, follow_redirects=True
    )
    assert "Nice! You chose the correct answer." in feedback.text
    assert "Definitely machine-generated" in feedback.text and "said to have been" in feedback.text
    second = client.get(f"/study/{token}/", follow_redirects=True)
    feedback = client.post(
        str(second.url).split("testserver")[1], data={"source": "4"}, follow_redirects=True
    )
    assert "Not quite." in feedback.text and "Definitely human-written" in feedback.text
    rows = client.get(f"/admin/{ADMIN}/study/{study.name}/export/training.jsonl").text.splitlines()
    assert [json.loads(r)["correct"] for r in rows] == [True, False]


def test_comparison_training_pairs_a_human_and_a_machine_text(examples_dir, tmp_path):
    """Clark (2021), section 6.3: the Comparison training shows a human and a machine text
    that begin with the same prompt and asks which one a machine wrote."""
    import yaml

    data = yaml.safe_load((examples_dir / "studies" / "detection.yaml").read_text())
    data["stories"] = str(examples_dir / "stories.jsonl")
    data["training"] = [
        {"stories": ["s058", "s058-smollm2-k40-t0.7"], "answer": 2, "explanation": "Text 2 loops."}
    ]
    path = tmp_path / "comparison.yaml"
    path.write_text(yaml.safe_dump(data))
    study = load_study(path)
    client = make_client(study, tmp_path)
    response = client.get(
        new_links(client, study, 1)[0].split("testserver")[1], follow_redirects=True
    )
    token = str(response.url).split("/")[4]
    page = client.post(f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True)
    assert "Choose the one you think was written by a machine." in page.text
    assert "Text 1" in page.text and "Text 2" in page.text and 'name="source"' not in page.text
    refused = client.post(f"/study/{token}/training/0", data={"source": "4"})
    assert refused.status_code == 422  # the comparison's answer is which text, not a rating
    feedback = client.post(
        f"/study/{token}/training/0", data={"machine_text": "2"}, follow_redirects=True
    )
    assert "Nice! You chose the correct answer." in feedback.text
    assert "The machine-generated text: <strong>Text 2</strong>" in feedback.text
    rows = client.get(f"/admin/{ADMIN}/study/{study.name}/export/training.jsonl").text.splitlines()
    assert [json.loads(r)["correct"] for r in rows] == [True]
    data["training"][0]["answer"] = 3
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError, match="the position of the machine-generated text, 1 or 2"):
        load_study(path)


def test_failed_attention_checks_are_exported_and_excluded(examples_dir, tmp_path):
    study = load_study(examples_dir / "studies" / "likert.yaml")
    client = make_client(study, tmp_path)
    careful, careless = new_links(client, study, 2)
    StudyBrowser(
        client, study, answer=lambda kind, keys, rng: {k: 1 if kind == "check" else 3 for k in keys}
    ).run(careful)
    StudyBrowser(client, study, answer=lambda kind, keys, rng: {k: 5 for k in keys}).run(careless)
    judgments = export(client, study, tmp_path)
    checks = {(j.rater_id, j.extra["check_passed"]) for j in judgments if j.extra.get("check")}
    assert checks == {("p00001", True), ("p00002", False)}
    result = analyse_judgments(judgments, min_median_time_s=0, n_boot=0)
    step = result.filtering.set_index("step").loc["attention checks"]
    assert step["raters_removed"] == 1 and step["judgments_removed"] == 6 * 4
    assert set(result.raters.loc[result.raters["kept"], "rater_id"]) == {"p00001"}


def test_pairwise_choices_can_be_followed_by_why(study_dir, tmp_path):
    """Clark (2021), section 3.7: raters choose a continuation and briefly explain why."""
    text = """name: why
title: Why
protocol: pairwise
stories: stories.jsonl
pairwise:
  systems: [smollm2-p0.9, smollm2-k40-t0.7]
  labels: [Sentence 1, Sentence 2]
  why_question: Briefly explain why you made your choice.
criteria:
  - name: continue
    question: Choose a sentence to continue the story.
assignment:
  items_per_participant: 2
  raters_per_item: 1
"""
    (study_dir / "why.yaml").write_text(text, encoding="utf-8")
    study = load_study(study_dir / "why.yaml")
    client = make_client(study, tmp_path)
    link = new_links(client, study, 1)[0].split("testserver")[1]
    token = str(client.get(link, follow_redirects=True).url).split("/")[4]
    page = client.post(f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True)
    item = str(page.url).split("testserver")[1]
    step = re.search(r'name="step" value="([^"]*)"', page.text)
    form = {"continue": "2", **({"step": step.group(1)} if step else {})}
    explain = client.post(item, data=form, follow_redirects=True)
    assert str(explain.url).endswith("/explain"), explain.text[:300]
    assert "Briefly explain why you made your choice." in explain.text
    assert "Your answer: <strong>Sentence 2</strong>" in explain.text
    assert "Sentence 1" in explain.text  # both continuations are shown, labelled
    empty = client.post(str(explain.url).split("testserver")[1], data={"explanation": ""})
    assert empty.status_code == 422  # required by default
    done = client.post(
        str(explain.url).split("testserver")[1],
        data={"explanation": "It names the right character."},
        follow_redirects=True,
    )
    assert "/item/" in str(done.url)
    rows = client.get(f"/admin/{ADMIN}/study/why/export/responses.jsonl").text.splitlines()
    [answer] = [json.loads(r) for r in rows]
    assert answer["text"] == "It names the right character." and answer["scope"] == "item"
    from storyeval.human.statement import design_statement

    statement = design_statement(study)
    assert 'After each choice (free text, required): "Briefly explain why' in statement


def test_a_pairwise_study_of_several_pairs_is_served(study_dir, tmp_path):
    text = """name: heads
title: Heads
protocol: pairwise
stories: stories.jsonl
select: {systems: [human, smollm2-p0.9, smollm2-k40-t0.7]}
pairwise:
  pairs: [[human, smollm2-p0.9], [human, smollm2-k40-t0.7]]
  allow_tie: true
criteria:
  - name: overall
    question: Which is better?
assignment:
  items_per_participant: 6
  raters_per_item: 1
"""
    (study_dir / "heads.yaml").write_text(text, encoding="utf-8")
    study = load_study(study_dir / "heads.yaml")
    client = make_client(study, tmp_path)
    for seed, link in enumerate(new_links(client, study, 3)):
        assert StudyBrowser(client, study, seed=seed).run(link).completion_code
    judgments = export(client, study, tmp_path)
    assert len(judgments) == 18
    assert {j.condition for j in judgments} <= {
        "human vs smollm2-p0.9",
        "human vs smollm2-k40-t0.7",
    }
    for rater in {j.rater_id for j in judgments}:  # never the same prompt twice for one person
        prompts = [j.item_id.split("|")[0] for j in judgments if j.rater_id == rater]
        assert len(prompts) == len(set(prompts))
    analysis = analyse_judgments(judgments, min_median_time_s=0, n_boot=20)
    assert set(analysis.pairwise["comparison"]) == {j.condition for j in judgments}
