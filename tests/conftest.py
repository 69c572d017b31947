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

# Only after the thread caps: storyeval imports numpy, whose OpenBLAS reads OMP_NUM_THREADS
# once, when it loads. Two OpenBLAS threads here against one in the Dask workers the tests
# start change float32 products in the 8th digit (BERTScore's greedy matching), and the
# Dask-equals-local tests compare to the last bit.
from storyeval.engine.dask import MMAP_THRESHOLD  # noqa: E402

# glibc hands every freed block over its (dynamic) mmap threshold back to the kernel, and
# the next forward pass faults those pages in again, zeroed: a fixed threshold (the one
# storyeval's Dask workers get) and no trimming keep the tensors' memory in the heap. Set
# before the pytest-xdist workers start (they, and the commands, servers and Dask workers they
# start, inherit it): in A/B runs of an NSP training and of the demo test the system time fell
# from 4-6.6 s to 2.4-3.7 s.
for _name, _value in {
    "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD,
    "MALLOC_TRIM_THRESHOLD_": "4294967296",
    "MALLOC_TOP_PAD_": "67108864",
}.items():
    os.environ.setdefault(_name, _value)
# The reference implementations the parity tests compare with (ppi_python) are numba-jitted:
# compiling them takes 16 s of the suite's CPU, running them as Python well under a second
# on the tests' sizes (the same arithmetic; storyeval itself does not use numba).
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")
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
def scoring_context() -> Any:
    """One scoring context for the tests that train or score on the example stories again
    and again (``scoring=``, the library's way to share an encoder between runs): each text
    is encoded once per test process, as a program training several heads would."""
    from storyeval.metrics.context import ScoringContext

    return ScoringContext()


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
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 2-layer BERT encoder (with a next-sentence head) and a 2-layer Llama causal LM,
    random-initialised, saved with the offline models' tokenizers: for the device tests, and
    for tests of mechanics rather than of what a model learns (checkpoint selection, resuming,
    batching equal to reading alone, a command's plumbing), where the 135M-parameter default
    spends a minute per test on the CPU learning nothing the assertions read. The LM's
    directory is named so that its model family is the default's (``smollm2``)."""
    import torch
    from transformers import BertConfig, BertForPreTraining, LlamaConfig, LlamaForCausalLM

    root = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    encoder_tokenizer, lm_tokenizer = _tokenizers()
    bert = BertForPreTraining(
        BertConfig(
            vocab_size=len(encoder_tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=512,
        )
    )
    bert.save_pretrained(root / "bert")
    encoder_tokenizer.save_pretrained(root / "bert")
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(lm_tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=2048,
            bos_token_id=lm_tokenizer.bos_token_id,
            eos_token_id=lm_tokenizer.eos_token_id,
            tie_word_embeddings=True,
        )
    )
    llama.save_pretrained(root / "SmolLM2-tiny")
    lm_tokenizer.save_pretrained(root / "SmolLM2-tiny")
    return {"encoder": root / "bert", "lm": root / "SmolLM2-tiny"}


def _tokenizers() -> tuple[Any, Any]:
    """The offline models' tokenizers, or ``$STORYEVAL_TOKENIZERS/{encoder,lm}`` (a GPU
    machine without the offline model packages: ``scripts/gpu_prepare.sh`` saves them)."""
    from transformers import AutoTokenizer

    folder = os.environ.get("STORYEVAL_TOKENIZERS")
    if folder:
        return (
            AutoTokenizer.from_pretrained(Path(folder) / "encoder"),
            AutoTokenizer.from_pretrained(Path(folder) / "lm"),
        )
    from storyeval.models.loading import resolve_model_path

    # the tokenizers' files alone: the default models' weights need not load for them
    return tuple(  # type: ignore[return-value]
        AutoTokenizer.from_pretrained(resolve_model_path(None, kind)[1])
        for kind in ("encoder", "causal-lm")
    )
