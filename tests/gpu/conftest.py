"""The device tests: every model command on a GPU and on the CPU, numbers compared.

Each test runs twice: on ``fake-cuda`` (always: a CUDA device simulated on the CPU, see
:mod:`tests.fakecuda`, which fails where a tensor is on the wrong device; the numbers must
equal the CPU's exactly) and on ``cuda`` (marked ``gpu``: a real card, skipped without one;
the numbers must equal the CPU's within the precision's tolerance). The models are tiny,
random-initialised from configs with the offline models' real tokenizers (nothing is
downloaded).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a test dependency
        return False
    return bool(torch.cuda.is_available())


@pytest.fixture(
    params=[
        "fake-cuda",
        pytest.param(
            "cuda",
            marks=[
                pytest.mark.gpu,
                pytest.mark.skipif(not _cuda_available(), reason="no CUDA GPU here"),
            ],
        ),
    ]
)
def gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``"fake-cuda"`` (inside the simulated device) or ``"cuda"`` (a real GPU)."""
    if request.param == "cuda":
        yield "cuda"
        return
    from fakecuda import fake_cuda

    with fake_cuda(monkeypatch):
        yield "fake-cuda"


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 2-layer BERT encoder (with a next-sentence head) and a 2-layer Llama causal LM,
    random-initialised, saved with the offline models' tokenizers."""
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
    llama.save_pretrained(root / "llama")
    lm_tokenizer.save_pretrained(root / "llama")
    return {"encoder": root / "bert", "lm": root / "llama"}


def _tokenizers() -> tuple[Any, Any]:
    """The offline models' tokenizers, or ``$STORYEVAL_TOKENIZERS/{encoder,lm}`` (a GPU
    machine without the offline model packages: ``scripts/gpu_prepare.sh`` saves them)."""
    import os

    folder = os.environ.get("STORYEVAL_TOKENIZERS")
    if folder:
        from transformers import AutoTokenizer

        return (
            AutoTokenizer.from_pretrained(Path(folder) / "encoder"),
            AutoTokenizer.from_pretrained(Path(folder) / "lm"),
        )
    from storyeval.models import load_causal_lm, load_encoder

    return load_encoder().tokenizer, load_causal_lm().tokenizer


@pytest.fixture(scope="session")
def offline_lm() -> Any:
    """The offline SmolLM2 (generation needs a model that ends its sentences), or a skip on a
    machine without the offline packages."""
    from storyeval.base.errors import ModelLoadError
    from storyeval.models import load_causal_lm

    try:
        return load_causal_lm()
    except ModelLoadError as exc:
        pytest.skip(f"the offline LM is not installed here: {exc}")


@pytest.fixture(scope="session")
def nlp() -> Any:
    """The offline spaCy pipeline, or a skip where spaCy or its model is not installed (the
    GPU image has neither, and its 70 MB of wheels do not fit what travels to the card)."""
    pytest.importorskip("spacy", reason="spaCy is not installed here")
    from storyeval.base.errors import ModelLoadError
    from storyeval.models import load_spacy

    try:
        return load_spacy()
    except ModelLoadError as exc:
        pytest.skip(f"the offline spaCy model is not installed here: {exc}")
