"""storyeval view: every view over the example corpus, filters, sorts and links that carry the
state, untrusted story text that never runs, what could not be joined, and a real server in
Chromium."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from storyeval.corpus import Judgment, Story, read_stories

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from storyeval.view import create_view_app, load_view_data
from storyeval.view.index import IndexedStories, open_view_data

EVIL = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, examples_dir: Path) -> Path:
    """The example stories and ratings, a score file, a judge's answers with rationales, a
    judge's pairwise run, a story whose text is markup, and a score of an unknown story."""
    folder = tmp_path_factory.mktemp("view")
    stories = read_stories(examples_dir / "stories.jsonl")
    evil = Story("evil", "A prompt <b>bold</b>", EVIL, system="attacker", extra={"prompt_id": "x1"})
    (folder / "stories.jsonl").write_text(
        "".join(json.dumps(s.to_dict()) + "\n" for s in [*stories, evil])
    )
    (folder / "judgments.jsonl").write_text((examples_dir / "judgments.jsonl").read_text())
    scores = [
        {"item_id": s.id, "metric": "words_metric", "value": float(len(s.story.split()))}
        for s in stories
    ]
    scores.append({"item_id": "ghost", "metric": "words_metric", "value": 1.0})
    (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in scores))
    judge = [
        Judgment(
            s.id,
            "judge|model:x",
            "coherence",
            3.0 + (k % 3),
            extra={
                "raw": f"Score: {3 + k % 3} because <i>reasons</i>",
                "probabilities": [0.1, 0.1, 0.2, 0.3, 0.3],
            },
        )
        for k, s in enumerate(stories)
    ]
    (folder / "judge.jsonl").write_text("".join(json.dumps(j.to_dict()) + "\n" for j in judge))
    pairs = []
    for prompt in ("s001", "s002"):
        for order, winner in (
            ("xy", "human"),
            ("yx", "smollm2-p0.9" if prompt == "s002" else "human"),
        ):
            pairs.append(
                {
                    "item_id": f"{prompt}:pair",
                    "prompt_id": prompt,
                    "system_a": "human",
                    "system_b": "smollm2-p0.9",
                    "winner": winner,
                    "criterion": "coherence",
                    "rater_id": "judge|model:x",
                    "order": order,
                    "first": "human" if order == "xy" else "smollm2-p0.9",
                }
            )
    (folder / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    original = stories[0]
    perturbed = [
        {
            "id": "p-neg",
            "source_id": original.id,
            "prompt": original.prompt,
            "story": original.story.replace("read it twice", "did not read it twice", 1),
            "techniques": ["negation"],
            "system": "perturbed",
        },
        {
            "id": "p-rep",
            "source_id": original.id,
            "prompt": original.prompt,
            "story": original.story + " <b>Again.</b>",
            "techniques": ["repetition"],
            "system": "perturbed",
        },
    ]
    (folder / "perturbed.jsonl").write_text("".join(json.dumps(p) + "\n" for p in perturbed))
    extra = [{"item_id": p["id"], "metric": "words_metric", "value": 7.0} for p in perturbed]
    (folder / "perturbed-scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in extra))
    return folder


@pytest.fixture(scope="module", params=["memory", "index"])
def client(
    request: pytest.FixtureRequest, corpus: Path, tmp_path_factory: pytest.TempPathFactory
) -> TestClient:
    """The app over the files read into memory, and over their SQLite index: the same pages."""
    if request.param == "memory":
        return TestClient(create_view_app(load_view_data([corpus])), base_url=LOOPBACK)
    data, built = open_view_data([corpus], index_dir=tmp_path_factory.mktemp("index"))
    assert built and isinstance(data.stories, IndexedStories)
    return TestClient(create_view_app(data), base_url=LOOPBACK)


def test_an_index_is_reused_until_an_input_changes(corpus: Path, tmp_path: Path) -> None:
    inputs = [corpus / "stories.jsonl", corpus / "judge.jsonl"]
    _, built = open_view_data(inputs, index_dir=tmp_path)
    again, rebuilt = open_view_data(inputs, index_dir=tmp_path)
    assert built and not rebuilt and len(list(tmp_path.glob("view-*.sqlite3"))) == 1
    memory = load_view_data(inputs)
    assert len(again.stories) == len(memory.stories)
    assert again.stories["evil"] == memory.stories["evil"]
    pd.testing.assert_frame_equal(again.table(), memory.table(), check_dtype=False)
    assert again.stories.systems() == memory.stories.systems()
    assert again.stories.matching("LIGHTHOUSE") == memory.stories.matching("lighthouse")
    assert [s.id for s in again.stories.by_prompt("s001")] == [
        s.id for s in memory.stories.by_prompt("s001")
    ]
    copy = tmp_path / "stories.jsonl"
    copy.write_text((corpus / "stories.jsonl").read_text(), encoding="utf-8")
    _, built = open_view_data([copy], index_dir=tmp_path)
    with copy.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps({"id": "late", "prompt": "P.", "story": "A late story."}) + "\n")
    changed, rebuilt = open_view_data([copy], index_dir=tmp_path)
    assert built and rebuilt and "late" in changed.stories
    assert len(list(tmp_path.glob("view-*.sqlite3"))) == 2  # one per set of input paths


def test_the_command_builds_then_reuses_an_index(
    run_cli: Any, corpus: Path, tmp_path: Path
) -> None:
    args = ["view", str(corpus), "--index", "always", "--index-dir", str(tmp_path / "idx")]
    code, stdout, err = run_cli(*args, "--export", str(tmp_path / "one"))
    assert code == 0 and "index built" in stdout, err
    code, stdout, err = run_cli(*args, "--export", str(tmp_path / "two"))
    assert code == 0 and "index reused" in stdout, err
    assert (tmp_path / "one" / "index.html").read_text() == (
        tmp_path / "two" / "index.html"
    ).read_text()
    code, _, err = run_cli("view", str(corpus), "--index", "sometimes")
    assert code == 2 and "--index" in err


def _rows(html: str, table: str) -> list[str]:
    body = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr[ >].*?</tr>", body, flags=re.S)


WORDS_CELL = r'<td class="n g-story" title="\d+">(\d+)</td>'


def test_the_table_filters_sorts_chooses_columns_and_pages(client: TestClient) -> None:
    everything = client.get("/")
    assert everything.status_code == 200 and "183 stories; page 1 of 4" in everything.text
    human = client.get("/?system=human&sort=words&desc=true&col=words&col=people:coherence")
    rows = _rows(human.text, "stories")[2:]  # the group row, then the names
    assert "60 stories" in human.text and len(rows) == 50
    words = [int(re.findall(WORDS_CELL, row)[0]) for row in rows]
    assert words == sorted(words, reverse=True)
    assert 'title="people:coherence">coherence</th>' in human.text
    assert 'title="words_metric"' not in human.text
    second = client.get("/?system=human&sort=words&desc=true&page=2")
    assert len(_rows(second.text, "stories")) == 2 + 10
    assert (
        'href="/?system=human&amp;sort=words&amp;desc=true&amp;page=2&amp;page=1"'
        not in second.text
    )
    searched = client.get("/?q=lighthouse")
    assert "stories; page" in searched.text


def test_the_prompt_view_shows_every_system_with_ratings_and_rationales(client: TestClient) -> None:
    page = client.get("/prompt/s001").text
    for system in ("human", "smollm2-p0.9", "smollm2-k40-t0.7"):
        assert f"<h2>{system} " in page
    assert "<td>r1</td>" in page and "<td>mean</td>" in page
    assert "Score: 3 because &lt;i&gt;reasons&lt;/i&gt;" in page  # escaped rationale
    assert "0.10 0.10 0.20 0.30 0.30" in page
    missing = client.get("/prompt/nowhere")
    assert missing.status_code == 404 and "no story for prompt" in missing.text
    assert "<h1>404</h1>" in client.get("/no/such/page").text


def test_disagreements_rank_the_biggest_gaps_first(client: TestClient) -> None:
    page = client.get("/disagree?metric=words_metric&criterion=coherence").text
    gaps = [abs(float(g)) for g in re.findall(r"<td>(-?\d\.\d{3})</td></tr>", page)]
    assert len(gaps) == 100 and gaps == sorted(gaps, reverse=True)
    raters = client.get("/disagree?by=raters&criterion=likability").text
    assert "sd of ratings" in raters and 'href="/prompt/' in raters
    assert "choose a metric" in client.get("/disagree").text


def test_pairs_flag_orders_that_disagree(client: TestClient) -> None:
    page = client.get("/pairs").text
    rows = _rows(page, "pairs")[1:]
    flagged = [r for r in rows if 'class="flag"' in r]
    assert len(rows) == 4 and len(flagged) == 2 and all("s002" in r for r in flagged)
    assert 'id="matrix"' in page


def test_untrusted_text_is_escaped_and_unjoined_records_are_listed(client: TestClient) -> None:
    page = client.get("/prompt/x1")
    assert "&lt;script&gt;" in page.text and "<script>" not in page.text
    assert "<img src=x" not in page.text and "&lt;b&gt;bold&lt;/b&gt;" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]
    files = client.get("/files").text
    assert "item_id not in the story files" in files and "scores.jsonl" in files


