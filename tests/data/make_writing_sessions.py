"""Write tests/data/writing_sessions.jsonl, the hand-worked sessions file of
tests/test_collab_analysis.py (run: python tests/data/make_writing_sessions.py).

Four sessions in the export format of the study server:

* ``fixture/pA`` and ``fixture/pB``: complete CYOA sessions of the study ``fixture`` with
  generators ``alpha`` and ``beta``, three rounds each (texts chosen so that every edit metric,
  distinct-n and sentence length can be worked out by hand, and no value ties across the two
  generators, so the Mann-Whitney U tests are exact);
* ``fixture/pC``: an incomplete CYOA session (one submitted suggestion turn, one pending);
* ``mil-fixture/pM``: a complete machine-in-the-loop session with generator ``solo``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TARGET = Path(__file__).with_name("writing_sessions.jsonl")
STATEMENTS = {
    "happy": "I'm happy with my final story.",
    "collaborative": "I felt the system and I were working collaboratively to write the story.",
    "useful": "I thought having the suggestions was useful while writing the story.",
    "connected": "The suggestions connected to what had happened in the story so far.",
    "ideas": "The suggestions helped me come up with new ideas.",
    "story_creative": "Is the final story creative?",
    "enjoyable": "How enjoyable was the writing process?",
}
DROPPED = {"empty": 0, "long": 0, "copy": 0, "offensive": 0}


def writer(index: int, rnd: int, text: str) -> dict[str, Any]:
    return {
        "index": index,
        "round": rnd,
        "author": "writer",
        "text": text,
        "shown_at": 0.0,
        "submitted_at": 40.0,
        "time_s": 40.0,
    }


def suggestion(
    index: int,
    rnd: int,
    offered: list[tuple[str, int, str]],
    chosen: str,
    kept: str,
    *,
    switched_from: str | None = None,
    pushed: bool = False,
) -> dict[str, Any]:
    if pushed:
        events = [{"t": 2.0, "action": "push", "generator": chosen}]
    elif switched_from:
        events = [
            {"t": 10.0, "action": "choose", "generator": switched_from},
            {"t": 15.0, "action": "switch", "generator": chosen},
        ]
    else:
        events = [{"t": 10.0, "action": "choose", "generator": chosen}]
    events.append({"t": 30.0, "action": "submit", "generator": chosen})
    return {
        "index": index,
        "round": rnd,
        "author": "suggestion",
        "context": "(the story so far)",
        "suggestions": [
            {
                "generator": name,
                "position": position,
                "text": text,
                "signature": f"suggest|model:fixture|generator:{name}|version:0.1.0",
                "seed": 1000 * rnd + position,
                "generation_s": 1.5,
                "wait_s": 2.0,
                "attempts": 1,
                "dropped": DROPPED,
                "error": None,
            }
            for name, position, text in sorted(offered, key=lambda item: item[1])
        ],
        "events": events,
        "chosen": chosen,
        "switches": 1 if switched_from else 0,
        "text": kept,
        "requested_at": 0.0,
        "ready_at": 2.0,
        "submitted_at": 30.0,
        "choice_s": 8.0,
        "edit_s": 20.0,
    }


def survey(values: list[tuple[str, int]], scale: int, answers: list[tuple[str, str, str]]) -> Any:
    return {
        "likert": [
            {"name": name, "statement": STATEMENTS[name], "value": value, "scale": scale}
            for name, value in values
        ],
        "questions": [{"name": n, "question": q, "answer": a} for n, q, a in answers],
        "submitted_at": 480.0,
    }


def session(
    sid: str,
    kind: str,
    study: str,
    status: str,
    generators: list[str],
    turns: list[Any],
    answers: Any,
) -> Any:
    return {
        "format": "storyeval-writing-session",
        "format_version": 1,
        "session_id": sid,
        "kind": kind,
        "session": study,
        "version": "fixture",
        "participant": sid.split("/")[1],
        "status": status,
        "phase": "done" if status == "complete" else "generating",
        "prompt": {"id": "lighthouse", "text": None, "image": "lighthouse.png"},
        "generators": {name: {"name": name, "model": "smollm2"} for name in generators},
        "started_at": 0.0,
        "finished_at": 500.0 if status == "complete" else None,
        "turns": turns,
        "story": " ".join(t["text"] for t in turns if t.get("text")),
        "survey": answers,
        "failed_generations": 0,
    }


WHY = "What made you choose one suggestion over another?"
LOOK = "What were you looking for in the suggestions?"

SESSIONS = [
    session(
        "fixture/pA",
        "cyoa",
        "fixture",
        "complete",
        ["alpha", "beta"],
        [
            writer(1, 1, "The dog ran to the park."),
            suggestion(
                2,
                1,
                [("alpha", 1, "He found a red ball."), ("beta", 2, "It was a sunny day.")],
                "alpha",
                "He found a red ball.",
            ),
            writer(3, 2, "The dog ate the bone."),
            suggestion(
                4,
                2,
                [
                    ("alpha", 2, "The cat slept and the cat ate."),
                    ("beta", 1, "The boy laughed loudly."),
                ],
                "beta",
                "The boy laughed.",
                switched_from="alpha",
            ),
            writer(5, 3, "The sun set over the hills."),
            suggestion(
                6,
                3,
                [
                    ("alpha", 1, "The dog went home and slept."),
                    ("beta", 2, "Night came and the stars shone."),
                ],
                "alpha",
                "The dog went home.",
            ),
        ],
        survey(
            [("happy", 4), ("collaborative", 3), ("useful", 5), ("connected", 2), ("ideas", 4)],
            5,
            [("why_choose", WHY, "The one that fit my dog."), ("looking_for", LOOK, "")],
        ),
    ),
    session(
        "fixture/pB",
        "cyoa",
        "fixture",
        "complete",
        ["alpha", "beta"],
        [
            writer(1, 1, "A girl found a map in the attic."),
            suggestion(
                2,
                1,
                [
                    ("alpha", 2, "She opened the old box up."),
                    ("beta", 1, "The map was old and torn."),
                ],
                "alpha",
                "She opened the old box.",
            ),
            writer(3, 2, "The map showed an island."),
            suggestion(
                4,
                2,
                [
                    ("alpha", 1, "She packed a bag and left."),
                    ("beta", 2, "Her brother laughed at the plan."),
                ],
                "beta",
                "Her brother laughed.",
            ),
            writer(5, 3, "She sailed alone for three long days."),
            suggestion(
                6,
                3,
                [
                    ("alpha", 2, "She saw the tiny island."),
                    ("beta", 1, "The sea was calm and the sky was blue."),
                ],
                "alpha",
                "She saw the island.",
            ),
        ],
        survey(
            [("happy", 5), ("collaborative", 4), ("useful", 4), ("connected", 3), ("ideas", 2)],
            5,
            [
                ("why_choose", WHY, "Whichever kept the treasure hunt going."),
                ("looking_for", LOOK, "Surprises."),
            ],
        ),
    ),
    session(
        "fixture/pC",
        "cyoa",
        "fixture",
        "incomplete",
        ["alpha", "beta"],
        [
            writer(1, 1, "The robot woke up in the rain."),
            suggestion(
                2,
                1,
                [
                    ("alpha", 1, "It could not feel its legs."),
                    ("beta", 2, "Water ran into its gears."),
                ],
                "beta",
                "Water ran into its old gears.",
            ),
            writer(3, 2, "It walked to the nearest house."),
            {
                "index": 4,
                "round": 2,
                "author": "suggestion",
                "context": "(the story so far)",
                "suggestions": [
                    {"generator": "alpha", "position": 2, "text": None, "seed": 5},
                    {"generator": "beta", "position": 1, "text": None, "seed": 6},
                ],
                "events": [],
                "chosen": None,
                "switches": 0,
                "text": None,
                "requested_at": 100.0,
                "ready_at": None,
                "submitted_at": None,
            },
        ],
        None,
    ),
    session(
        "mil-fixture/pM",
        "mil",
        "mil-fixture",
        "complete",
        ["solo"],
        [
            writer(1, 1, "Tom lost his hat."),
            suggestion(
                2,
                1,
                [("solo", 1, "He looked everywhere for it.")],
                "solo",
                "He looked everywhere.",
                pushed=True,
            ),
            writer(3, 2, "The wind had taken it."),
            suggestion(
                4, 2, [("solo", 1, "The hat flew away.")], "solo", "The hat flew away.", pushed=True
            ),
        ],
        survey([("story_creative", 6), ("enjoyable", 7)], 7, []),
    ),
]


def main() -> None:
    with open(TARGET, "w", encoding="utf-8") as fh:
        for record in SESSIONS:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(f"wrote {len(SESSIONS)} sessions to {TARGET}")


if __name__ == "__main__":
    main()
