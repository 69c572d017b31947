"""Judges weighted by people: weights fitted to people's ratings (checklists, juries), the
negative and Torrance rubrics, on simulated studies whose answer is known and with the real
offline judge end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from storyeval.corpus import Judgment, Story, read_judgments, read_stories
from storyeval.judge import load_rubric
from storyeval.judge.jury import JuryError, fit_checklist, fit_jury, short_judge_names
from storyeval.judge.prompts import pairwise_request, rubric_text
from storyeval.meta.weights import WeightFitError, fit_weights

N = 120


def _truth(seed: int = 1) -> tuple[np.ndarray, list[str], dict[str, str]]:
    rng = np.random.default_rng(seed)
    items = [f"s{i:03d}" for i in range(N)]
    return rng.normal(size=N), items, {item: f"p{i // 3}" for i, item in enumerate(items)}


def _people(truth: np.ndarray, items: list[str], seed: int = 2) -> list[Judgment]:
    rng = np.random.default_rng(seed)
    return [
        Judgment(
            item, f"r{r}", "overall", float(np.clip(np.round(3 + t + rng.normal(0, 0.7)), 1, 5))
        )
        for item, t in zip(items, truth, strict=True)
        for r in range(3)
    ]


def _judge(
    rater: str, values: dict[str, np.ndarray], items: list[str], prompts: dict[str, str]
) -> list[Judgment]:
    return [
        Judgment(item, rater, criterion, float(v[i]), extra={"prompt_id": prompts[item]})
        for i, item in enumerate(items)
        for criterion, v in values.items()
    ]


def _checklist_judgments(seed: int = 3) -> tuple[list[Judgment], list[Judgment]]:
    truth, items, prompts = _truth()
    rng = np.random.default_rng(seed)
    items_values = {
        "strong": 1 / (1 + np.exp(-(2 * truth + rng.normal(size=N)))),
        "weak": 1 / (1 + np.exp(-(0.5 * truth + rng.normal(size=N)))),
        "noise": rng.uniform(size=N),
        "flaw": 1 / (1 + np.exp(1.5 * truth + rng.normal(size=N))),
    }
    rater = "judge|model:SmolLM2@abc|rubric:ttcw@1|version:0.4.0"
    return _judge(rater, items_values, items, prompts), _people(truth, items)


def test_checklist_weights_are_recovered_and_beat_equal_weights() -> None:
    judged, people = _checklist_judgments()
    fitted = fit_checklist(judged, people, negative=["flaw"], n_boot=200)
    weights = fitted.weights().set_index("feature")
    assert weights.loc["strong", "ci_low"] > 0 and weights.loc["flaw", "ci_high"] < 0
    assert weights.loc["noise", "ci_low"] < 0 < weights.loc["noise", "ci_high"]
    assert abs(weights.loc["strong", "standardized_weight"]) > abs(
        weights.loc["weak", "standardized_weight"]
    )
    kendall = fitted.evaluation().query("statistic == 'kendall'").set_index("predictor")
    assert (
        kendall.loc["fitted (cross-fitted)", "estimate"] > kendall.loc["equal weights", "estimate"]
    )
    assert kendall.loc["fitted (cross-fitted)", "estimate"] > 0.4
    assert len(fitted.judgments) == N and fitted.judgments[0].criterion == "overall_fitted"
    assert "judge:SmolLM2@abc" in fitted.judgments[0].rater_id


def test_fitted_scores_of_rated_stories_are_out_of_fold() -> None:
    """A story's fitted score never saw its own people's rating (nor its prompt's)."""
    judged, people = _checklist_judgments()
    before = fit_checklist(judged, people, n_boot=0).fits["overall"].predictions
    changed = [
        Judgment(
            j.item_id, j.rater_id, j.criterion, 5.0 if j.item_id in ("s000", "s001") else j.value
        )
        for j in people
    ]
    after = fit_checklist(judged, changed, n_boot=0).fits["overall"].predictions
    assert after["s000"] == before["s000"] and after["s002"] == before["s002"]  # prompt p0
    assert not np.allclose(
        after.drop(["s000", "s001", "s002"]), before.drop(["s000", "s001", "s002"])
    )


def test_a_jury_weighs_the_judge_that_agrees_with_people() -> None:
    truth, items, prompts = _truth()
    rng = np.random.default_rng(5)
    judged: list[Judgment] = []
    for name, values in (
        ("close", truth + rng.normal(0, 0.3, N)),
        ("loose", truth + rng.normal(0, 1.5, N)),
        ("random", rng.normal(size=N)),
    ):
        judged += _judge(f"judge|model:{name}@1|version:0.4.0", {"overall": values}, items, prompts)
    fitted = fit_jury(judged, _people(truth, items), n_boot=200)
    weights = fitted.weights().set_index("feature")
    assert (weights["weight"] >= 0).all()
    standardized = weights["standardized_weight"]
    assert standardized["close@1"] > 4 * max(standardized["loose@1"], standardized["random@1"])
    kendall = fitted.evaluation().query("statistic == 'kendall'").set_index("predictor")["estimate"]
    assert kendall["fitted (cross-fitted)"] > kendall["equal weights"] + 0.05
    assert kendall["fitted (cross-fitted)"] > kendall["close@1"] - 0.02
    spread = fitted.disagreement
    assert len(spread) == N and spread["spread_z"].is_monotonic_decreasing
    alpha = fitted.agreement.query("method == 'krippendorff_alpha_interval'")["estimate"].iloc[0]
    assert 0.0 < alpha < 0.9  # one judge answers at random
    assert all(j.rater_id.startswith("jury|") for j in fitted.judgments)


def test_bad_inputs_are_named() -> None:
    judged, people = _checklist_judgments()
    with pytest.raises(JuryError, match="at least two judges"):
        fit_jury(judged, people)
    with pytest.raises(JuryError, match="people rated no criterion 'style'"):
        fit_checklist(judged, people, target="style")
    with pytest.raises(WeightFitError, match="only 6 item"):
        fit_checklist(judged, people[:18], n_boot=0)
    two = judged + [Judgment(j.item_id, "other", j.criterion, j.value) for j in judged]
    with pytest.raises(JuryError, match="holds 2"):
        fit_checklist(two, people)
    with pytest.raises(JuryError, match="share no name"):
        fit_jury(two, [Judgment("s000", "r", "style", 3.0)])
    with pytest.raises(WeightFitError, match="folds >= 2"):
        fit_weights(pd.DataFrame({"a": [1.0]}), pd.Series([1.0]), folds=1)


def test_short_names_are_unique() -> None:
    names = short_judge_names(["judge|model:a@1|x:1", "judge|model:a@1|x:2", "person-1"])
    assert list(names) == ["a@1", "a@1#2", "person-1"]


def test_negative_and_torrance_rubrics() -> None:
    negative, ttcw = load_rubric("negative"), load_rubric("ttcw")
    assert all(c.negative for c in negative.criteria) and len(negative.criteria) == 8
    assert {"purple_prose", "unearned_transformations", "incongruent_positive_ending"} <= {
        c.name for c in negative.criteria
    }
    assert len(ttcw.criteria) == 14 and ttcw.kind == "checklist"
    dimensions = pd.Series([c.name.split("_")[0] for c in ttcw.criteria]).value_counts()
    assert dimensions.to_dict() == {
        "fluency": 5,
        "flexibility": 3,
        "originality": 3,
        "elaboration": 3,
    }
    assert "a flaw: a higher score means more of it" in rubric_text(negative)
    first, second = Story("a", "P", "One."), Story("b", "P", "Two.")
    asked = pairwise_request(first, second, negative, negative.criteria[0]).messages[1]["content"]
    assert "shows less of the flaw purple_prose" in asked


def test_negative_false_keeps_a_rubrics_identity(tmp_path: Path) -> None:
    text = "name: t\ncriteria:\n  - {name: a, question: q, scale: [{value: 1, description: d}, {value: 2, description: e}]}\n"
    plain, explicit, flaw = (tmp_path / f"{n}.yaml" for n in ("plain", "explicit", "flaw"))
    plain.write_text(text)
    explicit.write_text(text.replace("question: q", "negative: false, question: q"))
    flaw.write_text(text.replace("question: q", "negative: true, question: q"))
    assert load_rubric(plain).identity == load_rubric(explicit).identity
    assert load_rubric(flaw).identity != load_rubric(plain).identity


CHECKS = """\
name: three
kind: checklist
criteria:
  - {name: coherent, question: "Do the events of the story follow from each other?"}
  - {name: fluent, question: "Is every sentence fluent and grammatical?"}
  - {name: ending, question: "Does the story have an ending?"}
"""


def test_the_offline_judge_fits_weights_and_the_jury_command(
    tmp_path: Path, run_cli: Any, examples_dir: Path, tiny_models: dict[str, Path]
) -> None:
    """The transformers judge's checklist, weights fitted to people and a jury of its answers:
    the commands' plumbing, on the two-layer model of SmolLM2's architecture."""
    wanted = {"s001", "s002", "s003", "s004", "s005"}
    stories = [
        s
        for s in read_stories(examples_dir / "stories.jsonl")
        if s.extra.get("prompt_id") in wanted
    ]
    story_file = tmp_path / "stories.jsonl"
    story_file.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in stories))
    (tmp_path / "three.yaml").write_text(CHECKS)
    people = tmp_path / "people.jsonl"
    ids = {s.id for s in stories}
    people.write_text(
        "".join(
            line + "\n"
            for line in (examples_dir / "judgments.jsonl").read_text().splitlines()
            if json.loads(line)["item_id"] in ids
        )
    )
    out = tmp_path / "judge.jsonl"
    code, stdout, err = run_cli(
        "judge", str(story_file), "-o", str(out), "--rubric", str(tmp_path / "three.yaml"),
        "--no-cache", "--fit-weights", str(people), "--fit-target", "coherence",
        "--model", str(tiny_models["lm"]),
    )  # fmt: skip
    assert code == 0, err
    fitted = read_judgments(tmp_path / "judge.fitted.jsonl")
    assert len(fitted) == len(stories) and {j.criterion for j in fitted} == {"coherence_fitted"}
    weights = pd.read_csv(tmp_path / "judge.fitted.weights.csv")
    assert list(weights["feature"]) == ["coherent", "ending", "fluent"]
    assert "against people" in stdout and "signature: weights|" in stdout
    code, stdout, err = run_cli(
        "judge-eval", "--judge", str(tmp_path / "judge.fitted.jsonl"), "--humans", str(people),
        "--criteria", "coherence_fitted=coherence", "-o", str(tmp_path / "eval"), "--bootstrap", "50",
    )  # fmt: skip
    assert code == 0, err
    # a jury of the judge's three answers, as if three judges had rated coherence
    jury_files = []
    for k, criterion in enumerate(("coherent", "fluent", "ending")):
        path = tmp_path / f"judge{k}.jsonl"
        path.write_text(
            "".join(
                json.dumps(
                    {**r, "rater_id": f"judge|model:m{k}|version:0", "criterion": "coherence"}
                )
                + "\n"
                for r in map(json.loads, out.read_text().splitlines())
                if r["criterion"] == criterion
            )
        )
        jury_files.append(str(path))
    code, stdout, err = run_cli(
        "jury", *jury_files, "--people", str(people), "-o", str(tmp_path / "jury.jsonl"),
        "--stories", str(story_file), "--bootstrap", "50",
    )  # fmt: skip
    assert code == 0, err
    assert len(read_judgments(tmp_path / "jury.jsonl")) == len(stories)
    disagreement = pd.read_csv(tmp_path / "jury.disagreement.csv")
    assert set(disagreement["item_id"]) == ids and "agreement among the judges" in stdout
    code, _, err = run_cli(
        "jury", jury_files[0], "--people", str(people), "-o", str(tmp_path / "x.jsonl")
    )
    assert code == 2 and "at least two judges" in err
