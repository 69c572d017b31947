"""The meta-evaluation commands and the report, run as a user would."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from metahelpers import EXAMPLES, JUDGMENTS, STORIES, write_example_scores
from storyeval.cli import app
from storyeval.corpus import Judgment, read_judgments, write_judgments

runner = CliRunner(env={"COLUMNS": "240", "NO_COLOR": "1"})
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def scores(tmp_path_factory) -> Path:
    return write_example_scores(tmp_path_factory.mktemp("scores") / "scores.jsonl")


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def test_correlate_writes_the_contract_columns(scores, tmp_path):
    out = tmp_path / "corr.csv"
    result = invoke(
        "correlate",
        "--scores",
        scores,
        "--judgments",
        JUDGMENTS,
        "-o",
        out,
        "--n-boot",
        "100",
        "--adjust",
        "bh",
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    for column in (
        "metric",
        "criterion",
        "level",
        "method",
        "estimate",
        "p_value",
        "ci_low",
        "ci_high",
        "n",
        "p_adjusted",
    ):
        assert column in frame.columns
    assert len(frame) == 3 * 4 * 3 * 3
    assert "signature: correlation|method:pearson|level:pooled" in result.output
    assert "metric bleu: bleu|tokenize:13a" in result.output


def test_correlate_story_level_from_a_story_file(tmp_path):
    bare = write_example_scores(tmp_path / "bare.jsonl", with_groups=False)
    out = tmp_path / "c.jsonl"
    result = invoke("correlate", "-s", bare, "-j", JUDGMENTS, "-o", out, "--level", "story")
    assert result.exit_code == 2 and "story level needs prompt ids" in result.output
    result = invoke(
        "correlate",
        "-s",
        bare,
        "-j",
        JUDGMENTS,
        "--stories",
        STORIES,
        "-o",
        out,
        "--level",
        "story",
        "--method",
        "kendall",
        "--kendall-variant",
        "c",
        "--n-boot",
        "50",
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12 and all("tau:c" in r["signature"] for r in rows)
    assert all(isinstance(r["n_groups"], int) for r in rows)


def test_correlate_user_errors_exit_2(scores, tmp_path):
    result = invoke(
        "correlate", "-s", scores, "-j", JUDGMENTS, "-o", tmp_path / "x.csv", "--level", "segment"
    )
    assert result.exit_code == 2 and "pooled, story, system" in result.output
    result = invoke(
        "correlate", "-s", tmp_path / "nope.jsonl", "-j", JUDGMENTS, "-o", tmp_path / "x.csv"
    )
    assert result.exit_code == 2 and "no such file" in result.output
    result = invoke("correlate", "-s", scores, "-j", JUDGMENTS, "-o", tmp_path / "x.txt")
    assert result.exit_code == 2 and ".csv or .jsonl" in result.output
    result = invoke(
        "correlate", "-s", scores, "-j", JUDGMENTS, "-o", tmp_path / "x.csv", "--metric", "rouge"
    )
    assert result.exit_code == 2 and "unknown metric(s) 'rouge'" in result.output


def test_agreement_and_ceiling_commands(tmp_path):
    out = tmp_path / "agreement.csv"
    result = invoke("agreement", "--judgments", JUDGMENTS, "-o", out, "--n-boot", "100")
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    alpha = frame[frame["method"] == "krippendorff_alpha_interval"].set_index("criterion")
    assert list(alpha.index) == ["coherence", "grammar", "likability", "relevance"]
    assert alpha["estimate"].between(0, 1).all()
    assert "likability" in result.output
    ceiling = tmp_path / "ceiling.csv"
    result = invoke(
        "ceiling",
        "-j",
        JUDGMENTS,
        "--stories",
        STORIES,
        "-o",
        ceiling,
        "--level",
        "pooled",
        "--level",
        "system",
        "--method",
        "spearman",
        "--n-boot",
        "50",
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(ceiling)
    assert set(frame["rater"]) == {"r1", "r2", "r3", "mean"}
    assert set(frame["level"]) == {"pooled", "system"}


def test_compare_command(scores, tmp_path):
    out = tmp_path / "williams.csv"
    result = invoke("compare", "-s", scores, "-j", JUDGMENTS, "-o", out, "--criterion", "coherence")
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert len(frame) == 6 and {"statistic", "p_value", "p_adjusted"} <= set(frame.columns)
    assert "signature: williams|method:spearman" in result.output


def test_discriminate_command_with_perturbed_records(tmp_path):
    records = [
        {"id": "s001-neg", "source_id": "s001", "story": "x", "techniques": ["negation"]},
        {"id": "s002-neg", "source_id": "s002", "story": "x", "techniques": ["negation"]},
        {
            "id": "s003-rep",
            "source_id": "s003",
            "story": "x",
            "techniques": ["repetition", "negation"],
        },
    ]
    perturbed = tmp_path / "perturbed.jsonl"
    perturbed.write_text("".join(json.dumps(r) + "\n" for r in records))
    scores = tmp_path / "s.jsonl"
    values = {
        "s001": 0.9,
        "s001-neg": 0.5,
        "s002": 0.7,
        "s002-neg": 0.8,
        "s003": 0.6,
        "s003-rep": 0.1,
    }
    scores.write_text(
        "".join(
            json.dumps(
                {
                    "item_id": k,
                    "metric": "union",
                    "value": v,
                    "signature": "union|higher_is_better:yes|version:0.1.0",
                }
            )
            + "\n"
            for k, v in values.items()
        )
    )
    out = tmp_path / "disc.csv"
    result = invoke("discriminate", "-s", scores, "--perturbed", perturbed, "-o", out)
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out).set_index("group")
    assert frame.loc["(all)", "wins"] == 2 and frame.loc["(all)", "losses"] == 1
    assert frame.loc["negation", "n_pairs"] == 3 and frame.loc["repetition", "wins"] == 1
    result = invoke("discriminate", "-s", scores, "-o", out)
    assert result.exit_code == 2 and "exactly one of" in result.output


def test_drift_commands(scores, tmp_path):
    out = tmp_path / "quality.csv"
    comp = tmp_path / "composition.csv"
    result = invoke(
        "drift",
        "quality",
        "-s",
        scores,
        "-j",
        JUDGMENTS,
        "--criterion",
        "coherence",
        "--low",
        "1",
        "--high",
        "5",
        "--repeats",
        "5",
        "--sets",
        "1-13",
        "-o",
        out,
        "--composition",
        comp,
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert sorted(frame["set"].unique()) == list(range(1, 14)) and set(frame["metric"]) == {
        "distinct2",
        "length",
        "bleu",
    }
    assert len(pd.read_csv(comp)) == 13 * 13
    out = tmp_path / "subsets.csv"
    result = invoke(
        "drift",
        "subsets",
        "-s",
        scores,
        "-j",
        JUDGMENTS,
        "--by",
        "genre",
        "--stories",
        EXAMPLES / "human.jsonl",
        "--n-boot",
        "0",
        "--metric",
        "x",
        "-o",
        out,
    )
    assert result.exit_code != 0  # --metric is not an option of subsets
    result = invoke(
        "drift",
        "subsets",
        "-s",
        scores,
        "-j",
        JUDGMENTS,
        "--by",
        "genre",
        "--stories",
        STORIES,
        "--n-boot",
        "0",
        "-o",
        out,
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    assert "(all)" in set(frame["subset"]) and frame["subset"].nunique() == 11


def _html_images(html: str) -> list[str]:
    return re.findall(r'<img src="([^"]+)"', html)


def test_report_end_to_end(scores, tmp_path):
    out = tmp_path / "report"
    result = invoke(
        "report",
        "--scores",
        scores,
        "--judgments",
        JUDGMENTS,
        "--stories",
        STORIES,
        "-o",
        out,
        "--n-boot",
        "60",
    )
    assert result.exit_code == 0, result.output
    html = (out / "index.html").read_text()
    markdown = (out / "report.md").read_text()
    images = _html_images(html)
    assert "figures/heatmap_spearman.png" in images and "figures/matrix.png" in images
    assert sum(i.startswith("figures/scatter_") for i in images) == 4
    for image in images:
        assert (out / image).read_bytes().startswith(PNG_MAGIC)
        assert f"]({image})" in markdown
    for name in (
        "correlations.csv",
        "matrix.csv",
        "agreement.csv",
        "ceiling.csv",
        "ratings.csv",
        "system_means.csv",
        "williams.csv",
        "signatures.csv",
    ):
        assert (out / name).exists(), name
    corr = pd.read_csv(out / "correlations.csv")
    row = corr[
        (corr.metric == "distinct2")
        & (corr.criterion == "coherence")
        & (corr.level == "pooled")
        & (corr.method == "pearson")
    ].iloc[0]
    cell = f"{row['estimate']:.3f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
    assert cell in markdown and cell in html
    for text in (
        "Krippendorff",
        "krippendorff_alpha_interval",
        "Human ceiling",
        "Williams",
        "sha256:",
    ):
        assert text in markdown and text in html, text
    for signature in ("distinct2|n:2", "correlation|method:kendall|tau:b|level:story"):
        assert signature in html
        assert signature.replace("|", "\\|") in markdown  # pipes escaped in Markdown tables
    signatures = pd.read_csv(out / "signatures.csv")
    assert "metric bleu" in set(signatures["what"])
    matrix = pd.read_csv(out / "matrix.csv")
    assert list(matrix["variable"]) == [
        "coherence",
        "grammar",
        "likability",
        "relevance",
        "distinct2",
        "length",
        "bleu",
    ]


def test_report_with_one_metric_aggregated_ratings_and_no_groups(tmp_path):
    """Robust to any subset: one metric, ratings already averaged (rater 'mean'), no system or
    prompt: the report says what it cannot compute instead of failing."""
    scores = write_example_scores(tmp_path / "one.jsonl", with_groups=False, metrics=("length",))
    judgments = read_judgments(JUDGMENTS)
    means: dict[tuple[str, str], list[float]] = {}
    for j in judgments:
        means.setdefault((j.item_id, j.criterion), []).append(j.value)
    aggregated = tmp_path / "mean.jsonl"
    write_judgments(
        aggregated, [Judgment(i, "mean", c, sum(v) / len(v)) for (i, c), v in means.items()]
    )
    out = tmp_path / "report"
    result = invoke(
        "report",
        "-s",
        scores,
        "-j",
        aggregated,
        "-o",
        out,
        "--n-boot",
        "30",
        "--method",
        "spearman",
    )
    assert result.exit_code == 0, result.output
    markdown = (out / "report.md").read_text()
    assert "The story level is left out" in markdown and "The system level is left out" in markdown
    assert "need two or more raters" in markdown
    assert "there is one" in markdown
    assert not (out / "agreement.csv").exists() and not (out / "williams.csv").exists()
    assert (out / "figures" / "heatmap_spearman.png").read_bytes().startswith(PNG_MAGIC)
    result = invoke("report", "-s", scores, "-j", aggregated, "-o", out / "index.html")
    assert result.exit_code == 2


@pytest.mark.slow
def test_report_through_the_installed_entry_point(scores, tmp_path):
    """As a user runs it: the real process, the real entry point."""
    out = tmp_path / "r"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "storyeval",
            "report",
            "-s",
            str(scores),
            "-j",
            str(JUDGMENTS),
            "-o",
            str(out),
            "--n-boot",
            "40",
            "--method",
            "pearson",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"wrote {out / 'index.html'}" in result.stdout
    assert _html_images((out / "index.html").read_text())


def test_report_groups_repeated_warnings_by_kind():
    from storyeval.report import group_warnings

    cases = [f"m{i} ~ grammar, system, pearson" for i in range(6)]
    texts = [
        f"pearson correlation is undefined ({c}): 2 complete pair(s), need at least 3"
        for c in cases
    ]
    texts.append("spearman correlation is undefined (m0 ~ grammar, system, spearman): 2 pairs")
    texts.append("no raters to compare")
    texts.append("odd case (a, b, c): x")
    texts.append("odd case (a ~ b): x")
    lines = group_warnings(texts, shown=4)
    assert lines == [
        "pearson correlation is undefined (6 cases: m0|m1|m2|m3|... (6) ~ grammar, system, "
        "pearson): 2 complete pair(s), need at least 3",
        "spearman correlation is undefined (m0 ~ grammar, system, spearman): 2 pairs",
        "no raters to compare",
        "odd case (2 cases: a, b, c; a ~ b): x",
    ]


def test_correlate_skips_unsupported_levels_with_a_note_and_filters_systems(tmp_path):
    bare = write_example_scores(tmp_path / "bare.jsonl", with_groups=False)
    out = tmp_path / "c.csv"
    result = invoke(
        "correlate", "-s", bare, "-j", JUDGMENTS, "-o", out, "--n-boot", "0", "-m", "kendall"
    )
    assert result.exit_code == 0, result.output
    assert "note: The story level is left out" in result.output
    assert set(pd.read_csv(out)["level"]) == {"pooled"}
    grouped = write_example_scores(tmp_path / "grouped.jsonl")
    result = invoke(
        "correlate",
        "-s",
        grouped,
        "-j",
        JUDGMENTS,
        "-o",
        out,
        "--n-boot",
        "0",
        "-m",
        "kendall",
        "--exclude-systems",
        "human",
        "--level",
        "system",
    )
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(out)["n"] == 2).all()  # two systems left
    result = invoke("correlate", "-s", grouped, "-j", JUDGMENTS, "-o", out, "--systems", "nobody")
    assert result.exit_code == 2 and "no item of system 'nobody'" in result.output


def test_report_rows_link_to_a_view_export(scores, tmp_path):
    site = tmp_path / "site"
    exported = invoke("view", STORIES, JUDGMENTS, scores, "--export", site)
    assert exported.exit_code == 0, exported.output
    out = tmp_path / "report"
    args = ["report", "-s", scores, "-j", JUDGMENTS, "--stories", STORIES, "-o", out]
    result = invoke(*args, "--n-boot", "20", "--view-export", site, "--method", "spearman")
    assert result.exit_code == 0, result.output
    html = (out / "index.html").read_text()
    markdown = (out / "report.md").read_text()
    links = re.findall(r'<a href="(\.\./site/[^"]+)">', html)
    assert links and all((out / link).resolve().exists() for link in links)
    from storyeval.view.export import disagreement_url, page_file, system_url

    assert f"../site/{page_file(system_url('human'))}" in links
    assert f"../site/{page_file(disagreement_url('distinct2', 'coherence'))}" in links
    assert f"](../site/{page_file(system_url('human'))})" in markdown
    target = (site / page_file(disagreement_url("distinct2", "coherence"))).read_text()
    assert "distinct2" in target and "coherence" in target
    missing = invoke(*args, "--n-boot", "20", "--view-export", tmp_path / "nothing")
    assert missing.exit_code != 0 and "no index.html" in missing.output
