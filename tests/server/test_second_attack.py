"""The six holes of the study server's second attack, each checked against a real server:

1. two browsers joining with one id at the same moment on PostgreSQL both got the participant;
2. ``max_participants`` was an unlocked count (overshot under concurrent joins);
3. joins that never consent filled ``max_participants``;
4. a paced client reserved every item of a study, and GETs alone renewed its reservations;
5. a screened-out browser came back without its platform id and was paid;
6. one writer's slow generator calls delayed every other writer's suggestions.

Clients on different network addresses are real: each binds its own loopback source address
(127.0.0.0/8 is all loopback on Linux).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from storyeval.human.study import load_study
from storyeval.server.app import create_app
from storyeval.server.settings import Settings
from storyeval.server.study_session import StudySession

from .conftest import write_study

ADMIN = "second-attack-admin-token-01"

STUDY = """
name: {name}
title: Open study
protocol: likert
stories: stories.jsonl
select: {{systems: [human, smollm2-p0.9], per_system: {per_system}, seed: 1}}
criteria:
  - {{name: coherence, question: "How coherent?", scale: 5, labels: {{1: low, 5: high}}}}
assignment: {{items_per_participant: 2, raters_per_item: {raters}{assignment}}}
enrollment: {{open: true{enrollment}}}
"""


def _study(
    study_dir: Path,
    name: str,
    enrollment: str = "",
    *,
    assignment: str = "",
    per_system: int = 12,
    raters: int = 3,
) -> Any:
    text = STUDY.format(
        name=name,
        enrollment=enrollment,
        assignment=assignment,
        per_system=per_system,
        raters=raters,
    )
    return write_study(study_dir, text, f"{name}.yaml")


def _browser(base: str, address: str) -> httpx.Client:
    """A browser (its own cookie jar) on its own network address."""
    transport = httpx.HTTPTransport(local_address=address)
    return httpx.Client(base_url=base, timeout=30, transport=transport)


def _database(kind: str, request: pytest.FixtureRequest, tmp_path: Path, name: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / (name + '.sqlite3')}"
    server = request.getfixturevalue("postgres_server")
    return server.create_database(f"{name}{time.monotonic_ns() % 10**9}")  # type: ignore[no-any-return]


def _at_once(count: int, work: Any) -> list[Any]:
    """Run ``work(i)`` in ``count`` threads released together; their results in order."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = work(i)
        except Exception as exc:  # reported by the assertion on the results
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


# ----------------------------------------------------------------------------- 1 and 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "workers"), [("postgresql", 2), ("postgresql", 1), ("sqlite", 2)]
)
def test_two_browsers_racing_for_one_id_never_share_the_participant(
    backend, workers, study_dir, tmp_path, live_server, request
):
    """Eight rounds of two cookieless browsers on two addresses sending the same id at the same
    moment: exactly one gets the participant's link, the other the 403 of a second browser."""
    study = _study(study_dir, "race")
    server = live_server(
        study.path, _database(backend, request, tmp_path, "race"), links=1, workers=workers
    )
    for round_ in range(8):
        browsers = [_browser(server.base, f"127.0.{side + 1}.{round_ + 1}") for side in (0, 1)]

        def join(i: int, browsers: list[httpx.Client] = browsers, k: int = round_) -> int:
            return browsers[i].get(f"/join/study/{study.name}?pid=RACE-{k}").status_code

        statuses = _at_once(2, join)
        assert sorted(statuses) == [303, 403], (round_, statuses)
        for browser in browsers:
            browser.close()


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "workers"), [("postgresql", 2), ("sqlite", 2)])
def test_max_participants_holds_under_simultaneous_joins(
    backend, workers, study_dir, tmp_path, live_server, request
):
    """28 people on 28 addresses join and consent at once; the cap of 10 is exact."""
    study = _study(study_dir, "capped", ", max_participants: 10")
    server = live_server(
        study.path, _database(backend, request, tmp_path, "cap"), links=1, workers=workers
    )

    def join_and_consent(i: int) -> str:
        with _browser(server.base, f"127.0.3.{i + 1}") as browser:
            page = browser.get(f"/join/study/{study.name}?pid=P{i}", follow_redirects=True)
            if not page.url.path.endswith("/welcome"):
                full = page.url.path.endswith("/full") or "full" in page.text
                return "full" if full else f"join {page.status_code}"
            token = page.url.path.split("/")[2]
            started = browser.post(
                f"/study/{token}/start", data={"consent": "yes"}, follow_redirects=True
            )
            if "/item/" in started.url.path:
                return "started"
            return "full" if "/full" in started.url.path else f"start {started.status_code}"

    outcomes = _at_once(28, join_and_consent)
    assert outcomes.count("started") == 10, outcomes
    assert outcomes.count("full") == 18, outcomes
    with httpx.Client(base_url=server.base) as admin:
        progress = admin.get(f"/admin/{server.admin}/study/{study.name}/progress.json").json()
    assert progress["started"] == 10


