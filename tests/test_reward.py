"""A metric as a training reward (Clark 2021, chapter 5) with TRL: the reward calls the
functional API, a seeded run raises the mean reward on its own prompts, the saved model
carries the reward in its signature and generates, and the maximum-likelihood baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

from storyeval.base.errors import StoryevalError
from storyeval.generate import read_prompts
from storyeval.tuning.reward import (
    RewardSpec,
    RewardTraining,
    reward_function,
    train_reward,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prompts(examples_dir: Path) -> list[Any]:
    return read_prompts(examples_dir / "human.jsonl")[:4]


def test_the_reward_is_the_metric_in_batches(prompts: list[Any]) -> None:
    import storyeval.functional as F

    texts = ["The fox ran home.", "A storm came over the hills and the rain fell."]
    references = [p.references[0] for p in prompts[:2]]
    rewards = reward_function(RewardSpec("sms"))([p.prompt for p in prompts[:2]], texts, references)
    assert rewards == pytest.approx(F.sms(texts, references).values.tolist())
    # lower is better: perplexity is negated
    negated = reward_function(RewardSpec("perplexity"))(["", ""], texts, [None, None])
    assert negated == pytest.approx((-F.perplexity(texts).values).tolist())
    with pytest.raises(StoryevalError, match="no better direction"):
        reward_function(RewardSpec("sentence_length"))
    with pytest.raises(StoryevalError, match="judge:RUBRIC:CRITERION"):
        reward_function(RewardSpec("judge:karpinska"))
    assert RewardSpec("bertscore_f", {"layer": 4}).describe() == "bertscore_f{layer=4}"


def test_a_seeded_run_raises_the_reward_on_its_prompts(prompts: list[Any], tmp_path: Path) -> None:
    settings = RewardTraining(steps=4, max_new_tokens=16, learning_rate=5e-4, seed=0)
    result = train_reward(
        prompts[:2], tmp_path / "ppl", reward=RewardSpec("perplexity"), settings=settings
    )
    # perplexity under the base model, negated: the policy learns likelier continuations
    assert result.reward_after > result.reward_before + 5.0, (
        result.reward_before,
        result.reward_after,
    )
    meta = json.loads((tmp_path / "ppl" / "storyeval.json").read_text())
    assert meta["kind"] == "reward" and meta["training"]["reward_after"] == result.reward_after
    fields = result.signature.fields
    assert fields["reward"] == "perplexity" and fields["algorithm"] == "grpo"
    assert str(fields["base"]).startswith("SmolLM2-135M-Instruct")
    assert (tmp_path / "ppl" / "config.json").is_file()  # a Hugging Face checkpoint


def test_cli_reward_mle_and_generation_with_the_trained_model(
    run_cli: Any, examples_dir: Path, tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """The commands' plumbing; the MLE baseline on a two-layer model of SmolLM2's
    architecture (the rewarded model generates, so it is the real one)."""
    prompts = tmp_path / "prompts.jsonl"
    rows = [json.loads(line) for line in (examples_dir / "human.jsonl").open()][:4]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code, out, err = run_cli(
        "train", "reward", "--prompts", str(prompts), "-o", str(tmp_path / "sms"), "--metric", "sms",
        "--steps", "1", "--max-new-tokens", "12", "--algorithm", "rloo",
    )  # fmt: skip
    assert code == 0, out + err
    assert "mean reward (sms) on the training prompts:" in out and "|reward:sms|" in out
    code, out, err = run_cli(
        "train", "mle", "--prompts", str(prompts), "-o", str(tmp_path / "mle"), "--steps", "1",
        "--model", str(tiny_models["lm"]),
    )  # fmt: skip
    assert code == 0, out + err
    assert "signature: mle|" in out and "mle_steps:1" in out and "reward:" not in out
    code, out, err = run_cli(
        "generate", str(prompts), "--model", str(tmp_path / "sms"), "--limit", "1", "--max-new-tokens", "30",
        "-o", str(tmp_path / "g.jsonl"), "--no-progress",
    )  # fmt: skip
    assert code == 0, out + err
    story = json.loads((tmp_path / "g.jsonl").read_text().splitlines()[0])
    assert story["signature"].startswith("generate|model:sms@")
    code, out, err = run_cli(
        "train", "reward", "--prompts", str(prompts), "-o", str(tmp_path / "x"), "--batch-size", "3"
    )
    assert code == 2 and "multiple of num_generations" in err


def test_mle_keeps_the_checkpoint_of_lowest_validation_cross_entropy(
    run_cli: Any, examples_dir: Path, tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """Clark (2021), Appendix B: the MLE model is chosen by validation cross-entropy (the
    selection's mechanics, on a two-layer model of SmolLM2's architecture)."""
    rows = [json.loads(line) for line in (examples_dir / "human.jsonl").open()]
    train, valid = tmp_path / "train.jsonl", tmp_path / "valid.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    valid.write_text("".join(json.dumps(r) + "\n" for r in rows[4:6]))
    code, out, err = run_cli(
        "train", "mle", "--prompts", str(train), "-o", str(tmp_path / "mle"), "--steps", "4",
        "--lr", "5e-3", "--validation", str(valid), "--eval-every", "2",
        "--model", str(tiny_models["lm"]),
    )  # fmt: skip
    assert code == 0, out + err
    meta = json.loads((tmp_path / "mle" / "storyeval.json").read_text())["training"]
    steps = [step for step, _ in meta["validation_loss"]]
    assert steps == [2, 4]
    best_step, best_loss = min(meta["validation_loss"], key=lambda sl: sl[1])
    assert meta["best_step"] == best_step and meta["best_validation_loss"] == best_loss
    assert f"kept the checkpoint of step {best_step}" in out and "|select:val-ce/2|" in out


def test_self_critical_training_keeps_the_best_validation_checkpoint(
    prompts: list[Any], tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """scst: the greedy decode is the baseline, a mixed loss, and the kept weights are those
    with the best greedy validation reward (step 0 counts); the mechanics, on a two-layer
    model of SmolLM2's architecture."""
    from storyeval.tuning.reward import _private_copy
    from storyeval.tuning.scst import ScstSettings, scst, validation_reward

    lm = _private_copy(str(tiny_models["lm"]), "cpu")
    settings = ScstSettings(steps=2, batch_size=2, max_new_tokens=8, learning_rate=5e-4,
                            gamma_start=0.5, eval_every=1, seed=1)  # fmt: skip
    score = reward_function(RewardSpec("perplexity"))
    run = scst(lm, prompts[:2], prompts[2:4], score, settings)
    assert [h["step"] for h in run.history] == [1, 2] and len(run.validation) == 3
    assert [round(h["gamma"], 2) for h in run.history] == [0.5, 1.0]
    best_step, best = max(run.validation, key=lambda sv: sv[1])
    assert run.best_step == best_step
    assert validation_reward(lm, prompts[2:4], score, settings) == pytest.approx(best, rel=1e-4)
    result = train_reward(
        prompts[:3], tmp_path / "scst", reward=RewardSpec("perplexity"), model=str(tiny_models["lm"]),
        settings=RewardTraining(algorithm="scst", steps=1, batch_size=2, max_new_tokens=8,
                                learning_rate=5e-4, eval_every=1),
    )  # fmt: skip
    assert result.validation_before is not None and result.validation_after is not None
    assert result.best_step in (0, 1)
    fields = result.signature.fields
    assert fields["algorithm"] == "scst" and fields["gamma_start"] == 0.97
    assert "num_generations" not in fields and "validation" in fields
    with pytest.raises(ValueError, match="gamma_start"):
        RewardTraining(algorithm="scst", gamma_start=1.5)


def test_the_mle_term_is_the_thesis_sum_by_default(causal_lm: Any) -> None:
    """Clark (2021, Eqs. 5.6-5.8): both terms are sums over the sequence, so ``sum`` (the
    default) is the mean's NLL times the reference's tokens."""
    from storyeval.tuning.reward import RewardTraining
    from storyeval.tuning.scst import _mle_loss

    context, reference = ["The ship left the harbour."], ["It sailed north for three days."]
    tokens = len(causal_lm.tokenizer(" " + reference[0], add_special_tokens=False)["input_ids"])
    mean = float(_mle_loss(causal_lm, context, reference, "mean"))
    total = float(_mle_loss(causal_lm, context, reference, "sum"))
    assert total == pytest.approx(mean * tokens, rel=1e-5) and tokens > 3
    assert RewardTraining(algorithm="scst").scst().mle_form == "sum"
    assert RewardTraining(algorithm="scst").signature_fields()["mle_form"] == "sum"
    with pytest.raises(ValueError, match="mle_form"):
        RewardTraining(algorithm="scst", mle_form="max")
