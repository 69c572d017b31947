"""The commands outside scripts rely on: ``storyeval generate`` and ``storyeval cyoa analyse``
(run in-process with typer's runner, so the loaded model is shared with the other tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from storyeval.cli import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "writing_sessions.jsonl"


@pytest.mark.slow
def test_generate_command_repeats_exactly_with_the_same_seed(causal_lm, examples_dir, tmp_path):
    common = [
        "generate",
        str(examples_dir / "human.jsonl"),
        "--limit",
        "1",
        "--top-k",
        "40",
        "--temperature",
        "0.8",
        "--max-new-tokens",
        "40",
        "--max-chars",
        "400",
        "--num-stories",
        "2",
        "--no-progress",
    ]
    first = runner.invoke(app, [*common, "--seed", "5", "-o", str(tmp_path / "a.jsonl")])
    assert first.exit_code == 0, first.output
    assert "wrote 2 stories" in first.output and "signature: generate|model:SmolLM2" in first.output
    again = runner.invoke(app, [*common, "--seed", "5", "-o", str(tmp_path / "b.jsonl")])
    assert again.exit_code == 0
    a = (tmp_path / "a.jsonl").read_text()
    assert a == (tmp_path / "b.jsonl").read_text()  # another seed differs: test_generate.py
    records = [json.loads(line) for line in a.splitlines()]
    assert [r["id"] for r in records] == [
        "s001-SmolLM2-135M-Instruct-Q4_1-k40-t0.8-1",
        "s001-SmolLM2-135M-Instruct-Q4_1-k40-t0.8-2",
    ]
    human = [json.loads(line) for line in (examples_dir / "human.jsonl").read_text().splitlines()]
    assert records[0]["reference"] == human[0]["story"] and records[0]["genre"] == human[0]["genre"]
    assert all(len(r["story"]) <= 400 and r["story"][-1] in ".!?\"'”’)" for r in records)
    assert "|top_k:40|" in records[0]["signature"] and "|max_chars:400|" in records[0]["signature"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--top-k", "40", "--top-p", "0.9"], "give --top-k or --top-p, not both"),
        (["--max-words", "10", "--max-chars", "100"], "give --max-words or --max-chars, not both"),
        (["--greedy", "--temperature", "0.7"], "greedy decoding takes no temperature"),
        (["--top-p", "1.5"], "top_p must be in (0, 1]"),
    ],
)
def test_generate_rejects_contradictory_options(examples_dir, tmp_path, args, message):
    result = runner.invoke(
        app, ["generate", str(examples_dir / "human.jsonl"), "-o", str(tmp_path / "x.jsonl"), *args]
    )
    assert result.exit_code == 2 and message in result.output


def test_generate_reports_bad_prompt_lines(write_file, tmp_path):
    prompts = write_file(
        "p.jsonl", '{"id": "a", "prompt": "Fine."}\n{"id": "b"}\n{"id": "a", "prompt": "x"}\n'
    )
    result = runner.invoke(app, ["generate", str(prompts), "-o", str(tmp_path / "x.jsonl")])
    assert result.exit_code == 2
    assert f"{prompts}:2: required field 'prompt' is missing" in result.output
    assert f"{prompts}:3: duplicate id 'a' (first seen on line 1)" in result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_cyoa_analyse_writes_the_three_tables(tmp_path):
    out = tmp_path / "cyoa"
    result = runner.invoke(app, ["cyoa", "analyse", str(DATA), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "fixture: alpha chosen 4/6 (66.7%), binomial p = 0.688" in result.output
    assert "edit_distance alpha 4.5, beta 9.5; Mann-Whitney U p = 0.267" in result.output
    for name in ("preferences.csv", "edits.csv", "text_stats.csv", "likert.csv", "report.md"):
        assert (out / name).exists(), name
    prefs = pd.read_csv(out / "preferences.csv")
    assert {"estimate", "ci_low", "ci_high", "p_value", "n", "method", "signature"} <= set(prefs)
    stats = pd.read_csv(out / "text_stats.csv")
    assert set(stats["statistic"]) == {
        "sentence_length",
        "concreteness_noun",
        "concreteness_verb",
        "distinct_1",
        "distinct_2",
        "distinct_3",
    }


def test_cyoa_analyse_reports_bad_sessions_files(write_file, tmp_path):
    bad = write_file("s.jsonl", '{"format": "storyeval-writing-session", "kind": "cyoa"}\n')
    result = runner.invoke(app, ["cyoa", "analyse", str(bad), "-o", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert f"{bad}:1: session_id: required field is missing" in result.output
    assert not (tmp_path / "o").exists()
