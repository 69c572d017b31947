"""WMT metrics-task files in their release layouts: segment-level direct assessment (DAseg:
four line-aligned files per language pair) and relative rankings (RR/DArr seglevel CSVs), and
NUBIA's aggregator trained on the imported DA as Kane et al. (2020) train it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.errors import DataFileError
from storyeval.importers import import_file

SOURCES = [
    "Der Hund lief nach Hause.",
    "Sie öffnete die Tür.",
    "Es regnete den ganzen Tag.",
    "Er fand den Schlüssel.",
    "Das Boot sank langsam.",
    "Wir aßen zusammen.",
    "Die Katze schlief.",
    "Der Zug war spät.",
    "Sie lachte laut.",
    "Das Feuer brannte.",
]
REFERENCES = [
    "The dog ran home.",
    "She opened the door.",
    "It rained all day.",
    "He found the key.",
    "The boat sank slowly.",
    "We ate together.",
    "The cat slept.",
    "The train was late.",
    "She laughed loudly.",
    "The fire burned.",
]
OUTPUTS = [
    "The dog ran home.",
    "She opened a door.",
    "It was raining the whole day.",
    "He found key the.",
    "Boat slowly the sank.",
    "We ate together.",
    "The cat was sleeping.",
    "Train late was.",
    "She laughed loud.",
    "Fire the the burned.",
]
SCORES = ["0.81", "0.55", "0.42", "-0.63", "-0.92", "0.77", "0.38", "-1.10", "0.12", "-0.85"]


def _daseg(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for part, lines in (
        ("source", SOURCES),
        ("reference", REFERENCES),
        ("mt-system", OUTPUTS),
        ("human", SCORES),
    ):
        (directory / f"DAseg.newstest2016.{part}.de-en").write_text("\n".join(lines) + "\n")
    return directory / "DAseg.newstest2016.human.de-en"


def test_wmt_da_reads_the_four_line_aligned_files(tmp_path: Path) -> None:
    human = _daseg(tmp_path / "DAseg-wmt-newstest2016")
    result = import_file("wmt-da", human)
    assert len(result.stories) == 10 and len(result.judgments) == 10
    story, judgment = result.stories[3], result.judgments[3]
    assert (story.id, story.prompt, story.story, story.reference) == (
        "de-en-00004",
        SOURCES[3],
        OUTPUTS[3],
        REFERENCES[3],
    )
    assert (judgment.item_id, judgment.criterion, judgment.value) == ("de-en-00004", "da", -0.63)
    (human.parent / "DAseg.newstest2016.reference.de-en").write_text("one line\n")
    with pytest.raises(DataFileError, match="10 scores for 1 reference lines"):
        import_file("wmt-da", human)
    with pytest.raises(DataFileError, match="give the human file"):
        import_file("wmt-da", human.parent / "DAseg.newstest2016.source.de-en")


def test_wmt_rr_reads_both_header_layouts_and_the_system_outputs(tmp_path: Path) -> None:
    rr = tmp_path / "RR-seglevel.csv"
    rr.write_text("SRCLANG,TRGLANG,SRCIndex,BETTER,WORSE\nde,en,1,sysA,sysB\nde,en,2,sysB,sysA\n")
    darr = tmp_path / "DArr-seglevel.csv"
    darr.write_text(
        "LP DATA SID BETTER WORSE\nde-en newstest2017 1 sysA sysB\nde-en newstest2017 2 sysB sysA\n"
    )
    outputs = tmp_path / "system-outputs" / "newstest2017" / "de-en"
    outputs.mkdir(parents=True)
    for system in ("sysA", "sysB"):
        (outputs / f"newstest2017.{system}.de-en").write_text(f"{system} one.\n{system} two.\n")
    (tmp_path / "src").write_text("\n".join(SOURCES[:2]) + "\n")
    for path in (rr, darr):
        result = import_file("wmt-rr", path)
        assert [c["winner"] for c in result.comparisons] == ["sysA", "sysB"]
        assert result.comparisons[0]["item_id"] == "de-en:1" and not result.stories
    result = import_file(
        "wmt-rr", darr, system_outputs=tmp_path / "system-outputs", prompts=tmp_path / "src"
    )
    by_id = {s.id: s for s in result.stories}
    assert by_id["de-en:2:sysB"].story == "sysB two." and by_id["de-en:2:sysB"].prompt == SOURCES[1]
    bad = tmp_path / "bad.csv"
    bad.write_text("LP,SID,WINNER\nde-en,1,sysA\n")
    with pytest.raises(DataFileError, match="header needs lp"):
        import_file("wmt-rr", bad)


def test_nubia_trains_on_imported_wmt_da(tmp_path: Path, run_cli: Any) -> None:
    human = _daseg(tmp_path / "da")
    code, stdout, err = run_cli("import", "wmt-da", str(human), "--out-dir", str(tmp_path / "wmt"))
    assert code == 0, stdout + err
    assert "wrote 10 stories" in stdout and "criteria: da" in stdout
    code, stdout, err = run_cli(
        "train", "nubia", "--stories", str(tmp_path / "wmt" / "stories.jsonl"),
        "--judgments", str(tmp_path / "wmt" / "judgments.jsonl"), "--criterion", "da",
        "-o", str(tmp_path / "nubia"), "--folds", "5",
    )  # fmt: skip
    assert code == 0, stdout + err
    assert "held-out (5-fold by story, 10 stories, da)" in stdout  # one translation a source
    saved = json.loads((tmp_path / "nubia" / "nubia.json").read_text())
    assert saved["target_range"] == [-1.1, 0.81]
