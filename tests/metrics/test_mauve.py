"""MAUVE: parity with the reference implementation (``mauve-text``, a test-only dependency:
GPLv3), seeds and intervals, warnings, the corpus-level registry entries, the command and the
report section."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from storyeval.metrics.divergence import MauveWarning, divergence_curve, length_note, mauve_features


def _reference(p: np.ndarray, q: np.ndarray, seed: int) -> Any:
    mauve = pytest.importorskip("mauve", reason="mauve-text is the parity reference")
    return mauve.compute_mauve(p_features=p, q_features=q, device_id=-1, seed=seed)


@pytest.mark.parametrize("seed", [25, 3])
def test_parity_with_mauve_text_on_the_same_features_and_seed(seed: int) -> None:
    """Provenance: mauve-text 0.4.0 ``compute_mauve(p_features=..., q_features=...)``, the
    authors' implementation, on the same random features and k-means seed."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(250, 24))
    p = rng.normal(0.25, 1.0, size=(220, 24))
    expected = _reference(p, q, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MauveWarning)
        ours = mauve_features(p, q, seeds=[seed], kmeans="faiss")
    run = ours.per_seed[0]
    assert ours.num_buckets == expected.num_buckets
    assert run.mauve == pytest.approx(expected.mauve, abs=1e-12)
    assert run.mauve_star == pytest.approx(expected.mauve_star, abs=1e-12)
    assert run.frontier_integral == pytest.approx(expected.frontier_integral, abs=1e-12)
    assert run.frontier_integral_star == pytest.approx(expected.frontier_integral_star, abs=1e-12)
    np.testing.assert_allclose(run.curve, expected.divergence_curve, atol=1e-12)
    np.testing.assert_allclose(run.p_hist, expected.p_hist, atol=1e-12)


def test_parity_on_real_encoder_features(example_stories: list[Any], scoring_context: Any) -> None:
    """The offline encoder's story features (human vs one system), as the metric computes
    them, give the reference implementation's MAUVE for the same seed."""
    from storyeval import functional as F

    output = F.mauve_features([s.story for s in example_stories], scoring=scoring_context)
    systems = np.array([s.system for s in example_stories])
    features = output.features  # without the last column of stats (each story's length)
    q = features[systems == "human"]
    p = features[systems == "smollm2-p0.9"]
    expected = _reference(p, q, 25)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MauveWarning)
        ours = mauve_features(p, q, seeds=1, seed=25, kmeans="faiss")
    assert ours.mauve == pytest.approx(expected.mauve, abs=1e-12)
    assert ours.mauve_star == pytest.approx(expected.mauve_star, abs=1e-12)


def test_seeds_give_a_mean_and_an_interval_and_the_score_tracks_the_distributions() -> None:
    rng = np.random.default_rng(0)
    people = rng.normal(size=(300, 10))
    same = mauve_features(rng.normal(size=(300, 10)), people, seeds=4, kmeans="sklearn")
    far = mauve_features(rng.normal(2.0, 1.0, size=(300, 10)), people, seeds=4, kmeans="sklearn")
    assert [r.seed for r in same.per_seed] == [25, 26, 27, 28]
    assert same.mauve == pytest.approx(np.mean([r.mauve for r in same.per_seed]))
    low, high = same.mauve_ci
    assert low < same.mauve < high
    assert same.mauve > 0.9 > 0.2 > far.mauve
    assert same.mauve_star > far.mauve_star
    one = mauve_features(people[:150], people[150:], seeds=1, kmeans="sklearn")
    assert np.isnan(one.mauve_ci[0]) and np.isnan(one.mauve_sd)
    assert len(same.curves()) == 4 * 27


def test_identical_histograms_give_one_and_bad_input_is_refused() -> None:
    hist = np.array([0.2, 0.3, 0.5])
    curve = divergence_curve(hist, hist)
    from storyeval.metrics.divergence import curve_area

    assert curve_area(curve) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="dimension"):
        mauve_features(np.ones((5, 3)), np.ones((5, 4)))
    with pytest.raises(ValueError, match="NaN"):
        mauve_features(np.full((5, 3), np.nan), np.ones((5, 3)))
    with pytest.raises(ValueError, match="seeds"):
        mauve_features(np.ones((5, 3)), np.ones((5, 3)), seeds=0)


def test_small_samples_and_different_lengths_are_warned_about() -> None:
    rng = np.random.default_rng(1)
    with pytest.warns(MauveWarning, match="below 100"):
        result = mauve_features(rng.normal(size=(30, 4)), rng.normal(size=(40, 4)), seeds=1)
    assert result.notes
    assert "differ strongly" in length_note([100] * 5, [20] * 5)
    assert length_note([20, 22], [21, 23]) == ""


