"""``benchmarks/public_targets.py`` end to end, on small files in the public releases' layouts
(UNION's ``Data/ROCStories`` with ids into the side files, DeltaScore's JSONL, human stories
for UNION's recipe), with ``--quick``: every command runs and the JSON holds every target."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _union_release(folder: Path, stories: list[Any]) -> None:
    """UNION's release layout (``Data/ROCStories/ant_data/`` with ``ant_data.txt``,
    ``ant_data_all.txt``, ``reference.txt``, ``reference_ipt.txt``, ``reference_opt.txt``,
    beside ``ini_data/``, ``metric_output/`` and ``train_data/``): contexts and endings of 40
    test stories; 24 of them annotated by seven people (ids point into the side files, as in
    the release), the human ones mostly judged reasonable."""
    ant = folder / "ant_data"
    ant.mkdir(parents=True)
    for other in ("ini_data", "metric_output", "train_data"):
        (folder / other).mkdir()
    (folder / "ini_data" / "train.txt").write_text("a story of the training set .\n")
    contexts = [f"context of unannotated story {n} ." for n in range(40)]
    endings = [f"ending of unannotated story {n} ." for n in range(40)]
    lines = []
    for number, story in enumerate(stories):
        story_id = 1 + number * 16 // 10  # spread over the 40 lines
        contexts[story_id] = _one_line(story.prompt)
        endings[story_id] = _one_line(story.story)
        good = story.system == "human"
        labels = [int(good) if k < 5 else int(not good) for k in range(7)]
        labels[number % 7] = 1 - labels[number % 7]  # some disagreement
        lines.append(f"{story_id} ||| {_one_line(story.story)} ||| {' '.join(map(str, labels))}")
    (ant / "reference_ipt.txt").write_text("\n".join(contexts) + "\n")
    (ant / "reference_opt.txt").write_text("\n".join(endings) + "\n")
    whole = [f"{c} {e}" for c, e in zip(contexts, endings, strict=True)]
    (ant / "reference.txt").write_text("\n".join(whole) + "\n")
    (ant / "ant_data.txt").write_text("\n".join(lines) + "\n")
    typed = [
        f"{line} ||| {' '.join('0' if x == '1' else '2' for x in line.split()[-7:])}"
        for line in lines
    ]
    (ant / "ant_data_all.txt").write_text("\n".join(typed) + "\n")


def _deltascore(path: Path, stories: list[Any]) -> None:
    """DeltaScore-style records: title, story, model, reference and two aspects (one as
    strings, as in the release)."""
    with open(path, "w", encoding="utf-8") as handle:
        for number, story in enumerate(stories):
            good = story.system == "human"
            record = {
                "title": story.prompt,
                "story": story.story,
                "model": story.system,
                "reference": story.references[0] if story.references else story.story,
                "coherence": (4.0 if good else 2.0) + (number % 3) / 3,
                "fluency": f"{(3.67 if good else 3.0) + (number % 2) / 3:.2f}",
            }
            handle.write(json.dumps(record) + "\n")


def test_every_public_target_is_measured_and_reported(tmp_path: Path, examples_dir: Path) -> None:
    from storyeval.corpus import read_stories, write_stories

    every = read_stories(examples_dir / "stories.jsonl")
    chosen = [s for s in every if s.system == "human"][:12]
    chosen += [s for s in every if s.system != "human"][:12]
    release = tmp_path / "UNION"  # the repository's root: Data/ROCStories, Data/WritingPrompts
    _union_release(release / "Data" / "ROCStories", chosen)
    (release / "Data" / "WritingPrompts" / "ant_data").mkdir(parents=True)
    for part in ("inhouse", "crowdsource"):  # DeltaScore's four files: two named roc.jsonl
        (tmp_path / part).mkdir()
        _deltascore(tmp_path / part / "roc.jsonl", chosen[:6] + chosen[12:18])
    human = read_stories(examples_dir / "human.jsonl")
    write_stories(tmp_path / "train.jsonl", human[:40])
    write_stories(tmp_path / "heldout.jsonl", human[40:52])
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "public_targets.py"),
         "--union-release", str(release / "Data" / "ROCStories"),
         "--deltascore", str(tmp_path / "inhouse" / "roc.jsonl"),
         "--deltascore", str(tmp_path / "crowdsource" / "roc.jsonl"),
         "--human-train", str(tmp_path / "train.jsonl"),
         "--human-heldout", str(tmp_path / "heldout.jsonl"),
         "-o", str(out), "--quick", "--in-process"],
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "targets.json").read_text())
    union = report["union_rated"]
    kendall = union["targets"]["kendall"]
    assert -1 <= kendall["value"] <= 1 and kendall["met"] == (kendall["value"] >= 0.34)
    assert union["found"]["best_metric"] in {"distinct2", "repeated_ngram_rate", "sentence_length"}
    above = union["found"]["above_every_metric"]
    assert above == (kendall["value"] > abs(union["found"]["best_metric_kendall"]))
    assert union["found"]["williams"]["compared"] == 3  # the model against each metric
    assert 0 < union["targets"]["minutes_per_fold"]["value"] < 30
    assert set(report["deltascore"]) == {  # --quick: one aspect; each file keyed apart
        "inhouse/roc.jsonl:coherence",
        "crowdsource/roc.jsonl:coherence",
    }
    recipe = report["union_recipe"]
    assert set(recipe["techniques"]) == {"repetition", "substitution", "reordering", "negation"}
    for found in recipe["techniques"].values():
        assert 0 <= found["value"] <= 1 and found["met"] == (found["value"] >= 0.75)
    assert -1 <= recipe["kendall_with_people"]["value"] <= 1
    names = [c["name"] for c in report["commands"]]
    assert names[:5] == [
        "union-import",
        "union-train",
        "union-score",
        "union-correlate",
        "union-compare",
    ]
    assert all((out / "logs" / f"{name}.log").is_file() for name in names)
