"""What a new user meets in the first hour: judge-eval on data whose criteria have other
names, levels that cannot be computed said plainly, did-you-mean for unknown names, and
grouped warnings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval.base.errors import DegenerateInputWarning, StoryevalError
from storyeval.corpus import Judgment, Story


def _union_like(n: int = 12) -> tuple[list[Judgment], list[Judgment], list[Story]]:
    """A judge's coherence and people's 0/1 'reasonable' labels, one story per prompt (as in
    UNION's release); the judge agrees with people on most stories."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, n)
    judge, people, stories = [], [], []
    for i, label in enumerate(labels):
        item = f"u{i}"
        stories.append(Story(item, f"prompt {i}", "A story.", extra={"prompt_id": f"p{i}"}))
        judge.append(Judgment(item, "judge|x", "coherence", float(1 + 3 * label + (i % 2))))
        for rater in ("a", "b"):
            flipped = label if (i + ord(rater)) % 5 else 1 - label
            people.append(Judgment(item, rater, "reasonable", float(flipped)))
    return judge, people, stories


def test_judge_eval_maps_a_judge_criterion_to_the_peoples_name() -> None:
    from storyeval.judge.evaluate import evaluate_judge

    judge, people, stories = _union_like()
    with pytest.raises(StoryevalError, match="share no criterion"):
        evaluate_judge(judge, people, stories=stories, n_boot=20)
    result = evaluate_judge(
        judge, people, stories=stories, criteria={"coherence": "reasonable"}, n_boot=20
    )
    pooled = result.correlations.query("level == 'pooled'")
    assert set(pooled["criterion"]) == {"reasonable"} and (pooled["estimate"] > 0.3).all()
    assert "the judge's coherence is compared with the people's reasonable" in result.notes
    # every prompt has one story: no story-level number, and the system level names why
    assert result.correlations.query("level == 'story'")["estimate"].isna().all()
    assert any("story file's records have no system field" in n for n in result.notes)
    modelled = evaluate_judge(
        judge,
        people,
        stories=stories,
        criteria={"coherence": "reasonable"},
        n_boot=20,
        aggregate="mace",
    )  # people's labels through a competence model rather than their mean
    estimates = modelled.correlations.query("level == 'pooled'")["estimate"]
    assert estimates.notna().all() and (estimates > 0.3).all()
    with pytest.raises(StoryevalError, match="the judge rated no 'fluency'"):
        evaluate_judge(judge, people, criteria={"fluency": "reasonable"}, n_boot=20)
    with pytest.raises(StoryevalError, match="the people rated no 'overall'"):
        evaluate_judge(judge, people, criteria={"coherence": "overall"}, n_boot=20)


def test_a_story_level_correlation_needs_three_stories() -> None:
    from storyeval.meta.correlation import level_correlation

    x = np.array([1.0, 2.0, 5.0, 3.0])
    y = np.array([1.0, 3.0, 2.0, 2.0])
    prompts = np.array(["p1", "p1", "p2", "p3"], dtype=object)  # only p1 has two stories
    with pytest.warns(DegenerateInputWarning, match="2 complete pair\\(s\\) in 1 prompt"):
        result = level_correlation(x, y, level="story", prompts=prompts, n_boot=0)
    assert np.isnan(result["estimate"])
    prompts = np.array(["p1", "p1", "p1", "p2"], dtype=object)
    result = level_correlation(x, y, level="story", prompts=prompts, n_boot=0)
    assert np.isfinite(result["estimate"])


def test_cli_criteria_option_and_its_errors(tmp_path: Path, run_cli: Any) -> None:
    judge, people, stories = _union_like()
    files = {}
    for name, records in (("judge", judge), ("people", people), ("stories", stories)):
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text("".join(json.dumps(r.to_dict()) + "\n" for r in records))
    base = ["judge-eval", "--judge", str(files["judge"]), "--humans", str(files["people"])]
    base += ["--stories", str(files["stories"]), "-o", str(tmp_path / "eval"), "--bootstrap", "20"]
    code, out, err = run_cli(*base, "--criteria", "coherence=reasonable")
    assert code == 0, err
    assert "reasonable" in (tmp_path / "eval" / "headline.csv").read_text()
    assert "no system field" in out
    code, _, err = run_cli(*base, "--criteria", "coherence")
    assert code == 2 and "JUDGE=PEOPLE" in err


def test_unknown_names_get_a_suggestion(run_cli: Any, examples_dir: Path, tmp_path: Path) -> None:
    code, _, err = run_cli(
        "score",
        str(examples_dir / "human.jsonl"),
        "--metrics",
        "rouge_l",
        "-o",
        str(tmp_path / "s.jsonl"),
    )
    assert code == 2 and "unknown metric 'rouge_l' (did you mean rougeL?)" in err


def test_validate_counts_records_in_words(run_cli: Any, examples_dir: Path) -> None:
    code, out, _ = run_cli("validate", str(examples_dir / "judgments.jsonl"))
    assert code == 0 and out.strip().endswith("2160 judgments, valid")