def test_the_perturbation_view_marks_the_edit_and_both_scores(client: TestClient) -> None:
    page = client.get("/perturbations").text
    assert "2 perturbed stories" in page
    assert "She <ins>did not </ins>read it twice" in page  # the inserted words marked
    assert "<ins>&lt;b&gt;Again.&lt;/b&gt; </ins>" in page and "<b>Again" not in page
    assert "<td>words_metric</td><td>" in page and "<td>7</td>" not in page
    only = client.get("/perturbations?technique=negation").text
    assert "1 perturbed stories" in only and "p-rep" not in only


def test_the_command_refuses_other_addresses(run_cli: Any, corpus: Path) -> None:
    code, _, err = run_cli("view", str(corpus), "--host", "0.0.0.0")
    assert code == 2 and "loopback" in err
    code, _, err = run_cli("view", str(corpus / "nothing.jsonl"))
    assert code == 2 and "no such file" in err


LOOPBACK = "http://127.0.0.1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_a_real_server_in_chromium(corpus: Path) -> None:
    playwright_api = pytest.importorskip("playwright.sync_api")
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "storyeval", "view", str(corpus), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.3)
        with playwright_api.sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
            )
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/?system=attacker")
            assert page.locator("#stories tbody tr").count() == 1
            page.click("text=x1")
            assert page.url.endswith("/prompt/x1")
            assert page.evaluate("window.pwned === undefined")
            assert EVIL in page.inner_text("section.story p.text")
            page.goto(f"http://127.0.0.1:{port}/?system=human&sort=words&desc=true")
            assert page.locator("#stories tbody tr").count() == 50
            browser.close()
        # DNS rebinding: a page at evil.example whose name now points at 127.0.0.1 asks with
        # its own Host header; before 0.9.0 it got the stories table
        for host, status in (("evil.example", 400), (f"localhost:{port}", 200)):
            request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers={"Host": host})
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    got, body = response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                got, body = error.code, error.read().decode()
            assert got == status, (host, got)
            assert ("x1" in body) == (status == 200)
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_item_rows_are_the_rows_a_mask_selects() -> None:
    """A prompt page's rows per story, found once per table: the same rows, order, index and
    columns as masking the table (an unknown story: no rows; an empty table: none either)."""
    import pandas as pd

    from storyeval.view.app import ItemRows

    table = pd.DataFrame(
        {
            "item_id": ["b", "a", "b", "c", "a", "b"],
            "metric": ["z", "y", "x", "x", "x", "y"],
            "value": [1.0, 2.0, float("nan"), 4.0, 5.0, 6.0],
        },
        index=[10, 11, 12, 13, 14, 15],
    )
    rows = ItemRows(table)
    for item_id in ("a", "b", "c", "ghost"):
        expected = table[table["item_id"] == item_id]
        found = rows(item_id)
        assert found.equals(expected) and list(found.index) == list(expected.index)
        assert list(found.columns) == list(table.columns)
    empty = ItemRows(table.iloc[0:0])("a")
    assert empty.empty and list(empty.columns) == list(table.columns)


