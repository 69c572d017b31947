"""The within-system level (Deutsch et al. 2023's group-by-system correlation): within each
system across its stories, averaged over systems; asked for by name."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from typer.testing import CliRunner

from metahelpers import JUDGMENTS, STORIES, write_example_scores
from storyeval.cli import app
from storyeval.corpus import read_judgments
from storyeval.meta import build_meta_table, compare_metrics, correlate, level_correlation
from storyeval.meta.data import MetaInputError


def _systems_apart(rng: np.random.Generator, within: float) -> tuple[np.ndarray, ...]:
    """Three systems of 40 stories whose means differ a lot (in the metric and for people)
    and whose stories agree with people by ``within`` inside each system."""
    systems = np.repeat(["a", "b", "c"], 40)
    offset = np.repeat([0.0, 3.0, 6.0], 40)
    human = rng.normal(size=120)
    metric = within * human + np.sqrt(1 - within**2) * rng.normal(size=120)
    return metric + offset, human + offset, systems


def test_it_is_the_mean_of_the_systems_correlations() -> None:
    rng = np.random.default_rng(0)
    metric, human, systems = _systems_apart(rng, within=0.6)
    out = level_correlation(
        metric, human, level="within_system", systems=systems, method="kendall", n_boot=300
    )
    per_system = [
        stats.kendalltau(metric[systems == s], human[systems == s]).statistic for s in "abc"
    ]
    assert out["estimate"] == pytest.approx(np.mean(per_system))
    assert (out["n"], out["n_groups"], out["skipped"]) == (120, 3, 0)
    assert out["resample"] == "stories within systems"
    assert out["ci_low"] < out["estimate"] < out["ci_high"]
    assert out["p_value"] < 0.001


def test_telling_systems_apart_is_not_agreement_within_them() -> None:
    """A metric that only separates the systems is high pooled and near zero within them,
    with a permutation p-value that does not reject."""
    rng = np.random.default_rng(1)
    metric, human, systems = _systems_apart(rng, within=0.0)
    pooled = level_correlation(metric, human, level="pooled", method="spearman", n_boot=0)
    within = level_correlation(
        metric, human, level="within_system", systems=systems, method="spearman", n_boot=200
    )
    assert pooled["estimate"] > 0.6
    assert abs(within["estimate"]) < 0.15 and within["p_value"] > 0.05
    assert within["ci_low"] < 0 < within["ci_high"]


def test_systems_that_cannot_be_correlated_are_skipped() -> None:
    metric = [1.0, 2.0, 3.0, 4.0, 5.0, 9.0]
    human = [1.0, 2.0, 3.0, 5.0, 4.0, 1.0]
    systems = ["a", "a", "a", "b", "b", "c"]  # c has one story
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = level_correlation(
            metric, human, level="within_system", systems=systems, method="pearson", n_boot=0
        )
    assert (out["n_groups"], out["skipped"], out["n"]) == (2, 1, 5)
    assert out["estimate"] == pytest.approx((1.0 + -1.0) / 2)
    with pytest.raises(MetaInputError, match="within-system level needs the system"):
        level_correlation(metric, human, level="within_system")
    with pytest.raises(ValueError, match="within_system"):
        level_correlation(metric, human, level="within")


def test_correlate_computes_it_when_asked_and_williams_refuses_it(tmp_path: Path) -> None:
    scores = write_example_scores(tmp_path / "scores.jsonl")
    from storyeval.corpus import read_scores, read_stories

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = build_meta_table(
            read_scores(scores), read_judgments(JUDGMENTS), stories=read_stories(STORIES)
        )
        default = correlate(table, methods=["kendall"], n_boot=0)
        asked = correlate(table, levels=["within_system"], methods=["kendall"], n_boot=50)
    assert "within_system" not in set(default["level"])
    assert set(asked["level"]) == {"within_system"}
    groups = asked.groupby("metric")["n_groups"].max().to_dict()
    assert groups == {"distinct2": 3, "length": 3, "bleu": 2}  # BLEU: no human story
    assert asked["signature"].str.contains("level:within_system").all()
    with pytest.raises(ValueError, match="within-system levels average"):
        compare_metrics(table, level="within_system")
    out = tmp_path / "corr.csv"
    result = CliRunner().invoke(
        app,
        [
            "correlate",
            "--scores",
            str(scores),
            "--judgments",
            str(JUDGMENTS),
            "--stories",
            str(STORIES),
            "--level",
            "within_system",
            "--method",
            "spearman",
            "--n-boot",
            "50",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    written = pd.read_csv(out)
    assert set(written["level"]) == {"within_system"} and len(written) == len(asked)


def test_judge_eval_shows_a_judge_that_only_tells_systems_apart() -> None:
    """judge-eval adds the within-system level when the stories come from two or more
    systems: a judge that knows each system's quality but nothing of its stories is high
    pooled and near zero within systems, below the people's own within-system ceiling."""
    from storyeval.corpus import Judgment, Story
    from storyeval.judge.evaluate import evaluate_judge

    rng = np.random.default_rng(3)
    stories, people, judge = [], [], []
    for p in range(30):
        for s, offset in (("a", 1.0), ("b", 3.0), ("c", 5.0)):
            item = f"p{p}-{s}"
            stories.append(Story(item, f"prompt {p}", f"A story {p} of {s}.", system=s))
            quality = offset + rng.normal()
            for rater in ("r1", "r2", "r3"):
                value = float(np.clip(round(quality + 0.3 * rng.normal()), 1, 5))
                people.append(Judgment(item, rater, "coherence", value))
            judge.append(Judgment(item, "judge", "coherence", float(offset + rng.normal())))
    result = evaluate_judge(judge, people, stories=stories, n_boot=50)
    table = result.headline().set_index("level")
    assert table.loc["pooled", "spearman"] > 0.6
    assert abs(table.loc["within_system", "spearman"]) < 0.25
    assert table.loc["within_system", "human_ceiling"] > 0.5


