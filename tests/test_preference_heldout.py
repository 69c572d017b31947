"""A reward model beside the metrics: the cross-validation's held-out predictions as a score
file (``DIR/heldout_scores.jsonl``) that ``storyeval correlate``, ``compare`` and ``report``
read like any metric's, and training on some systems' stories only (``--exclude-systems``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import kendalltau
from typer.testing import CliRunner

from storyeval.base.signature import Signature
from storyeval.corpus import Judgment, Story, read_judgments, read_scores, read_stories
from storyeval.learn.preference import (
    HELDOUT_FILE,
    HELDOUT_METRIC,
    CrossValidation,
    PreferenceConfig,
    PreferenceDataError,
    cross_validate,
    heldout_scores,
    preference_data,
    train_preference,
)
from storyeval.meta import build_meta_table, correlate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
CONFIG = PreferenceConfig(criterion="coherence")


@pytest.fixture(scope="module")
def examples() -> tuple[list[Story], list[Judgment]]:
    return read_stories(EXAMPLES / "stories.jsonl"), read_judgments(EXAMPLES / "judgments.jsonl")


def test_the_heldout_scores_are_the_cross_validations_predictions(
    examples: tuple[list[Story], list[Judgment]], tmp_path: Path, scoring_context: Any
) -> None:
    """Every judged story once, scored by the fold that held its prompt out; people's Kendall
    with the file is the table's, and ``correlate`` reads it beside any metric."""
    stories, judgments = examples
    data = preference_data(stories, judgments, config=CONFIG)
    model = train_preference(
        data, tmp_path / "m", config=CONFIG, folds=3, n_boot=20, scoring=scoring_context
    )
    scores = read_scores(tmp_path / "m" / HELDOUT_FILE)
    assert len(scores) == 180 and {s.metric for s in scores} == {f"{HELDOUT_METRIC}:m"}
    assert (
        scores[0].signature.startswith("preference_heldout|") and "|folds:3|" in scores[0].signature
    )
    fold_of = {s.item_id: s.extra["fold"] for s in scores}
    assert set(fold_of.values()) == {0, 1, 2}
    prompt_folds: dict[str, set[int]] = {}
    for story in stories:
        prompt_folds.setdefault(str(story.prompt), set()).add(fold_of[story.id])
    assert all(len(folds) == 1 for folds in prompt_folds.values())  # prompt-disjoint
    values = {s.item_id: s.value for s in scores}
    ordered = np.array([values[s.id] for s in data.stories])
    table = {(r["predictor"], r["statistic"]): r for r in model.summary["cross_validation"]}
    expected = table[("model", "kendall_tau_b")]["estimate"]
    assert kendalltau(ordered, data.targets).statistic == pytest.approx(expected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        meta = build_meta_table(scores, judgments, stories=stories)
        found = correlate(meta, levels=["pooled", "within_system"], methods=["kendall"], n_boot=0)
    row = found[(found.metric == f"{HELDOUT_METRIC}:m") & (found.criterion == "coherence")]
    by_level = dict(zip(row["level"], row["estimate"], strict=True))
    assert by_level["pooled"] == pytest.approx(expected)
    # the table's within-system row: the mean of the three systems' Kendall taus
    within = table[("model", "kendall_tau_b_within_system")]
    assert within["estimate"] == pytest.approx(by_level["within_system"])
    assert within["estimate"] < expected - 0.15  # it mostly tells human from generated
    assert ("length (log words)", "kendall_tau_b_within_system") in table
    # without cross-validation there are no held-out scores, and an old file goes
    train_preference(data, tmp_path / "m", config=CONFIG, folds=0, n_boot=0, overwrite=True)
    assert (tmp_path / "m" / "preference.json").is_file()
    train_preference(
        data,
        tmp_path / "m",
        config=PreferenceConfig(criterion="coherence", l2=0.1),
        folds=0,
        n_boot=0,
        overwrite=True,
    )
    assert not (tmp_path / "m" / HELDOUT_FILE).exists()


def test_perturbed_copies_are_left_out_of_the_heldout_scores() -> None:
    stories = [Story(f"s{k}", f"p{k % 3}", f"Story number {k}. It ends.") for k in range(6)]
    judgments = [Judgment(s.id, "r1", "coherence", float(k % 5 + 1)) for k, s in enumerate(stories)]
    data = preference_data(stories, judgments, config=CONFIG)
    copy = Story("s0~repetition", "p0", "Story number 0. Story number 0. It ends.")
    data.stories = [*data.stories, copy]
    data.targets = np.append(data.targets, np.nan)
    data.groups = [*data.groups, data.groups[0]]
    data.negatives = [(0, 6, "repetition")]
    result = CrossValidation(np.arange(7.0), None, 2, np.array([0, 1, 0, 1, 0, 1, 0]))
    scores = heldout_scores(data, result, Signature("preference", {"seed": 0}))
    assert [s.item_id for s in scores] == [f"s{k}" for k in range(6)]
    assert [s.extra["fold"] for s in scores] == [0, 1, 0, 1, 0, 1]
    assert scores[1].value == 1.0 and scores[0].signature.startswith(
        "preference_heldout|seed:0|folds:2"
    )


def test_some_systems_only(examples: tuple[list[Story], list[Judgment]]) -> None:
    """Leaving the human stories out drops their judgments and the comparisons that show them;
    a system to keep that has no story is refused."""
    stories, judgments = examples
    comparisons = [
        {"prompt_id": "s001", "system_a": "human", "system_b": "smollm2-p0.9", "winner": "human"},
        {
            "prompt_id": "s001",
            "system_a": "smollm2-k40-t0.7",
            "system_b": "smollm2-p0.9",
            "winner": "smollm2-p0.9",
        },
    ]
    config = PreferenceConfig(criterion="coherence", pairwise=True)
    data = preference_data(
        stories, judgments, comparisons, config=config, exclude_systems=["human"]
    )
    assert len(data.stories) == 120 and {s.system for s in data.stories} == {
        "smollm2-p0.9",
        "smollm2-k40-t0.7",
    }
    assert any(
        "60 stories left out by system (human), with 720 judgments and 1 comparisons" in n
        for n in data.notes
    )
    kept = preference_data(stories, judgments, config=CONFIG, systems=["smollm2-p0.9"])
    assert len(kept.stories) == 60 and np.isfinite(kept.targets).all()
    assert kept.data_hash() != data.data_hash()
    with pytest.raises(PreferenceDataError, match="no story of system"):
        preference_data(stories, judgments, config=CONFIG, systems=["gpt-9"])
    everything = preference_data(stories, judgments, config=CONFIG)
    assert len(everything.stories) == 180 and not any("left out" in n for n in everything.notes)


def test_the_command_trains_on_generated_stories_and_writes_heldout_scores(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """The command's plumbing, on the two-layer encoder's features."""
    from storyeval.cli import app

    out = tmp_path / "generated-only"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "preference",
            "--stories",
            str(EXAMPLES / "stories.jsonl"),
            "--judgments",
            str(EXAMPLES / "judgments.jsonl"),
            "--criterion",
            "coherence",
            "--exclude-systems",
            "human",
            "--model",
            str(tiny_models["encoder"]),
            "--folds",
            "2",
            "--bootstrap",
            "20",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "note: 60 stories left out by system (human)" in result.output
    assert "120 stories, 120 with a mean rating" in result.output
    assert f"held-out scores: {out / HELDOUT_FILE}" in result.output
    assert "kendall_tau_b_within_system" in result.output  # two systems left
    records = [json.loads(line) for line in (out / HELDOUT_FILE).read_text().splitlines()]
    assert len(records) == 120 and not any(r["item_id"] == "s001" for r in records)
    assert {r["metric"] for r in records} == {"preference_heldout:generated-only"}


def test_a_judge_says_which_stories_it_was_trained_on(
    examples: tuple[list[Story], list[Judgment]], tmp_path: Path, scoring_context: Any
) -> None:
    """Judging its own training stories, a reward model's agreement with people is in-sample:
    the run says so (by text, so the same story under another id counts); on new stories,
    or for a model that does not list its training texts, it says nothing."""
    from storyeval.judge import load_rubric
    from storyeval.judge.core import JudgeSettings, judge_stories
    from storyeval.learn.preference import TRAINING_TEXTS_FILE
    from storyeval.learn.preference.judge import RewardModelJudge

    stories, judgments = examples
    generated = [s for s in stories if s.system != "human"]
    data = preference_data(stories, judgments, config=CONFIG, exclude_systems=["human"])
    train_preference(
        data, tmp_path / "m", config=CONFIG, folds=0, n_boot=0, scoring=scoring_context
    )
    judge = RewardModelJudge(str(tmp_path / "m"))
    humans = read_stories(EXAMPLES / "human.jsonl")  # the human stories, not trained on
    renamed = [
        Story(f"x{k}", s.prompt, s.story, system=s.system) for k, s in enumerate(generated[:5])
    ]
    assert judge.training_overlap(generated) == 120
    assert judge.training_overlap(humans) == 0 and judge.training_overlap(renamed) == 5
    rubric = load_rubric("karpinska")
    run = judge_stories([*generated[:10], *humans[:10]], rubric, [judge], settings=JudgeSettings())
    notes = [n for n in run.notes if "was trained on" in n]
    assert len(notes) == 1 and "trained on 10 of these 20 stories" in notes[0]
    assert str(tmp_path / "m" / HELDOUT_FILE) in notes[0]
    fresh = judge_stories(humans[:10], rubric, [judge], settings=JudgeSettings())
    assert not any("was trained on" in n for n in fresh.notes)
    # judged in blocks (as the command does), one note counts every block's stories
    from storyeval.judge.core import judge_blocks

    mixed = [*generated[:10], *humans[:10]]
    blocks = judge_blocks(mixed, rubric, [judge], settings=JudgeSettings(), block_size=6)
    notes = [n for n in blocks.notes if "was trained on" in n]
    assert len(notes) == 1 and "trained on 10 of these 20 stories" in notes[0]
    (tmp_path / "m" / TRAINING_TEXTS_FILE).unlink()
    assert RewardModelJudge(str(tmp_path / "m")).training_overlap(generated) is None


def test_one_system_has_no_within_system_row(
    examples: tuple[list[Story], list[Judgment]],
) -> None:
    stories, judgments = examples
    rng = np.random.default_rng(0)
    for systems, expected in ((["smollm2-p0.9"], False), (["smollm2-p0.9", "human"], True)):
        data = preference_data(stories, judgments, config=CONFIG, systems=systems)
        features = rng.normal(size=(len(data.stories), 8))
        lengths = np.zeros(len(data.stories))
        result = cross_validate(data, features, lengths, CONFIG, folds=3, n_boot=0)
        present = "kendall_tau_b_within_system" in set(result.table["statistic"])
        assert present is expected


def test_the_command_hints_when_the_model_mostly_tells_systems_apart() -> None:
    from storyeval.cli._train_preference import _systems_apart_hint

    def rows(pooled: float, within: float) -> list[dict[str, object]]:
        return [
            {"predictor": "model", "statistic": "kendall_tau_b", "estimate": pooled},
            {"predictor": "model", "statistic": "kendall_tau_b_within_system", "estimate": within},
            {"predictor": "length (log words)", "statistic": "kendall_tau_b", "estimate": 0.9},
        ]

    hint = _systems_apart_hint(rows(0.418, 0.103))
    assert hint is not None and "0.42 over all stories but 0.10 within systems" in hint
    assert "--exclude-systems" in hint
    assert _systems_apart_hint(rows(0.434, 0.406)) is None  # the generated-only model
    assert _systems_apart_hint(rows(0.4, 0.1)[:1]) is None  # one system: no within row


def test_a_held_out_agreement_below_chance_is_a_warning_with_its_likely_cause() -> None:
    """A model whose held-out Kendall interval lies below 0 says so instead of only printing
    the score; where length alone agrees with people and the length covariate was left out
    of the scores, the warning names that (suppression) and the remedy."""
    from storyeval.learn.preference import PreferenceConfig, wrong_sign_note

    def row(predictor: str, statistic: str, estimate: float, low: float, high: float) -> dict:
        return {"predictor": predictor, "statistic": statistic, "estimate": estimate,
                "ci_low": low, "ci_high": high}  # fmt: skip

    table = [
        row("model", "kendall_tau_b", -0.171, -0.28, -0.05),
        row("length (log words)", "kendall_tau_b", 0.21, 0.1, 0.3),
    ]
    note = wrong_sign_note(table, PreferenceConfig(), 0.8)
    assert note.startswith("WARNING: the held-out kendall_tau_b is -0.171 [-0.280, -0.050]")
    assert "--no-length-covariate" in note and "+0.80 sd" in note
    plain = wrong_sign_note(table, PreferenceConfig(length_covariate=False), 0.8)
    assert "do not use its scores" in plain and "--no-length-covariate" not in plain
    fine = [row("model", "kendall_tau_b", -0.05, -0.2, 0.1)]  # the interval holds 0: no warning
    assert wrong_sign_note(fine, PreferenceConfig(), 0.8) == ""