# ----------------------------------------------------------------------------- 3 and 4


def _client(study: Any, db_url: str, clock: list[float], **settings: Any) -> TestClient:
    options = {"enroll_burst": 10, "trust_proxy": True, **settings}
    app = create_app(
        Settings(database_url=db_url, admin_token=ADMIN, **options),
        [StudySession(study)],
        clock=lambda: clock[0],
    )
    return TestClient(app)


def _join(client: TestClient, study: Any, address: str, query: str = "") -> httpx.Response:
    """A new browser (no cookie) from ``address`` opening the study's link."""
    client.cookies.clear()
    return client.get(f"/join/study/{study.name}{query}", headers={"X-Forwarded-For": address})


def _consent(client: TestClient, page: httpx.Response, address: str) -> httpx.Response:
    token = page.url.path.split("/")[2]
    return client.post(
        f"/study/{token}/start", data={"consent": "yes"}, headers={"X-Forwarded-For": address}
    )


def test_joins_that_never_consent_hold_no_place(db_url, examples_dir, tmp_path):
    """40 page loads with made-up Prolific ids from one address (paced under the rate limit)
    leave every place of ``prolific.yaml`` (max 40) to real participants."""
    study = load_study(examples_dir / "studies" / "prolific.yaml")
    clock = [1000.0]
    client = _client(study, db_url, clock)
    for i in range(40):
        page = _join(client, study, "198.51.100.7", f"?PROLIFIC_PID=BOT{i}&STUDY_ID=s&SESSION_ID=x")
        assert page.status_code == 200, (i, page.status_code)
        clock[0] += 3.1  # paced under the rate limit
    real = _join(client, study, "203.0.113.5", "?PROLIFIC_PID=REAL1&STUDY_ID=s&SESSION_ID=y")
    assert real.url.path.endswith("/welcome"), real.text[:300]
    started = _consent(client, real, "203.0.113.5")
    assert "/comprehension/" in started.url.path, started.text[:300]


def test_a_paced_client_cannot_reserve_the_study(db_url, examples_dir, tmp_path):
    """``likert.yaml`` with default settings: 12 join + consent pairs from one address, paced
    under the rate limit, reserve the items of at most 3 participants; a joiner elsewhere gets
    items."""
    study = load_study(examples_dir / "studies" / "likert.yaml")
    clock = [1000.0]
    client = _client(study, db_url, clock)
    outcomes = []
    for _ in range(12):
        page = _join(client, study, "198.51.100.7")
        started = _consent(client, page, "198.51.100.7")
        outcomes.append("items" if "/training/" in started.url.path else started.status_code)
        clock[0] += 3.1
    assert outcomes.count("items") == 3 and outcomes.count(429) == 9, outcomes
    progress = client.get(f"/admin/{ADMIN}/study/{study.name}/progress.json").json()
    assert progress["slots_reserved"] == 3 * study.items_per_participant
    real = _join(client, study, "203.0.113.5")
    assert "/training/" in _consent(client, real, "203.0.113.5").url.path


def test_page_loads_do_not_keep_a_reservation(db_url, study_dir):
    """Two clients reserve every item, then reload their item pages every 16 s and never
    answer: the reservation time (1 minute here) runs from their last answer, so a newcomer
    after 96 s gets items."""
    study = _study(study_dir, "held", assignment=", reservation_minutes: 1", per_system=2, raters=1)
    clock = [1000.0]
    client = _client(study, db_url, clock)
    holders = []
    for address in ("198.51.100.7", "198.51.100.8"):
        item = _consent(client, _join(client, study, address), address)
        assert "/item/" in item.url.path, item.text[:300]
        holders.append((item.url.path, dict(client.cookies), address))
    assert "full" in _join(client, study, "203.0.113.5").text
    for _ in range(6):  # 96 s of page loads, no answer
        clock[0] += 16
        for path, cookies, address in holders:
            client.cookies.clear()
            client.cookies.update(cookies)
            page = client.get(path, headers={"X-Forwarded-For": address})
            assert page.status_code == 200 and page.url.path == path
    real = _join(client, study, "203.0.113.5")
    assert "/item/" in _consent(client, real, "203.0.113.5").url.path


