"""Shared fixtures: real offline models, each loaded once per test session."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Several test processes share the cores: one math thread each (set before torch loads,
    # inherited by the commands the tests start), so they do not oversubscribe the CPU.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
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


# UNION in the tests: windows of 2 consecutive sentences (every window: stride 1) of 45
# example stories, 48-token inputs, the full model (classifier + reconstruction head), the
# paper's mixture of all four techniques; 2 epochs (about 100 steps of 10 examples), with a
# higher learning rate for the new heads to shorten the start-up plateau.
UNION_SETTINGS: dict[str, Any] = {"max_length": 48, "window": 2, "stride": 1}
UNION_TRAINING: dict[str, Any] = {
    "epochs": 2,
    "learning_rate": 1.5e-4,
    "head_learning_rate": 3e-3,
    "batch_size": 10,
    "seed": 1,
    "patience": 3,
}


@pytest.fixture(scope="session")
def human(examples_dir: Path) -> Any:
    from storyeval.corpus import read_stories

    return read_stories(examples_dir / "human.jsonl")


@pytest.fixture(scope="session")
def union_recipe() -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings of the session's UNION model (for tests that train it again)."""
    return dict(UNION_SETTINGS), dict(UNION_TRAINING)


@pytest.fixture(scope="session")
def union_model(tmp_path_factory: pytest.TempPathFactory, human: Any, nlp: Any) -> Any:
    """UNION trained once per session on 45 example stories (about a minute on 2 cores)."""
    import warnings

    from filelock import FileLock

    from storyeval.learn import TrainingConfig
    from storyeval.learn.union import UnionConfig, train_union

    # one directory for every test process of the run (pytest-xdist workers share the parent
    # of their base temp): the first trains, the others wait and reuse its model (train_union
    # returns a model already trained with the same signature)
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    directory = shared / "union-shared" / "model"
    directory.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(directory.parent / "train.lock")), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = train_union(
            human[:45],
            directory,
            config=UnionConfig(**UNION_SETTINGS),
            training=TrainingConfig(**UNION_TRAINING),
            progress=False,
            nlp=nlp,
        )
        if result.model is not None:  # trained here: keep its in-memory scores for the others
            from unionhelpers import union_in_memory_scores

            scores = union_in_memory_scores(result, human)
            (directory.parent / "in_memory.json").write_text(json.dumps(scores))
    return result


@pytest.fixture(scope="session")
def tiny_causal_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A causal LM of the default's architecture and tokenizer, cut to two layers of width 64
    (seeded random weights), saved as a local checkpoint: for the tests of training mechanics
    (checkpoint selection, resuming, the commands' plumbing), where the 135M-parameter model
    spends a minute per test on the CPU learning nothing the assertions read."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from storyeval.models.loading import resolve_model_path

    _, default, _ = resolve_model_path(None, "causal-lm")
    config = AutoConfig.from_pretrained(default)
    config.update(
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
        }
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    target = tmp_path_factory.mktemp("tiny-lm") / "SmolLM2-tiny"  # the family: smollm2
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(default).save_pretrained(target)
    return target


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An encoder of the default's architecture and tokenizer (MiniLM's BERT), cut to two
    layers of width 64 (seeded random weights), saved as a local checkpoint: for tests of
    fine-tuning mechanics (which fold tunes on what, resuming) rather than of what is learned."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from storyeval.models.loading import resolve_model_path

    _, default, _ = resolve_model_path(None, "encoder")
    config = AutoConfig.from_pretrained(default)
    config.update(
        {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
        }
    )
    torch.manual_seed(0)
    model = AutoModel.from_config(config)
    target = tmp_path_factory.mktemp("tiny-encoder") / "tiny-minilm"
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(default).save_pretrained(target)
    return target
