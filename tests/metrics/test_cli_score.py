"""`storyeval score` and `storyeval metrics` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from storyeval.cli import app
from storyeval.corpus import read_scores, write_stories
from storyeval.metrics import available_metrics

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def story_file(tmp_path_factory, short_stories):
    path = tmp_path_factory.mktemp("cli") / "stories.jsonl"
    write_stories(path, short_stories)
    return path


def test_metrics_lists_the_registry():
    result = invoke("metrics", "--json")
    assert result.exit_code == 0
    listed = json.loads(result.output)
    assert [m["name"] for m in listed] == available_metrics()
    bleu = next(m for m in listed if m["name"] == "bleu")
    assert bleu["inputs"] == ["story", "reference"] and bleu["higher_is_better"] is True
    assert bleu["range"] == [0.0, 100.0] and "corpus_bleu" in bleu["corpus_statistics"]
    table = invoke("metrics", "--options")
    assert table.exit_code == 0 and "bertscore_f.layer" in table.output


def test_unknown_metric_exits_2_with_the_choices(story_file):
    result = invoke("score", str(story_file), "--metrics", "bleu,blue")
    assert result.exit_code == 2
    assert "unknown metric 'blue'" in result.output and "must be one of" in result.output


def test_unknown_option_key_exits_2(story_file):
    result = invoke("score", str(story_file), "-m", "bleu", "--option", "bleu.tokenise=intl")
    assert result.exit_code == 2 and "unknown option 'bleu.tokenise'" in result.output
    bad = invoke("score", str(story_file), "-m", "bleu", "--option", "bleu")
    assert bad.exit_code == 2 and "NAME.KEY=VALUE" in bad.output


def test_missing_reference_exits_2_naming_metric_and_line(story_file):
    result = invoke("score", str(story_file), "-m", "rougeL")
    assert result.exit_code == 2
    assert "metric rougeL needs a reference" in result.output
    assert f"{story_file}:1:" in result.output and "--skip-missing" in result.output


def test_score_writes_records_with_system_prompt_id_and_option_in_signature(story_file, tmp_path):
    out, table = tmp_path / "scores.jsonl", tmp_path / "systems.csv"
    result = invoke(
        "score", str(story_file), "-m", "bleu,distinct2", "--option", "bleu.lowercase=true",
        "--skip-missing", "-o", str(out), "--per-system", str(table), "--bootstrap", "100",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "bleu: skipped 2 stories without a reference" in result.output
    scores = read_scores(out)
    assert {s.metric for s in scores} == {"bleu", "distinct2"}
    bleu = [s for s in scores if s.metric == "bleu"]
    assert len(bleu) == 4 and all("lowercase:yes" in s.signature for s in bleu)
    assert {s.extra["prompt_id"] for s in scores} == {"s001", "s002"}
    assert {s.extra["system"] for s in scores} == {"human", "smollm2-p0.9", "smollm2-k40-t0.7"}
    frame = pd.read_csv(table)
    assert {
        "system",
        "metric",
        "statistic",
        "estimate",
        "ci_low",
        "ci_high",
        "n",
        "signature",
    } <= set(frame.columns)
    assert "corpus_bleu" in set(frame["statistic"])


def test_nsp_without_a_trained_head_exits_2_with_the_remedy(story_file):
    result = invoke("score", str(story_file), "-m", "nsp_prev")
    assert result.exit_code == 2
    assert "bert-base-uncased" in result.output and "storyeval train nsp" in result.output


@pytest.mark.slow
def test_default_suite_end_to_end_in_a_subprocess(story_file, tmp_path):
    out, table = tmp_path / "scores.jsonl", tmp_path / "systems.csv"
    result = subprocess.run(
        [sys.executable, "-m", "storyeval", "score", str(story_file), "-o", str(out),
         "--per-system", str(table), "--bootstrap", "50"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "skipped nsp_prompt" in result.stderr and "skipped user" in result.stderr
    frame = pd.read_csv(table)
    statistics = set(frame["statistic"])
    assert {"corpus_perplexity", "mean_item_perplexity", "corpus_bleu", "mean"} <= statistics
    scored = {s.metric for s in read_scores(out)}
    assert {"bertscore_f", "wms", "perplexity", "self_bleu", "concreteness_noun"} <= scored
    assert "nsp_prompt" not in scored
