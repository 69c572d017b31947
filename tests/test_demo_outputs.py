"""Every number of the demo's steps equals the stored copy of their outputs (signatures aside:
they carry the version). A change that moves one must say so in CHANGELOG.md and refresh the
copy (see tests/demo_snapshot.py).

On the machine that made the copy the files are byte-identical. Neural models compute in
float32 with kernels that differ between CPU families (AVX-512/AMX on Intel, AVX2 on AMD), which
moves their values in the 7th or 8th significant digit; so text must match exactly and every
number to 1e-5 relative (a real change of a number moves it far more).

The steps run on the stories of the first twelve prompts (36 of the 180, every system) and
their judgments, so that the default suite, perplexity included, fits the test budget."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from demo_snapshot import FILES, normalised

_NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?|-?\d+[eE][-+]?\d+")
RELATIVE = 1e-5


def same_numbers(now: str, before: str) -> bool:
    """The texts are equal once every decimal number is compared to :data:`RELATIVE`."""
    if now == before:
        return True
    if _NUMBER.sub("#", now) != _NUMBER.sub("#", before):
        return False
    for a, b in zip(_NUMBER.findall(now), _NUMBER.findall(before), strict=True):
        x, y = float(a), float(b)
        if abs(x - y) > RELATIVE * max(abs(x), abs(y), 1e-3):
            return False
    return True


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
def test_the_demo_outputs_keep_their_numbers(
    tmp_path: Path, run_cli: Any, examples_dir: Path
) -> None:
    out = tmp_path
    run_demo(run_cli, examples_dir, out)
    changed = []
    for name in FILES:
        now, before = normalised(out / name), (STORED / name).read_text(encoding="utf-8")
        if not same_numbers(now, before):
            diff = difflib.unified_diff(before.splitlines(), now.splitlines(), lineterm="", n=0)
            changed.append(f"{name}:\n" + "\n".join(list(diff)[:8]))
    assert not changed, "demo outputs moved:\n" + "\n\n".join(changed)


def test_same_numbers_tolerates_float32_kernels_only() -> None:
    assert same_numbers("a,0.5028587941506161\n", "a,0.5028587941506161\n")
    assert same_numbers("a,0.5028587941506161\n", "a,0.502858796\n")
    assert not same_numbers("a,0.5028587941506161\n", "a,0.5029587941506161\n")
    assert not same_numbers("a,0.5\n", "b,0.5\n")
    assert not same_numbers("a,0.5,1.0\n", "a,0.5\n")