def test_the_export_is_a_static_site_of_the_same_pages(
    corpus: Path, tmp_path: Path, run_cli: Any
) -> None:
    site = tmp_path / "site"
    code, stdout, err = run_cli("view", str(corpus), "--export", str(site))
    assert code == 0, err
    pages = sorted(p.name for p in site.glob("*.html"))
    assert "index.html" in pages and "views.html" in pages and (site / "static").is_dir()
    assert not re.search(r'(href|src)="/', "".join((site / p).read_text() for p in pages))
    evil_page = next(p for p in pages if p.startswith("prompt-x1-"))
    text = (site / evil_page).read_text()
    assert "&lt;script&gt;" in text and "<script>" not in text and "script-src 'none'" in text
    views = (site / "views.html").read_text()
    assert "words_metric against people&#x27;s coherence" in views and "negation" in views
    attacker = re.search(r'<a href="([^"]+)">the stories of attacker</a>', views)
    assert attacker is not None
    only = (site / attacker.group(1)).read_text()
    assert ">1 stories; page 1 of 1.</p>" in only and "evil" in only
    table = json.loads((site / "data" / "table.json").read_text())
    assert len(table) == len(read_stories(corpus / "stories.jsonl")) + 2  # and the perturbed
    small = tmp_path / "small"
    code, stdout, err = run_cli("view", str(corpus), "--export", str(small), "--max-pages", "8")
    assert code == 0 and "linked pages left out" in stdout
    assert len(list(small.glob("*.html"))) == 8 + 2  # and views.html, not-exported.html
    assert 'href="not-exported.html"' in (small / "index.html").read_text()