def test_the_registered_metric_compares_each_system_with_people(
    example_stories: list[Any], scoring_context: Any
) -> None:
    from storyeval.base.errors import StoryevalError
    from storyeval.metrics import score_stories

    run = score_stories(
        example_stories,
        "mauve,mauve_star",
        options={"mauve.seeds": 3},
        bootstrap=0,
        context=scoring_context,
    )
    assert run.scores == [], "a corpus-level metric writes no per-story score"
    frame = run.systems
    assert set(frame["system"]) == {"smollm2-k40-t0.7", "smollm2-p0.9"}
    assert set(frame["statistic"]) == {"mauve", "mauve_star"}
    row = frame[(frame.system == "smollm2-p0.9") & (frame.statistic == "mauve")].iloc[0]
    result = run.details[("mauve", "mauve", "smollm2-p0.9")]
    assert row.estimate == pytest.approx(result.mauve)
    assert row.ci_low < row.estimate < row.ci_high
    assert row.n == 60
    assert "reference:human" in row.signature and "seeds:3" in row.signature
    assert "kmeans:faiss" in row.signature and "n_reference:60" in row.signature
    assert any("below 100" in note for note in run.metrics["mauve"].notes)
    with pytest.raises(StoryevalError, match="reference system 'people'"):
        score_stories(example_stories, "mauve", options={"mauve.reference_system": "people"})


def test_functional_mauve_equals_the_registry(
    example_stories: list[Any], scoring_context: Any
) -> None:
    from storyeval import functional as F
    from storyeval.metrics import score_stories

    # the stories of 30 prompts: the two paths' equality, not the corpus, is tested
    prompts = {f"s{index:03d}" for index in range(1, 31)}
    stories = [s for s in example_stories if s.extra.get("prompt_id") in prompts]
    people = [s.story for s in stories if s.system == "human"]
    system = [s.story for s in stories if s.system == "smollm2-k40-t0.7"]
    assert len(people) == len(system) == 30
    result = F.mauve(system, people, seeds=2, scoring=scoring_context)
    run = score_stories(
        stories, "mauve", options={"mauve.seeds": 2}, bootstrap=0, context=scoring_context
    )
    row = run.systems.query("system == 'smollm2-k40-t0.7'").iloc[0]
    assert result.mauve == pytest.approx(row.estimate, abs=1e-12)


@pytest.mark.slow
def test_causal_lm_features_run_end_to_end(example_stories: list[Any]) -> None:
    from storyeval.metrics import score_stories

    stories = [
        s
        for s in example_stories
        if s.extra.get("prompt_id") in {"s001", "s002", "s003", "s004", "s005", "s006"}
    ]
    run = score_stories(
        stories,
        "mauve",
        options={"mauve.features": "causal-lm", "mauve.seeds": 2, "mauve.num_buckets": 2},
        bootstrap=0,
    )
    assert len(run.systems) == 2
    assert "features:causal-lm" in run.systems.signature.iloc[0]
    assert run.systems.estimate.between(0, 1).all()


def test_mauve_command_writes_the_directory_and_the_report_section(
    run_cli: Any, examples_dir: Path, tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """The command's files and the report's section (on the two-layer encoder's features:
    the registry's numbers are tested above)."""
    out = tmp_path / "mauve"
    code, _, stderr = run_cli(
        "mauve",
        str(examples_dir / "stories.jsonl"),
        "-o",
        str(out),
        "--seeds",
        "2",
        "--model",
        str(tiny_models["encoder"]),
        "--no-progress",
    )
    assert code == 0, stderr
    assert "below 100" in stderr
    for name in ("mauve.csv", "curves.csv", "divergence.png", "mauve.md", "mauve.json"):
        assert (out / name).is_file(), name
    assert (out / "divergence.png").read_bytes()[:4] == b"\x89PNG"
    saved = json.loads((out / "mauve.json").read_text())
    assert saved["reference"] == "human" and "mauve" in saved["signatures"]
    from storyeval.analyses.distribution import read_mauve
    from storyeval.report.render import render_markdown
    from storyeval.report.sections import ReportFiles, mauve_section

    report = tmp_path / "report"
    (report / "figures").mkdir(parents=True)
    section = mauve_section(out, ReportFiles(report))
    text = render_markdown("r", [section])
    assert "MAUVE" in text and "smollm2-p0.9" in text
    assert (report / "figures" / "mauve_divergence.png").is_file()
    assert len(read_mauve(out).curves) == 2 * 2 * 27
    code, _, stderr = run_cli("mauve", str(examples_dir / "human.jsonl"), "-o", str(out))
    assert code == 2 and "every story is the reference's" in stderr
