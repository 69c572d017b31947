"""Every model path on a GPU gives the CPU's numbers (see conftest.py: ``fake-cuda`` on every
machine, ``cuda`` on a real card)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from devicecheck import close  # type: ignore[import-not-found]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stories(examples_dir: Path) -> list[Any]:
    from storyeval.corpus import read_stories

    every = read_stories(examples_dir / "stories.jsonl")
    chosen = [s for s in every if s.system == "human"][:6]
    chosen += [s for s in every if s.system == "smollm2-p0.9"][:6]
    return chosen


def _values(run: Any, metric: str) -> list[float]:
    return [s.value for s in run.scores if s.metric == metric]


ENCODER_METRICS = (
    "bertscore_f",
    "bertscore_prompt",
    "embedding_coherence",
    "moverscore",
    "sms",
)


def test_encoder_metrics_and_perplexity(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    """The shared encoder pass (with its warm-up: the crash an H200 found), contextual mover
    metrics and perplexity, on the GPU and on the CPU."""
    from storyeval.metrics import score_stories

    alone = {"bertscore.model": str(tiny_models["encoder"]), "bertscore.layer": "1"}
    first = score_stories(  # below the top layer, on a model never run: the warm-up runs
        stories, "bertscore_f", options=alone, bootstrap=0, missing="skip", device="cuda"
    )
    assert len(first.scores) == 6
    names = ",".join([*ENCODER_METRICS, "perplexity"])
    options = {
        "encoder.model": str(tiny_models["encoder"]),
        "bertscore.layer": "1",
        "sms.embeddings": "contextual",
        "sms.model": str(tiny_models["encoder"]),
        "perplexity.model": str(tiny_models["lm"]),
    }
    runs = {
        device: score_stories(
            stories, names, options=options, bootstrap=0, missing="skip", device=device
        )
        for device in ("cuda", "cpu")  # the GPU first: a model's first run is on it
    }
    for name in names.split(","):
        close(_values(runs["cuda"], name), _values(runs["cpu"], name), gpu)
    assert "device:cuda" in runs["cuda"].metrics["bertscore_f"].signature.render()


def test_bfloat16_on_the_gpu_is_close_and_signed(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    from storyeval.metrics import score_stories

    options = {
        "bertscore.model": str(tiny_models["encoder"]),
        "perplexity.model": str(tiny_models["lm"]),
    }
    half = score_stories(
        stories,
        "bertscore_f,perplexity",
        options=options,
        bootstrap=0,
        device="cuda",
        precision="bfloat16",
        missing="skip",
    )
    cpu = score_stories(
        stories, "bertscore_f,perplexity", options=options, bootstrap=0, missing="skip"
    )
    for name in ("bertscore_f", "perplexity"):
        got, want = np.array(_values(half, name)), np.array(_values(cpu, name))
        if gpu == "cuda":
            np.testing.assert_allclose(got, want, rtol=5e-2)
        assert "precision:bfloat16" in half.metrics[name].signature.render()


def test_mauve_features_on_the_gpu(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    from storyeval import functional as F

    texts = [s.story for s in stories]
    for features in ("encoder", "causal-lm"):
        model = str(tiny_models["encoder" if features == "encoder" else "lm"])
        on_gpu = F.mauve_features(texts, features=features, model=model, device="cuda")
        on_cpu = F.mauve_features(texts, features=features, model=model)
        close(on_gpu.features, on_cpu.features, gpu)


def test_functional_metrics_take_a_device(
    gpu: str, stories: list[Any], tiny_models: dict[str, Path]
) -> None:
    from storyeval import functional as F

    texts = [s.story for s in stories]
    prompts = [s.prompt for s in stories]
    encoder, lm = str(tiny_models["encoder"]), str(tiny_models["lm"])
    pairs = [
        (
            F.bertscore_prev(texts, prompts, model=encoder, device="cuda"),
            F.bertscore_prev(texts, prompts, model=encoder),
        ),
        (
            F.perplexity(texts, prompts, model=lm, device="cuda"),
            F.perplexity(texts, prompts, model=lm),
        ),
    ]
    for on_gpu, on_cpu in pairs:
        close(on_gpu.values, on_cpu.values, gpu)
        assert on_gpu.signature.fields["device"] == "cuda"


def test_judge_probabilities_and_written_answers(
    gpu: str,
    stories: list[Any],
    tiny_models: dict[str, Path],
    run_cli: Any,
    tmp_path: Path,
    examples_dir: Path,
) -> None:
    """The local judge reads label probabilities (prefix cache on and off) and writes answers
    on the GPU as on the CPU."""
    from storyeval.corpus import write_stories

    source = tmp_path / "stories.jsonl"
    write_stories(source, stories[:4])
    results = {}
    for device in ("cuda", "cpu"):
        for cache in ("--prefix-cache", "--no-prefix-cache"):
            out = tmp_path / f"{device}{cache}.jsonl"
            code, _, err = run_cli(
                "judge",
                str(source),
                "-o",
                str(out),
                "--model",
                str(tiny_models["lm"]),
                "--device",
                device,
                "--no-cache",
                cache,
            )
            assert code == 0, err
            results[(device, cache)] = [
                json.loads(line)["value"] for line in out.read_text().splitlines()
            ]
    close(results[("cuda", "--prefix-cache")], results[("cpu", "--prefix-cache")], gpu)
    close(
        results[("cuda", "--no-prefix-cache")],
        results[("cpu", "--prefix-cache")],
        gpu if gpu == "cuda" else "cuda",
    )


def test_generation_on_the_gpu(
    gpu: str, run_cli: Any, tmp_path: Path, examples_dir: Path
) -> None:
    """The offline SmolLM2 (a random model never ends a sentence, which generation needs)."""
    outputs = {}
    for device in ("cuda", "cpu"):
        out = tmp_path / f"{device}.jsonl"
        code, _, err = run_cli(
            "generate",
            str(examples_dir / "human.jsonl"),
            "--limit",
            "3",
            "--top-k",
            "50",
            "--seed",
            "3",
            "--max-new-tokens",
            "40",
            "--max-attempts",
            "3",
            "--device",
            device,
            "--no-progress",
            "-o",
            str(out),
        )
        assert code == 0, err
        outputs[device] = [json.loads(line)["story"] for line in out.read_text().splitlines()]
    if gpu == "fake-cuda":
        assert outputs["cuda"] == outputs["cpu"]
    else:  # sampling on another device draws other tokens: the stories, not their words
        assert len(outputs["cuda"]) == len(outputs["cpu"])