def test_drawn_labels_that_do_not_vary_in_a_system_leave_it_out_of_that_replicate() -> None:
    """With people's labels drawn from a competence model, a system whose drawn labels are
    all equal (every human story rated 5) sits out that replicate instead of voiding it."""
    rng = np.random.default_rng(4)
    metric, human, systems = _systems_apart(rng, within=0.6)
    draws = np.tile(np.round(human), (100, 1)) + rng.normal(scale=0.3, size=(100, 120))
    draws[:, systems == "c"] = 5.0  # no variance in any draw
    out = level_correlation(
        metric, human, level="within_system", systems=systems, method="spearman",
        n_boot=100, y_draws=draws,
    )  # fmt: skip
    assert out["n_groups"] == 3 and np.isfinite([out["ci_low"], out["ci_high"]]).all()
    assert out["ci_low"] > 0.1
    from storyeval.meta.correlation import correlation_signature

    rendered = correlation_signature(
        method="spearman", level="within_system", kendall_variant="b", n_boot=100,
        confidence=0.95, seed=0, resample="stories within systems",
    )  # fmt: skip
    assert "|p:permutation:1999|" in rendered


def test_the_report_shows_the_within_system_level_when_asked(tmp_path: Path) -> None:
    scores = write_example_scores(tmp_path / "scores.jsonl")
    out = tmp_path / "report"
    result = CliRunner().invoke(
        app,
        [
            "report", "--scores", str(scores), "--judgments", str(JUDGMENTS),
            "--stories", str(STORIES), "--level", "pooled", "--level", "within_system",
            "--method", "spearman", "--n-boot", "50", "-o", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    assert "Within system: within each system across its stories" in text
    assert "*spearman, within_system level" in text
    table = pd.read_csv(out / "correlations.csv")
    assert set(table["level"]) == {"pooled", "within_system"}
    ceiling = pd.read_csv(out / "ceiling.csv")
    assert "within_system" in set(ceiling["level"])