def test_an_answer_keeps_the_reservation(db_url, study_dir):
    """A and B reserve every item; A answers after 50 s, B never does. At 100 s a newcomer
    gets B's items, and A keeps the one it has not answered yet."""
    study = _study(study_dir, "kept", assignment=", reservation_minutes: 1", per_system=2, raters=1)
    clock = [1000.0]
    client = _client(study, db_url, clock)
    item_a = _consent(client, _join(client, study, "198.51.100.7"), "198.51.100.7")
    cookies_a = dict(client.cookies)
    _consent(client, _join(client, study, "198.51.100.8"), "198.51.100.8")
    clock[0] += 50
    client.cookies.clear()
    client.cookies.update(cookies_a)
    answered = client.post(
        item_a.url.path, data={"coherence": "3"}, headers={"X-Forwarded-For": "198.51.100.7"}
    )
    assert "/item/" in answered.url.path
    clock[0] += 50  # 100 s after consent, 50 s after A's answer
    newcomer = _consent(client, _join(client, study, "203.0.113.5"), "203.0.113.5")
    assert "/item/" in newcomer.url.path, newcomer.text[:300]
    progress = client.get(f"/admin/{ADMIN}/study/{study.name}/progress.json").json()
    assert progress["slots_done"] == 1 and progress["slots_reserved"] == 3
    client.cookies.clear()
    client.cookies.update(cookies_a)
    again = client.get(answered.url.path, headers={"X-Forwarded-For": "198.51.100.7"})
    assert again.url.path == answered.url.path, "A's second item is still A's"


# ----------------------------------------------------------------------------- 5


def _fail_comprehension(client: TestClient, page: httpx.Response, address: str) -> httpx.Response:
    for _ in range(2):
        page = client.post(
            page.url.path, data={"task": "1", "part": "1"}, headers={"X-Forwarded-For": address}
        )
    return page


def test_a_screened_out_browser_stays_screened_out(db_url, examples_dir):
    """``prolific.yaml``: a participant screened out by the comprehension check who comes back
    in the same browser without parameters is refused (the platform's id is required), and
    with a new id is sent back to their screen-out page."""
    study = load_study(examples_dir / "studies" / "prolific.yaml")
    clock = [1000.0]
    client = _client(study, db_url, clock)
    address = "198.51.100.7"
    page = _join(client, study, address, "?PROLIFIC_PID=X&STUDY_ID=s&SESSION_ID=x")
    check = _consent(client, page, address)
    assert "/comprehension/0" in check.url.path
    screened = _fail_comprehension(client, check, address)
    assert screened.url.path.endswith("/screened_out") and "SCREENED1" in screened.text
    headers = {"X-Forwarded-For": address}
    bare = client.get(f"/join/study/{study.name}", headers=headers)
    assert bare.status_code == 400 and "PROLIFIC_PID" in bare.text
    other_id = client.get(
        f"/join/study/{study.name}?PROLIFIC_PID=Y&STUDY_ID=s&SESSION_ID=z", headers=headers
    )
    assert other_id.url.path == screened.url.path and "SCREENED1" in other_id.text
    assert "C1STORYEVAL" not in other_id.text
    people = client.get(f"/admin/{ADMIN}/study/{study.name}/progress.json").json()
    assert people["participants"] == 1


def test_a_platform_study_may_allow_joins_without_the_id(db_url, study_dir):
    """``require_id: false`` says so in the file: anonymous joins are then allowed."""
    text = STUDY.format(
        name="anon",
        enrollment=", require_id: false",
        assignment="",
        per_system=2,
        raters=1,
    )
    study = write_study(study_dir, text + "platform: {name: prolific}\n", "anon.yaml")
    client = _client(study, db_url, [1000.0])
    assert _join(client, study, "198.51.100.7").url.path.endswith("/welcome")
    strict = write_study(
        study_dir,
        text.replace(", require_id: false", "").replace("name: anon", "name: strict")
        + "platform: {name: prolific}\n",
        "strict.yaml",
    )
    client = _client(strict, db_url.replace("anon", "strict"), [1000.0])
    assert _join(client, strict, "198.51.100.7").status_code == 400


# ----------------------------------------------------------------------------- also seen


def test_unknown_paths_and_methods_get_the_html_error_page(tmp_path, study_dir):
    study = _study(study_dir, "errors", per_system=2, raters=1)
    client = _client(study, f"sqlite:///{tmp_path / 'e.sqlite3'}", [1000.0])
    missing = client.get("/no/such/page")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
    assert "no page at this address" in missing.text
    wrong = client.post("/healthz")
    assert wrong.status_code == 405 and wrong.headers["content-type"].startswith("text/html")
    assert "GET" in wrong.headers["allow"]
