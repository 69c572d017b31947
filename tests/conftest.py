"""Shared fixtures: real offline models, each loaded once per test session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def encoder() -> Any:
    from storyeval.models import load_encoder

    return load_encoder()


@pytest.fixture(scope="session")
def causal_lm() -> Any:
    from storyeval.models import load_causal_lm

    return load_causal_lm()


@pytest.fixture(scope="session")
def glove() -> Any:
    from storyeval.models import load_glove

    return load_glove()


@pytest.fixture(scope="session")
def nlp() -> Any:
    from storyeval.models import load_spacy

    return load_spacy()


@pytest.fixture
def write_file(tmp_path: Path) -> Callable[[str, str | bytes], Path]:
    """Write text or bytes to a file under tmp_path and return its path."""

    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    return _write


@pytest.fixture
def run_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    """Run the ``storyeval`` command in this process (models already loaded stay loaded);
    returns ``(exit code, stdout, stderr)``, with user errors mapped to exit 2 as in main()."""
    import sys

    from storyeval.cli import main

    def _run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["storyeval", *args])
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return _run
