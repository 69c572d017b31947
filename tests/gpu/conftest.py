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
