"""The README and the docs' guides are tested walk-throughs: every ``storyeval`` command they
show parses (the command exists, every option is known and its value valid), every Python
block runs (blocks marked ``<!-- not run: reason -->`` excepted: hub models, GPUs, clusters),
and the first steps of getting started run for real."""

from __future__ import annotations

import doctest
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from storyeval.cli import app, click_command

ROOT = Path(__file__).resolve().parent.parent
GUIDES = [
    ROOT / "README.md",
    ROOT / "docs" / "getting-started.md",
    *sorted((ROOT / "docs" / "guides").glob("*.md")),
]
BLOCK = re.compile(r"(?P<marker><!-- not run: [^>]+-->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.S)


def _blocks(path: Path, lang: str) -> list[tuple[str, bool]]:
    """``(code, runnable)`` of the fenced blocks of a language in a Markdown file."""
    text = path.read_text(encoding="utf-8")
    return [(m["body"], m["marker"] is None) for m in BLOCK.finditer(text) if m["lang"] == lang]


def _commands(path: Path) -> list[list[str]]:
    """The ``storyeval`` command lines of the bash blocks, continuation lines joined, comments
    and ``[optional]`` illustrations left out, split as the shell splits them."""
    commands = []
    for body, _ in _blocks(path, "bash"):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line.startswith("storyeval "):
                continue
            words = shlex.split(line, comments=True)
            commands.append([w for w in words if not (w.startswith("[") or w.endswith("]"))])
    return commands


def _parse(words: list[str]) -> None:
    """Parse a command line as the CLI would, without running it."""
    command: Any = click_command()  # typer's own click, vendored; built once
    context = command.make_context("storyeval", words[1:], resilient_parsing=False)
    while hasattr(command, "resolve_command") and context._protected_args + context.args:
        rest = [*context._protected_args, *context.args]
        name, sub, args = command.resolve_command(context, rest)
        assert sub is not None, f"unknown command {name!r}"
        command = sub
        context = sub.make_context(str(name), list(args), parent=context)


COMMANDS = [
    pytest.param(words, id=f"{path.relative_to(ROOT)}: {' '.join(words[:3])}")
    for path in GUIDES
    for words in _commands(path)
]


def test_the_guides_show_commands():
    assert len(COMMANDS) > 60
    assert {p.name for p in GUIDES} >= {"README.md", "metrics.md", "judges.md", "scaling.md"}


@pytest.mark.parametrize("words", COMMANDS)
def test_every_documented_command_parses(words, tmp_path, monkeypatch):
    """A renamed option or command, or a value the CLI refuses, fails here."""
    monkeypatch.chdir(ROOT)
    try:
        _parse(words)
    except typer.Exit:
        pass  # --help and friends
    except Exception as exc:
        if not hasattr(exc, "format_message"):  # not a usage error
            raise
        pytest.fail(f"{' '.join(words)}: {exc.format_message()}")


PYTHON = [
    pytest.param(code, id=f"{path.relative_to(ROOT)} block {k}")
    for path in GUIDES
    for k, (code, runnable) in enumerate(_blocks(path, "python"))
    if runnable
]


@pytest.mark.parametrize("code", PYTHON)
def test_every_python_block_runs(code, monkeypatch, tmp_path):
    """Each block runs from the repository root, as the guides tell a reader to; a block of
    ``>>>`` lines is a doctest and its printed values must match."""
    monkeypatch.chdir(ROOT)
    if code.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(code, {}, "guide", None, 0)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.summarize(verbose=False).failed == 0
        return
    exec(compile(code, "guide", "exec"), {"__name__": "guide"})


def test_getting_started_first_steps_run(tmp_path, monkeypatch):
    """The first commands of getting started, run for real from the repository root."""
    from typer.testing import CliRunner

    monkeypatch.chdir(ROOT)
    runner = CliRunner()
    valid = runner.invoke(app, ["validate", "examples/stories.jsonl"])
    assert valid.exit_code == 0, valid.output
    out = tmp_path / "describe.csv"
    described = runner.invoke(app, ["describe", "examples/stories.jsonl", "-o", str(out)])
    assert described.exit_code == 0 and out.stat().st_size > 0, described.output
    defaults = runner.invoke(app, ["models", "defaults"])
    assert defaults.exit_code == 0 and "smollm2" in defaults.output.lower(), defaults.output
    assert os.environ.get("STORYEVAL_OFFLINE_TEST", "1")


def test_the_parser_catches_what_a_stale_guide_would_show():
    """The check can fail: an unknown option, an unknown command, a bad value."""
    for words in (
        ["storyeval", "score", "x.jsonl", "--metric-list", "bleu"],
        ["storyeval", "scores", "x.jsonl"],
        ["storyeval", "generate", "x.jsonl", "-o", "y.jsonl", "--top-k", "zero"],
        ["storyeval", "study", "analyse", "--judgments", "j.jsonl"],  # -o is required
    ):
        with pytest.raises(Exception, match=r".") as caught:
            _parse(words)
        assert hasattr(caught.value, "format_message"), words


def test_the_readme_counts_the_registered_metrics():
    """The README's count of metrics is the registry's (it said 44 when there were 50)."""
    from storyeval.metrics import available_metrics

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    [count] = re.findall(r"any of the (\d+) registered metrics", readme)
    assert int(count) == len(available_metrics())