@pytest.mark.slow
def test_the_export_opens_from_the_file_system_in_chromium(corpus: Path, tmp_path: Path) -> None:
    playwright_api = pytest.importorskip("playwright.sync_api")
    from storyeval.view.export import export_site

    export_site(load_view_data([corpus]), tmp_path / "site")
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        page = browser.new_page()
        page.goto((tmp_path / "site" / "index.html").as_uri())
        assert page.locator("#stories tbody tr").count() == 50
        margin = page.evaluate("getComputedStyle(document.body).marginTop")
        assert margin == "0px"  # the style sheet loaded (a browser's default is 8px)
        page.click("nav >> text=Views")
        page.click("text=negation")
        assert "1 perturbed stories" in page.inner_text("main")
        page.click("nav >> text=Stories")
        page.click("text=x1")
        assert "/prompt-x1-" in page.url
        assert page.evaluate("window.pwned === undefined")
        assert EVIL in page.inner_text("section.story p.text")
        browser.close()


def _slogan_session() -> dict[str, Any]:
    """A slogan session in the server's export format, its final slogan markup."""
    return {
        "format": "storyeval-slogan-session",
        "format_version": 1,
        "session_id": "slogans/p7",
        "kind": "slogan",
        "session": "slogans",
        "participant": "p7",
        "condition": "suggestions",
        "status": "complete",
        "started_at": 100.0,
        "finished_at": 220.0,
        "tasks": [
            {
                "task": 1,
                "prompt": {"id": "coffee", "product": "a coffee shop"},
                "pulls": [
                    {
                        "keywords": ["coffee", "morning"],
                        "draft": "Good coffee.",
                        "suggestions": ["Bright mornings start with coffee.", "Coffee, warmly."],
                    }
                ],
                "final": EVIL,
                "survival": {"new_words": 0.5, "kept": 0.25},
                "survey": {
                    "likert": [
                        {"name": "proud", "statement": "I am proud of it", "value": 4, "scale": 5}
                    ]
                },
            }
        ],
        "final_survey": {"questions": [{"name": "why", "question": "Why?", "answer": "fun"}]},
    }


