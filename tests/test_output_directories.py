"""No command that writes a directory deletes or overwrites what it did not write.

The third attack found ``storyeval view --export mydocs`` deleting ``mydocs/thesis.tex`` (the
shared atomic directory writer replaced whatever directory was there) and ``view in/ --export
in/`` deleting the inputs. Every directory-writing command now leaves a marker file naming its
kind of output, refuses a non-empty directory that is not a previous output of the same kind
(changing nothing in it) and refuses a directory that is or holds one of its inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def _commands(examples: Path) -> dict[str, list[str]]:
    return {
        "import": ["import", "judgments", str(examples / "judgments.jsonl"), "--out-dir"],
        "study analyse": [
            "study", "analyse", "--judgments", str(examples / "judgments.jsonl"),
            "--bootstrap", "20", "-o",
        ],
        "index": ["index", str(examples / "human.jsonl"), "-o"],
        "cyoa analyse": ["cyoa", "analyse", str(examples / "cyoa" / "sessions.jsonl"), "-o"],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["import", "study analyse", "index", "cyoa analyse"])
def test_a_foreign_directory_is_refused_and_a_previous_output_replaced(
    command: str, tmp_path: Path, examples_dir: Path, run_cli: Any
) -> None:
    args = _commands(examples_dir)[command]
    mine = tmp_path / "mydocs"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    code, _, err = run_cli(*args, str(mine))
    assert code == 2 and "not an output of storyeval" in err and "nothing was changed" in err
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]
    out = tmp_path / "out"
    assert run_cli(*args, str(out))[0] == 0
    written = sorted(p.name for p in out.iterdir())
    assert ".storyeval-output" in written
    assert run_cli(*args, str(out))[0] == 0  # its own output: written again
    assert sorted(p.name for p in out.iterdir()) == written


def test_an_input_folder_is_never_an_output(
    tmp_path: Path, examples_dir: Path, run_cli: Any
) -> None:
    import shutil

    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copy(examples_dir / "judgments.jsonl", folder / "judgments.jsonl")
    before = (folder / "judgments.jsonl").read_bytes()
    code, _, err = run_cli(
        "import", "judgments", str(folder / "judgments.jsonl"), "--out-dir", str(folder)
    )
    assert code == 2 and "is or holds the input" in err
    assert (folder / "judgments.jsonl").read_bytes() == before
