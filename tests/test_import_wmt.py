"""WMT metrics-task files in their release layouts: segment-level direct assessment (DAseg:
four line-aligned files per language pair) and relative rankings (RR/DArr seglevel CSVs), and
NUBIA's aggregator trained on the imported DA as Kane et al. (2020) train it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from storyeval.base.errors import DataFileError
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
        "--ablation", str(tmp_path / "ablation.csv"), "--ablation-by", "language_pair",
    )  # fmt: skip
    assert code == 0, stdout + err
    assert "held-out (5-fold by story, 10 stories, da)" in stdout  # one translation a source
    saved = json.loads((tmp_path / "nubia" / "nubia.json").read_text())
    assert saved["target_range"] == [-1.1, 0.81]
    # Kane et al. (2020), Table 5: every subset of the feature groups, overall, per language
    # pair and their mean; all three groups are the model's own six features and folds
    import pandas as pd

    ablation = pd.read_csv(tmp_path / "ablation.csv")
    subsets = ["SI", "LI", "LI+SI", "SS", "SS+LI", "SS+SI", "SS+LI+SI"]
    assert list(dict.fromkeys(ablation["subset"])) == subsets
    assert set(ablation["group"]) == {"all", "de-en", "AVG"}
    full = ablation[(ablation["subset"] == "SS+LI+SI") & (ablation["group"] == "all")].iloc[0]
    assert full["pearson"] == pytest.approx(saved["report"]["heldout_pearson"])
    assert ablation.loc[ablation["subset"] == "SS", "features"].iloc[0] == "similarity"


FLICKR_CAPTIONS = {
    "a.jpg": ["A dog runs on the grass .", "A brown dog runs outside .", "A dog is running ."],
    "b.jpg": ["Two children play in the sand .", "Kids build a sandcastle .", "Two kids play ."],
    "c.jpg": ["A man rides a bike .", "A cyclist on a road .", "A man on a bicycle ."],
}
FLICKR_JUDGED = [
    ("a.jpg", "a.jpg#1", (4, 4, 4)), ("a.jpg", "b.jpg#0", (1, 1, 1)), ("a.jpg", "c.jpg#2", (1, 2, 1)),
    ("b.jpg", "b.jpg#2", (4, 3, 4)), ("b.jpg", "a.jpg#2", (1, 1, 2)), ("b.jpg", "c.jpg#0", (1, 1, 1)),
    ("c.jpg", "c.jpg#2", (4, 4, 3)), ("c.jpg", "a.jpg#0", (1, 2, 1)), ("c.jpg", "b.jpg#1", (1, 1, 1)),
]  # fmt: skip


def test_flickr8k_expert_judgments_and_kendall_tau_of_table_1(tmp_path: Path, run_cli: Any) -> None:
    """Kane et al. (2020), Table 1: Kendall's tau of a metric with the mean of Flickr 8K's
    three experts, the candidate caption left out of its image's references."""
    from scipy.stats import kendalltau

    from storyeval.corpus import read_scores

    (tmp_path / "Flickr8k.token.txt").write_text(
        "".join(
            f"{image}#{n}\t{text}\n"
            for image, texts in FLICKR_CAPTIONS.items()
            for n, text in enumerate(texts)
        )
    )
    (tmp_path / "ExpertAnnotations.txt").write_text(
        "".join(f"{i}\t{c}\t{a}\t{b}\t{d}\n" for i, c, (a, b, d) in FLICKR_JUDGED)
    )
    code, out, err = run_cli(
        "import", "flickr8k", str(tmp_path / "ExpertAnnotations.txt"), "--out-dir", str(tmp_path / "f")
    )  # fmt: skip
    assert code == 0, out + err
    stories = [json.loads(line) for line in (tmp_path / "f" / "stories.jsonl").open()]
    assert len(stories) == 9 and stories[0]["story"] == "A brown dog runs outside ."
    assert stories[0]["reference"] == ["A dog runs on the grass .", "A dog is running ."]
    code, out, err = run_cli(
        "score", str(tmp_path / "f" / "stories.jsonl"), "-m", "bleu1", "-o", str(tmp_path / "s.jsonl")
    )  # fmt: skip
    assert code == 0, out + err
    code, out, err = run_cli(
        "correlate", "--scores", str(tmp_path / "s.jsonl"), "--judgments",
        str(tmp_path / "f" / "judgments.jsonl"), "--level", "pooled", "-m", "kendall",
        "--n-boot", "0", "-o", str(tmp_path / "c.csv"),
    )  # fmt: skip
    assert code == 0, out + err
    import pandas as pd

    table = pd.read_csv(tmp_path / "c.csv")
    scores = {s.item_id: s.value for s in read_scores(tmp_path / "s.jsonl")}
    means = [sum(v) / 3 for _, _, v in FLICKR_JUDGED]
    ids = [f"{i}|{c}" for i, c, _ in FLICKR_JUDGED]
    expected = kendalltau([scores[i] for i in ids], means).statistic
    assert table["estimate"].iloc[0] == pytest.approx(expected)
    bad = tmp_path / "bad" / "ExpertAnnotations.txt"
    bad.parent.mkdir()
    (bad.parent / "Flickr8k.token.txt").write_text("a.jpg#0\tA dog .\n")
    bad.write_text("a.jpg\ta.jpg#0\t4\t4\na.jpg\tz.jpg#0\t1\t1\t1\n")
    with pytest.raises(DataFileError) as info:
        import_file("flickr8k", bad)
    text = [str(p) for p in info.value.problems]
    assert text[0].startswith(f"{bad}:1: expected IMAGE, CAPTION_ID and three scores")
    assert text[1].startswith(f"{bad}:2: caption 'z.jpg#0' is not in Flickr8k.token.txt")
