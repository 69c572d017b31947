"""The live agreement page: a simulated study with careful, biased, random and constant raters
(the truth known per story), the raters to review flagged with their reasons, the agreement
per criterion, JSON beside it, and the page in Chromium against a real server."""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from storyeval.meta.review import rater_review
from storyeval.server.app import create_app
from storyeval.server.settings import Settings
from storyeval.server.simulate import StudyBrowser

ADMIN = "dashboard-admin-token-0123456789"
_STORY = re.compile(r'<div class="story">(.*?)</div>', re.S)


def _truth(page: str) -> int:
    """The story's 'true' rating, 1-5, the same for every rater who sees it."""
    found = _STORY.search(page)
    text = found.group(1) if found else page
    return 1 + int(hashlib.sha1(text.encode()).hexdigest(), 16) % 5


class _Rater(StudyBrowser):
    """A simulated rater who answers from the story on the page."""

    def __init__(self, client: Any, study: Any, style: str, seed: int) -> None:
        super().__init__(client, study, answer=self._answer, seed=seed)
        self.style, self.page = style, ""

    def plan(self, path: str, response: Any) -> Any:
        self.page = response.text
        return super().plan(path, response)

    def _answer(self, kind: str, keys: Any, rng: random.Random) -> dict[str, int]:
        true = _truth(self.page)
        value = {
            "careful": max(1, min(5, true + rng.choice([-1, 0, 0, 0, 0, 1]))),
            "harsh": max(1, true - 2),
            "random": rng.randint(1, 5),
            "constant": 3,
        }[self.style]
        return {key: value for key in keys}


STYLES = ["careful", "careful", "careful", "harsh", "random", "constant"]
STUDY = """
name: agreement
title: Agreement test
protocol: likert
stories: stories.jsonl
select:
  systems: [human, smollm2-p0.9]
  per_system: {per_system}
  seed: 1
criteria:
  - name: coherence
    question: How well do the sentences fit together?
    scale: 5
    labels: {{1: lowest, 5: highest}}
  - name: relevance
    question: How relevant is the story to the prompt?
    scale: 5
    labels: {{1: lowest, 5: highest}}
assignment:
  items_per_participant: {items}
  raters_per_item: {raters}
  order: balanced
quality:
  min_median_time_s: 0
"""


def _study(study_dir: Path, per_system: int, raters: int) -> Any:
    from storyeval.human.study import load_study

    path = study_dir / "agreement.yaml"
    path.write_text(STUDY.format(per_system=per_system, items=2 * per_system, raters=raters))
    return load_study(path)


def _new_links(client: TestClient, study: Any, count: int) -> list[str]:
    response = client.post(
        f"/admin/{ADMIN}/links", data={"kind": "study", "name": study.name, "count": str(count)}
    )
    assert response.status_code == 200
    return re.findall(r"<code>(http[^<]+)</code>", response.text)


def test_the_page_flags_the_raters_to_review(study_dir: Path, tmp_path: Path) -> None:
    from storyeval.server.study_session import StudySession

    study = _study(study_dir, 10, len(STYLES))
    settings = Settings(database_url=f"sqlite:///{tmp_path / 's.sqlite3'}", admin_token=ADMIN)
    client = TestClient(create_app(settings, [StudySession(study)]))
    links = _new_links(client, study, len(STYLES))
    for k, (style, link) in enumerate(zip(STYLES, links, strict=True)):
        _Rater(client, study, style, seed=k).run(link)
    prefix = f"/admin/{ADMIN}/study/{study.name}"
    assert f"{prefix}/agreement" in client.get(f"{prefix}/").text
    page = client.get(f"{prefix}/agreement")
    assert page.status_code == 200 and '<meta http-equiv="refresh" content="30">' in page.text
    data = client.get(f"{prefix}/agreement.json").json()
    raters = {r["rater_id"]: r for r in data["raters"]}
    style = dict(zip(sorted(raters), STYLES, strict=True))  # p00001.. in link order
    flagged = {style[r["rater_id"]]: r["reasons"] for r in data["raters"] if r["review"]}
    assert set(flagged) == {"harsh", "random", "constant"}, data["raters"]
    assert "points from the others" in flagged["harsh"]
    assert "agreement with the others" in flagged["random"]
    assert "always gives the same answer" in flagged["constant"]
    assert [r["review"] for r in data["raters"]][:3] == [True, True, True]  # flagged first
    alphas = [c for c in data["criteria"] if c["method"] == "krippendorff_alpha_interval"]
    assert {c["criterion"] for c in alphas} == {"coherence", "relevance"}
    assert all(-1 <= c["estimate"] <= 1 and c["n_raters"] == len(STYLES) for c in alphas)
    assert data["judgments"] == sum(r["judgments"] for r in data["raters"]) > 200
    rows = re.findall(r'<tr class="flag">', page.text)
    assert len(rows) == 3
    assert client.get(f"/admin/wrong-token/study/{study.name}/agreement").status_code in (403, 404)


def test_the_review_of_a_finished_study_is_the_same_from_its_export() -> None:
    import pandas as pd

    rng = random.Random(0)
    rows = []
    for item in range(12):
        true = 1 + item % 5
        for rater, value in (("a", true), ("b", true), ("c", rng.randint(1, 5)), ("d", 3)):
            rows.append(
                {"item_id": f"i{item}", "rater_id": rater, "criterion": "q", "value": value}
            )
    table = rater_review(pd.DataFrame(rows), competence=False).set_index("rater_id")
    assert table.loc["a", "agreement"] > 0.5 and not table.loc["a", "review"]
    assert table.loc["d", "constant"] and table.loc["d", "review"]


@pytest.mark.slow
def test_the_dashboard_in_chromium(study_dir: Path, tmp_path: Path, live_server: Any) -> None:
    import httpx
    from playwright.sync_api import sync_playwright

    from .conftest import LIVE_ADMIN, launch_chromium

    study = _study(study_dir, 4, 4)
    server = live_server(study.path, f"sqlite:///{tmp_path / 'live.sqlite3'}", links=4)
    styles = ["careful", "careful", "careful", "constant"]
    with httpx.Client(base_url=server.base, timeout=30) as client:
        for k, (style, link) in enumerate(zip(styles, server.links, strict=True)):
            _Rater(client, study, style, seed=k).run(link)
    with sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        try:
            page = browser.new_page()
            page.goto(f"{server.base}/admin/{LIVE_ADMIN}/study/{study.name}/")
            page.click("text=Live agreement and raters to review")
            assert page.url.endswith("/agreement")
            flagged = page.locator("table.raters tr.flag")
            assert flagged.count() == 1 and "always gives the same answer" in flagged.inner_text()
            assert page.locator("table.agreement tr").count() > 1
        finally:
            browser.close()
