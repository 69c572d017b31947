"""Fixtures for the human-study tests: a folder with the example corpus for study files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture
def corpus_dir(tmp_path: Path, examples_dir: Path) -> Path:
    target = tmp_path / "corpus"
    target.mkdir()
    shutil.copy(examples_dir / "stories.jsonl", target / "stories.jsonl")
    return target