def test_writing_sessions_replay_turn_by_turn(tmp_path: Path, examples_dir: Path) -> None:
    (tmp_path / "cyoa.jsonl").write_text((examples_dir / "cyoa" / "sessions.jsonl").read_text())
    (tmp_path / "slogans.jsonl").write_text(json.dumps(_slogan_session()) + "\n")
    data = load_view_data([tmp_path])  # sessions alone: no story file needed
    client = TestClient(create_view_app(data), base_url=LOOPBACK)
    listing = client.get("/sessions").text
    assert "cyoa-example/p00001" in listing and "slogans/p7" in listing
    first = json.loads((examples_dir / "cyoa" / "sessions.jsonl").read_text().splitlines()[0])
    number = next(
        k for k, s in enumerate(data.sessions, start=1) if s["session_id"] == first["session_id"]
    )
    page = client.get(f"/session/{number}").text
    suggestion = next(t for t in first["turns"] if t["author"] == "suggestion")
    chosen = next(s for s in suggestion["suggestions"] if s["generator"] == suggestion["chosen"])
    assert f"{suggestion['chosen']} (chosen)" in page and chosen["text"] in page
    assert first["turns"][0]["text"] in page and "Actions: choose" in page
    slogan = client.get(f"/session/{len(data.sessions)}").text
    assert "Bright mornings start with coffee." in slogan and "I am proud of it" in slogan
    assert "&lt;script&gt;" in slogan and "<script>" not in slogan and "Why?" in slogan
    assert client.get("/session/999").status_code == 404
    bad = tmp_path / "bad" / "s.jsonl"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"format": "storyeval-writing-session", "turns": "x"}) + "\n")
    from storyeval.base.errors import DataFileError

    with pytest.raises(DataFileError, match=r"s\.jsonl:1: a writing session needs its .kind."):
        load_view_data([bad])
    from storyeval.view.export import export_site

    export_site(data, tmp_path / "site")
    assert len(list((tmp_path / "site").glob("session-*.html"))) == len(data.sessions)


def test_ranges_filter_the_table_and_bad_ones_are_refused(client: TestClient) -> None:
    page = client.get("/?range=words:100:140&sort=words&col=words")
    words = [
        int(w) for row in _rows(page.text, "stories")[2:] for w in re.findall(WORDS_CELL, row)[:1]
    ]
    assert words and all(100 <= w <= 140 for w in words)
    total = int(re.search(r"(\d+) stories; page", page.text).group(1))  # type: ignore[union-attr]
    table = client.get("/?rc=words&rlo=100&rhi=140").text
    assert f"{total} stories; page" in table and 'value="words:100.0:140.0"' in table
    rated = client.get("/?range=people:coherence:4:").text
    assert "stories; page" in rated
    for bad in ("nothing:1:2", "words:x:2", "item_id:1:2"):
        assert client.get(f"/?range={bad}").status_code == 422


def test_the_pairs_page_ranks_the_systems_with_intervals(client: TestClient) -> None:
    page = client.get("/pairs").text
    rows = _rows(page, "ranking")[1:]
    assert len(rows) >= 2 and all("–" in row for row in rows)


def test_references_are_marked_and_stored_rankings_shown(tmp_path: Path) -> None:
    story = Story("a", "P.", "The cat sat on the red mat.", reference="The cat sat on the mat.")
    (tmp_path / "stories.jsonl").write_text(json.dumps(story.to_dict()) + "\n")
    (tmp_path / "ranking.csv").write_text(
        "system,method,estimate,ci_low,ci_high,comparisons\nx,bradley-terry,0.5,0.1,0.9,40\n"
    )
    client = TestClient(create_view_app(load_view_data([tmp_path])), base_url=LOOPBACK)
    page = client.get("/prompt/a").text
    assert "<ins>red </ins>" in page and "Words not in the reference are marked" in page
    pairs = client.get("/pairs").text
    assert "Stored rankings" in pairs and "0.100 – 0.900" in pairs


