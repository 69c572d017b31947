"""The command line: help, lazy heavy imports, exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

HEAVY = ("torch", "transformers", "spacy")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "storyeval", *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )


def test_help_lists_commands():
    result = run("--help")
    assert result.returncode == 0
    for command in ("validate", "describe", "models"):
        assert command in result.stdout


def test_help_imports_no_heavy_library():
    code = f"import sys; from storyeval.cli import app; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_version():
    from storyeval import __version__

    assert run("--version").stdout.strip() == f"storyeval {__version__}"


def test_missing_file_exits_2():
    result = run("validate", "/no/such/file.jsonl")
    assert result.returncode == 2 and "no such file" in result.stderr


def test_describe_writes_csv(tmp_path, examples_dir):
    out = tmp_path / "d.csv"
    result = run("describe", str(examples_dir / "human.jsonl"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    header, row = out.read_text().strip().splitlines()
    assert header.startswith("system,n_stories,n_with_reference,mean_words")
    assert row.startswith("human,60,0,")
    shown = run("describe", str(examples_dir / "stories.jsonl"), env={"COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    assert "n_with_reference" in shown.stdout and "smollm2-k40-t0.7" in shown.stdout  # whole
    assert max(len(line) for line in shown.stdout.splitlines()) <= 80
