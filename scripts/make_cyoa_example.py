"""Write examples/cyoa/sessions.jsonl: illustrative CYOA sessions for the demo and the README.

Four scripted writers go through the real study server (in-process, SQLite) serving
examples/cyoa/cyoa.yaml, with real suggestions from the offline SmolLM2 under the two decoding
settings of the file. Their lines, choice rules, edits and answers were written for this
project; they show the workflow (serve -> export -> ``storyeval cyoa analyse``) and are NOT
the result of a study with people: do not cite them as one.

Run: .venv/bin/python scripts/make_cyoa_example.py   (a few minutes on a CPU)
"""

from __future__ import annotations

import html
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fastapi.testclient import TestClient

from storyeval.collab.records import write_sessions
from storyeval.server import writing_store
from storyeval.server.app import create_app
from storyeval.server.kinds import load_session
from storyeval.server.participants import create_participants
from storyeval.server.settings import Settings

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "cyoa"
Choice = Callable[[list[str]], int]


def longer(options: list[str]) -> int:
    return max(range(len(options)), key=lambda i: len(options[i]))


def shorter(options: list[str]) -> int:
    return min(range(len(options)), key=lambda i: len(options[i]))


def fewer_repeats(options: list[str]) -> int:
    def repeats(text: str) -> int:
        words = re.findall(r"[a-z']+", text.lower())
        return len(words) - len(set(words))

    return min(range(len(options)), key=lambda i: (repeats(options[i]), i))


def first(options: list[str]) -> int:
    return 0


def keep_first_sentence(text: str, line: str) -> str:
    sentence = re.split(r"(?<=[.!?])\s+", text.strip())[0]
    return sentence if len(sentence) >= 20 else text


def append_own_clause(text: str, line: str) -> str:
    return (text.rstrip(".!? ") + ", and nobody said a word.")[:260]


def keep_as_is(text: str, line: str) -> str:
    return text


def rewrite_half(text: str, line: str) -> str:
    words = text.split()
    return " ".join(words[: max(4, len(words) // 2)]).rstrip(",;:") + "."


WRITERS: list[
    tuple[list[str], Choice, Callable[[str, str], str], dict[str, int], dict[str, str]]
] = [
    (
        [
            "Mara rowed out to the lighthouse after midnight.",
            "The door at the bottom of the tower was open.",
            "She climbed the stairs, counting every step aloud.",
            "At the top, the great lamp was already turning.",
            "Mara sat down beside the lamp and waited for dawn.",
        ],
        longer,
        keep_first_sentence,
        {"happy": 4, "collaborative": 4, "useful": 4, "connected": 3, "ideas": 5},
        {
            "why_choose": "I took the one with more going on and cut it down.",
            "looking_for": "Something to push Mara up the tower.",
        },
    ),
    (
        [
            "The baker found a note inside a loaf of bread.",
            "It was written in her grandmother's handwriting.",
            "The note asked her to open the old recipe box.",
            "Inside the box was a key wrapped in flour paper.",
            "She unlocked the cellar that had been closed for years.",
        ],
        shorter,
        append_own_clause,
        {"happy": 3, "collaborative": 3, "useful": 3, "connected": 2, "ideas": 4},
        {
            "why_choose": "Shorter ones were easier to fix.",
            "looking_for": "A sentence I could finish my own way.",
        },
    ),
    (
        [
            "Every night the robot watered the empty garden.",
            "One morning a green shoot pushed through the soil.",
            "The robot stopped and looked at it for an hour.",
            "It built a small fence around the shoot.",
            "When the flower opened, the robot took a picture.",
        ],
        fewer_repeats,
        keep_as_is,
        {"happy": 5, "collaborative": 4, "useful": 4, "connected": 4, "ideas": 3},
        {
            "why_choose": "The one that did not repeat itself.",
            "looking_for": "Details about the garden.",
        },
    ),
    (
        [
            "The train stopped in a station that was not on the map.",
            "A conductor with a lantern walked along the platform.",
            "He asked every passenger for a story instead of a ticket.",
            "Leo told him about the summer his brother disappeared.",
            "The conductor nodded, and the train moved on.",
        ],
        first,
        rewrite_half,
        {"happy": 4, "collaborative": 2, "useful": 3, "connected": 2, "ideas": 4},
        {
            "why_choose": "Usually the first one, unless it made no sense.",
            "looking_for": "Strange things that could happen at the station.",
        },
    ),
]


def _step(page: object) -> str:
    return re.search(r'name="step" value="([^"]*)"', page.text).group(1)  # type: ignore[attr-defined]


def _ready(client: TestClient, base: str) -> object:
    page = client.get(f"{base}/")
    while page.url.path.endswith("/wait"):
        time.sleep(0.2)
        page = client.get(f"{base}/")
    return page


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        plugin = load_session(EXAMPLES / "cyoa.yaml")
        app = create_app(Settings(database_url=f"sqlite:///{tmp}/cyoa.sqlite3"), [plugin])
        state = app.state.storyeval
        client = TestClient(app)
        for lines, choose, edit, likert, answers in WRITERS:
            token = state.db.run(
                lambda conn: create_participants(conn, "cyoa", plugin.name, 1, now=time.time())
            )[0].token
            base = f"/cyoa/{token}"
            page = client.post(f"{base}/start", data={"consent": "yes"})
            for line in lines:
                page = client.post(f"{base}/write", data={"step": _step(page), "text": line})
                page = _ready(client, base)
                texts = [
                    html.unescape(t)
                    for t in re.findall(r'<p class="suggestion">([^<]*)</p>', page.text)  # type: ignore[attr-defined]
                ]
                pick = choose(texts)
                page = client.post(
                    f"{base}/choose", data={"step": _step(page), "option": str(pick + 1)}
                )
                kept = edit(texts[pick], line)
                if len(kept) < 20:
                    kept = (kept + " Then the night went on.")[:260]
                page = client.post(
                    f"{base}/edit", data={"step": _step(page), "action": "add", "text": kept}
                )
            form = {"step": _step(page)}
            form.update({f"likert-{k}": str(v) for k, v in likert.items()})
            form.update({f"q-{k}": v for k, v in answers.items()})
            client.post(f"{base}/survey", data=form)
        with state.db.read() as conn:
            records = writing_store.export(conn, plugin.config)
        for record in records:  # the export is made by the script, not a recruitment platform
            record["external_id"] = None
    count = write_sessions(EXAMPLES / "sessions.jsonl", records)
    print(f"wrote {count} sessions to {EXAMPLES / 'sessions.jsonl'}")


if __name__ == "__main__":
    main()