def test_the_export_never_replaces_what_it_did_not_write(
    corpus: Path, tmp_path: Path, run_cli: Any
) -> None:
    """The third attack: `view stories.jsonl --export mydocs` deleted mydocs/thesis.tex, and
    `view in/ --export in/` deleted the inputs. Now a non-empty directory that is not an
    earlier export is refused and left as it was, an input's folder is refused, and an earlier
    export is replaced."""
    mine = tmp_path / "mydocs"
    mine.mkdir()
    (mine / "thesis.tex").write_text("x")
    code, _, err = run_cli("view", str(corpus), "--export", str(mine))
    assert code == 2 and "not an output of storyeval's view export" in err
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]
    code, _, err = run_cli("view", str(corpus), "--export", str(corpus))
    assert code == 2 and "is or holds the input" in err
    assert (corpus / "stories.jsonl").is_file()
    site = tmp_path / "site"
    assert run_cli("view", str(corpus), "--export", str(site))[0] == 0
    assert run_cli("view", str(corpus), "--export", str(site))[0] == 0  # an export: replaced
    assert (site / "index.html").is_file() and (site / ".storyeval-output").is_file()


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_table_reads_well_in_chromium(tmp_path: Path, examples_dir: Path, width: int) -> None:
    """A table of 40+ columns stays inside its frame (the page never scrolls sideways), its
    header row and first column stay in view, the column groups fold, numbers are compact
    with the full value on hover, one typeface throughout and no label wraps. Screenshots go
    to $STORYEVAL_ARTIFACTS (or the test's folder)."""
    playwright_api = pytest.importorskip("playwright.sync_api")
    import os

    from storyeval.view.export import export_site

    stories = read_stories(examples_dir / "stories.jsonl")
    names = [f"metric_with_a_long_name_{k:02d}" for k in range(42)]
    rows = [
        {"item_id": s.id, "metric": name, "value": 1 / (k + 3) + len(s.story) / 7}
        for s in stories
        for k, name in enumerate(names)
    ]
    (tmp_path / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "stories.jsonl").write_text((examples_dir / "stories.jsonl").read_text())
    (tmp_path / "judgments.jsonl").write_text((examples_dir / "judgments.jsonl").read_text())
    site = tmp_path / "site"  # the table's page alone
    export_site(load_view_data([tmp_path / "stories.jsonl", tmp_path / "scores.jsonl",
                                tmp_path / "judgments.jsonl"]), site, max_pages=1)  # fmt: skip
    shots = Path(os.environ.get("STORYEVAL_ARTIFACTS", tmp_path)) / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium", args=["--headless", "--no-sandbox"]
        )
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto((site / "index.html").as_uri())
        page.screenshot(path=str(shots / f"view-table-{width}.png"))
        sizes = page.evaluate(
            "[document.documentElement.scrollWidth, window.innerWidth,"
            " document.querySelector('.table-wrap').scrollWidth,"
            " document.querySelector('.table-wrap').clientWidth]"
        )
        assert sizes[0] <= sizes[1], sizes  # the page itself never scrolls sideways
        assert sizes[2] > sizes[3], sizes  # the wide table scrolls inside its frame
        style = "(s) => getComputedStyle(document.querySelector(s)).position"
        assert page.evaluate(style, "#stories tr.names th") == "sticky"
        assert page.evaluate(style, "#stories tbody td:first-child") == "sticky"
        fonts = page.evaluate(
            "Array.from(document.querySelectorAll('body, nav a, h1, th, td, label, button, p'))"
            ".map((e) => getComputedStyle(e).fontFamily)"
        )
        assert len(set(fonts)) == 1, set(fonts)
        wraps = page.evaluate(
            "Array.from(document.querySelectorAll('form label'))"
            ".filter((l) => l.getBoundingClientRect().height > 2 * parseFloat("
            "getComputedStyle(l).lineHeight || 20)).length"
        )
        assert wraps == 0
        cell = page.locator("#stories tbody td.g-metrics").first
        assert len(cell.inner_text()) <= 8 and len(cell.get_attribute("title") or "") > 8
        visible = "(s) => Array.from(document.querySelectorAll(s)).filter((e) => e.offsetParent !== null).length"
        assert page.evaluate(visible, "#stories th.g-metrics") == 43  # the group row and 42
        page.click("label[for=fold-metrics]")
        assert page.evaluate(visible, "#stories th.g-metrics") == 0
        assert page.evaluate(visible, "#stories th.g-people") > 0
        page.screenshot(path=str(shots / f"view-table-{width}-folded.png"))
        browser.close()


def test_the_export_is_the_same_from_inside_a_running_event_loop(
    tmp_path: Path, examples_dir: Path
) -> None:
    """A notebook (or an async server) already runs an event loop in its thread: the export
    crawls in a loop of its own on a helper thread and writes the same pages."""
    import asyncio

    from storyeval.view.export import export_site

    data = load_view_data([examples_dir / "stories.jsonl", examples_dir / "judgments.jsonl"])
    plain = export_site(data, tmp_path / "plain")

    async def from_a_loop() -> Any:
        return export_site(data, tmp_path / "looped")

    looped = asyncio.run(from_a_loop())
    assert looped.pages == plain.pages > 50
    for page in sorted((tmp_path / "plain").glob("*.html")):
        assert (tmp_path / "looped" / page.name).read_bytes() == page.read_bytes(), page.name
