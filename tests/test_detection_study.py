"""Clark (2021), chapter 6 beyond one study: Bonferroni in Table 6.1, training arms compared
(Table 6.2: t tests against no training, Tukey's HSD, Cohen's d) checked against scipy, and
explanations coded with the Table C.1 codebook (agreement, Table 6.3 shares), through the CLI."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import ttest_1samp, ttest_ind, tukey_hsd
from sklearn.metrics import cohen_kappa_score
from typer.testing import CliRunner

from storyeval.base.errors import DataFileError
from storyeval.cli import app
from storyeval.corpus import Judgment
from storyeval.human.coding import coding_agreement, label_shares, read_codings
from storyeval.human.detection_arms import compare_training_arms
from storyeval.human.protocols.detection import detection_metrics
from storyeval.human.tables import judgments_table

ARMS = {"none": 0.50, "instructions": 0.55, "examples": 0.70, "comparison": 0.60}


def _arm_judgments(seed: int = 5) -> list[Judgment]:
    rng = np.random.default_rng(seed)
    judgments = []
    for arm, skill in ARMS.items():
        for rater in range(12):
            for item in range(6):
                truth = "human" if item % 2 else "machine"
                right = rng.random() < skill
                says_machine = (truth == "machine") == right
                value = float(rng.choice([3, 4]) if says_machine else rng.choice([1, 2]))
                judgments.append(
                    Judgment(
                        f"{arm}-i{item}",
                        f"{arm}-r{rater}",
                        "source",
                        value,
                        study=arm,
                        condition="human" if truth == "human" else "gpt3",
                        extra={"protocol": "detection", "truth": truth},
                    )
                )
    return judgments


def _rater_accuracy(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    frame = frame.assign(correct=(frame["value"] >= 3) == (frame["truth"] == "machine"))
    return {
        arm: part.groupby("rater_id")["correct"].mean().to_numpy(float)
        for arm, part in frame.groupby("study", sort=False)
    }


def test_table_6_1_has_bonferroni_corrected_p_values():
    frame = judgments_table(_arm_judgments())
    table = detection_metrics(frame[frame["study"] == "examples"], tests=15)
    accuracy = _rater_accuracy(frame[frame["study"] == "examples"])["examples"]
    p = ttest_1samp(accuracy, 0.5).pvalue
    row = table.iloc[0]
    assert row["p_value"] == pytest.approx(p)
    assert row["p_bonferroni"] == pytest.approx(min(1.0, 15 * p))


def test_training_arms_are_compared_as_in_table_6_2():
    frame = judgments_table(_arm_judgments())
    table = compare_training_arms(frame, baseline="none").set_index("arm")
    samples = _rater_accuracy(frame)
    assert list(table.index) == ["none", "instructions", "examples", "comparison"]
    base = samples["none"]
    tukey = tukey_hsd(*samples.values())
    for index, arm in enumerate(samples):
        if arm == "none":
            assert math.isnan(table.loc[arm, "p_value"])
            continue
        expected = ttest_ind(samples[arm], base)
        assert table.loc[arm, "statistic"] == pytest.approx(expected.statistic)
        assert table.loc[arm, "p_value"] == pytest.approx(expected.pvalue)
        assert table.loc[arm, "p_bonferroni"] == pytest.approx(min(1.0, 3 * expected.pvalue))
        assert table.loc[arm, "tukey_p"] == pytest.approx(tukey.pvalue[index, 0])
        mine = samples[arm]
        pooled = math.sqrt(
            ((len(mine) - 1) * mine.var(ddof=1) + (len(base) - 1) * base.var(ddof=1))
            / (len(mine) + len(base) - 2)
        )
        assert table.loc[arm, "cohen_d"] == pytest.approx((mine.mean() - base.mean()) / pooled)
    assert table.loc["examples", "rater_accuracy"] > table.loc["none", "rater_accuracy"]
    with pytest.raises(ValueError, match="baseline 'nothing' is not an arm"):
        compare_training_arms(frame, baseline="nothing")


def test_detection_arms_command(tmp_path: Path):
    files = []
    for arm in ARMS:
        path = tmp_path / f"{arm}.jsonl"
        path.write_text(
            "".join(json.dumps(j.to_dict()) + "\n" for j in _arm_judgments() if j.study == arm)
        )
        files.append(str(path))
    result = CliRunner().invoke(
        app,
        ["study", "detection-arms", *files, "--baseline", "none", "-o", str(tmp_path / "t.csv")],
    )
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "t.csv")
    assert table["arm"].tolist() == list(ARMS) and "tukey_p" in table


def _responses(tmp_path: Path) -> list[str]:
    paths = []
    for arm in ("none", "examples"):
        path = tmp_path / f"{arm}-responses.jsonl"
        records = [
            {
                "rater_id": f"p{r:05d}",
                "study": arm,
                "scope": "item",
                "item_id": f"i{k}",
                "question": "explanation",
                "text": f"{arm} rater {r} reason {k}",
            }
            for r in range(8)
            for k in range(3)
        ]
        path.write_text("".join(json.dumps(x) + "\n" for x in records))
        paths.append(str(path))
    return paths


LABELS_A = ["Grammar", "Repetition;Coherence", "Factuality", "Writer intent and expression"]
LABELS_B = ["Grammar", "Repetition", "Factuality;Genre", "Null/Vague"]


def _fill(sheet: Path, coder: str, labels: list[str], out: Path) -> None:
    rows = list(csv.DictReader(sheet.open()))
    for index, row in enumerate(rows):
        row["coder"] = coder
        row["labels"] = labels[index % len(labels)]
    with out.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_explanations_are_sampled_coded_and_tabulated(tmp_path: Path):
    runner = CliRunner()
    sheet = tmp_path / "sheet.csv"
    made = runner.invoke(
        app,
        ["study", "code-sheet", *_responses(tmp_path), "--per-study", "5", "-o", str(sheet)],
    )
    assert made.exit_code == 0, made.output
    rows = pd.read_csv(sheet)
    assert rows.groupby("study").size().to_dict() == {"examples": 5, "none": 5}
    assert rows.groupby("study")["rater_id"].nunique().to_dict() == {"examples": 5, "none": 5}
    _fill(sheet, "ann", LABELS_A, tmp_path / "ann.csv")
    _fill(sheet, "ben", LABELS_B, tmp_path / "ben.csv")
    coded = runner.invoke(
        app,
        [
            "study",
            "coding",
            str(tmp_path / "ann.csv"),
            str(tmp_path / "ben.csv"),
            "-o",
            str(tmp_path / "coding"),
        ],
    )
    assert coded.exit_code == 0, coded.output
    codings = read_codings([tmp_path / "ann.csv", tmp_path / "ben.csv"])
    agreement = coding_agreement(codings).set_index("label")
    wide = {
        coder: [("Factuality" in ls) for ls in part.sort_values("comment_id")["labels"]]
        for coder, part in codings.groupby("coder")
    }
    assert agreement.loc["Factuality", "cohen_kappa"] == pytest.approx(
        cohen_kappa_score(wide["ann"], wide["ben"])
    )
    assert agreement.loc["Grammar", "agreement"] == 1.0
    shares = label_shares(codings)
    for study, part in codings.groupby("study"):
        given = [label for labels in part["labels"] for label in labels]
        counted = [g for g in given if g not in ("Null/Vague", "Miscellaneous")]
        form = sum(g in ("Grammar", "Level of detail", "Genre") for g in counted)
        row = shares[
            (shares["study"] == study)
            & (shares["level"] == "category")
            & (shares["name"] == "Form")
        ]
        assert row["share"].iloc[0] == pytest.approx(100 * form / len(counted))
    assert (tmp_path / "coding" / "shares.csv").exists()


def test_bad_coding_sheets_name_file_and_line(tmp_path: Path):
    path = tmp_path / "bad.csv"
    path.write_text(
        "comment_id,study,coder,labels\n"
        "c1,none,ann,Grammar\n"
        "c2,none,ann,Spelling\n"
        "c3,none,ann,\n"
        "c1,none,ann,Genre\n"
    )
    with pytest.raises(DataFileError) as info:
        read_codings([path])
    text = [str(p) for p in info.value.problems]
    assert text[0].startswith(f"{path}:3: comment c2: unknown label(s) ['Spelling']")
    assert text[1].startswith(f"{path}:4: comment c3: no label")
    assert text[2].startswith(f"{path}:5: comment c1 coded twice by ann")
