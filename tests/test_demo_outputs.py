"""Every number of the demo's steps is byte-identical to the stored copy of their outputs
(signatures aside: they carry the version). A change that moves one must say so in
CHANGELOG.md and refresh the copy (see tests/demo_snapshot.py).

The steps run on the stories of the first twelve prompts (36 of the 180, every system) and
their judgments, so that the default suite, perplexity included, fits the test budget."""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import pytest

from demo_snapshot import FILES, normalised

STORED = Path(__file__).parent / "data" / "demo_outputs"
PROMPTS = {f"s{index:03d}" for index in range(1, 13)}


def demo_inputs(examples: Path, out: Path) -> tuple[str, str]:
    """The example stories of the first twelve prompts and their judgments, as files."""
    stories = [json.loads(line) for line in (examples / "stories.jsonl").open(encoding="utf-8")]
    kept = [s for s in stories if s["prompt_id"] in PROMPTS]
    ids = {s["id"] for s in kept}
    judgments = [
        line
        for line in (examples / "judgments.jsonl").open(encoding="utf-8")
        if json.loads(line)["item_id"] in ids
    ]
    story_file, judgment_file = out / "stories.jsonl", out / "judgments.jsonl"
    story_file.write_text("".join(json.dumps(s) + "\n" for s in kept), encoding="utf-8")
    judgment_file.write_text("".join(judgments), encoding="utf-8")
    return str(story_file), str(judgment_file)


def run_demo(run_cli: Any, examples_dir: Path, out: Path) -> None:
    """The demo's steps (generation and training aside: their own tests pin them)."""
    stories, judgments = demo_inputs(examples_dir, out)

    steps = [
        ("describe", stories, "-o", str(out / "describe.csv")),
        (
            "score",
            stories,
            "-o",
            str(out / "scores.jsonl"),
            "--per-system",
            str(out / "systems.csv"),
            "--no-progress",
        ),
        (
            "correlate",
            "--scores",
            str(out / "scores.jsonl"),
            "--judgments",
            judgments,
            "-o",
            str(out / "correlations.csv"),
        ),
        ("agreement", "--judgments", judgments, "-o", str(out / "agreement.csv")),
        (
            "study",
            "analyse",
            "--judgments",
            judgments,
            "--stories",
            stories,
            "-o",
            str(out / "study-analysis"),
        ),
        ("cyoa", "analyse", str(examples_dir / "cyoa" / "sessions.jsonl"), "-o", str(out / "cyoa")),
        (
            "perturb",
            str(examples_dir / "human.jsonl"),
            "--mix",
            "--seed",
            "1",
            "-o",
            str(out / "union-negatives.jsonl"),
        ),
    ]
    for step in steps:
        code, _, err = run_cli(*step)
        assert code == 0, f"storyeval {' '.join(step)}: {err}"


@pytest.mark.slow
def test_the_demo_outputs_are_byte_identical(
    tmp_path: Path, run_cli: Any, examples_dir: Path
) -> None:
    out = tmp_path
    run_demo(run_cli, examples_dir, out)
    changed = []
    for name in FILES:
        now, before = normalised(out / name), (STORED / name).read_text(encoding="utf-8")
        if now != before:
            diff = difflib.unified_diff(before.splitlines(), now.splitlines(), lineterm="", n=0)
            changed.append(f"{name}:\n" + "\n".join(list(diff)[:8]))
    assert not changed, "demo outputs moved:\n" + "\n\n".join(changed)
