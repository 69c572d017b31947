"""A metric as a training reward (Clark 2021, chapter 5): fine-tune a causal LM with
reinforcement learning against any registered storyeval metric or an LLM judge's score.

The policy-gradient loop is TRL's (:class:`trl.GRPOTrainer` or :class:`trl.RLOOTrainer`):
for each prompt it samples ``num_generations`` continuations, scores them with the reward in
one batch through :func:`storyeval.metrics.function.call_metric` (or a judge), and moves the model
towards the continuations scored above their group's mean. ``algorithm="scst"`` is the
thesis' own: self-critical REINFORCE with the greedy decode's reward as the baseline and a mixed
loss with maximum likelihood, keeping the weights with the best validation reward
(:mod:`storyeval.tuning.scst`). A metric where lower is better
(perplexity) is negated. ``mle_steps`` first fine-tunes on the references by maximum
likelihood (TRL's :class:`trl.SFTTrainer`), as the thesis' models were trained with MLE
before the metric reward; :func:`train_mle` alone is the thesis' baseline.

The model directory is a Hugging Face checkpoint (``storyeval generate --model DIR`` and any
``from_pretrained`` load it) with ``storyeval.json``: the signature names the base model,
the reward (metric and options), the algorithm and every setting, and the reward on the
training prompts before and after training (seeded samples) is recorded.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice
from storyeval.corpus import Story

ALGORITHMS = ("grpo", "rloo", "scst")
#: Settings that only one kind of algorithm reads (left out of the other's signature).
_SCST_ONLY = ("gamma_start", "gamma_end", "eval_every", "mle_form")
_GROUP_ONLY = ("num_generations", "beta")


class MissingTrainingExtra(StoryevalError, ImportError):
    """TRL or datasets is not installed."""


def require_trl() -> None:
    """Fail with the extra to install when TRL is missing.

    Raises
    ------
    MissingTrainingExtra
        Naming ``storyeval[rl]``.
    """
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        raise MissingTrainingExtra(
            f"training with a reward needs TRL: pip install 'storyeval[rl]' ({exc.name} is missing)"
        ) from None


@dataclass(frozen=True)
class RewardSpec:
    """What the reward is: a registered metric with its options, or a judge's criterion
    (``judge:RUBRIC:CRITERION``) with the judge model."""

    name: str
    options: Mapping[str, Any] = field(default_factory=dict)
    judge_model: str | None = None

    @property
    def is_judge(self) -> bool:
        """Whether the reward is an LLM judge's score."""
        return self.name.startswith("judge:")

    def describe(self) -> str:
        """The reward in the signature: ``sms``, ``bertscore_f{layer=4}``, ``judge:...``."""
        options = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
        model = f"@{self.judge_model}" if self.is_judge and self.judge_model else ""
        return f"{self.name}{model}" + (f"{{{options}}}" if options else "")


def reward_function(
    spec: RewardSpec,
) -> Callable[[Sequence[str], Sequence[str], Sequence[str | None]], list[float]]:
    """``reward(prompts, completions, references) -> values`` (higher is better; NaN, an
    undefined value, becomes the batch's lowest reward).

    Raises
    ------
    StoryevalError
        For an unknown metric, one with no direction, or a malformed judge reward.
    """
    if spec.is_judge:
        return _judge_reward(spec)
    from storyeval.metrics.registry import get_metric

    metric = get_metric(spec.name)
    if metric.higher_is_better is None:
        raise StoryevalError(f"{spec.name} has no better direction: it cannot be a reward")
    sign = 1.0 if metric.higher_is_better else -1.0

    def reward(
        prompts: Sequence[str], completions: Sequence[str], references: Sequence[str | None]
    ) -> list[float]:
        from storyeval.metrics.function import call_metric

        refs = [r or "" for r in references] if metric.needs_reference else None
        result = call_metric(
            spec.name, list(completions), refs, prompts=list(prompts), **spec.options
        )
        return _finite([sign * float(v) for v in result.values])

    return reward


def _finite(values: list[float]) -> list[float]:
    finite = [v for v in values if not math.isnan(v)]
    floor = min(finite) if finite else 0.0
    return [floor if math.isnan(v) else v for v in values]


def _judge_reward(
    spec: RewardSpec,
) -> Callable[[Sequence[str], Sequence[str], Sequence[str | None]], list[float]]:
    from storyeval.judge import load_rubric
    from storyeval.judge.backends import BackendSpec
    from storyeval.judge.core import JudgeSettings, judge_stories

    parts = spec.name.split(":")
    if len(parts) != 3:
        raise StoryevalError(f"a judge reward is judge:RUBRIC:CRITERION; got {spec.name!r}")
    rubric = load_rubric(parts[1])
    criterion = parts[2]
    if criterion not in [c.name for c in rubric.criteria]:
        names = ", ".join(c.name for c in rubric.criteria)
        raise StoryevalError(f"rubric {parts[1]} has no criterion {criterion!r} ({names})")
    backends = BackendSpec(models=(spec.judge_model,)).build()

    def reward(
        prompts: Sequence[str], completions: Sequence[str], references: Sequence[str | None]
    ) -> list[float]:
        stories = [
            Story(f"r{i}", p, c, system="policy")
            for i, (p, c) in enumerate(zip(prompts, completions, strict=True))
        ]
        run = judge_stories(stories, rubric, backends, settings=JudgeSettings())
        values = {j.item_id: j.value for j in run.judgments if j.criterion == criterion}
        return _finite([float(values.get(s.id, math.nan)) for s in stories])

    return reward


@dataclass(frozen=True)
class RewardTraining:
    """The settings of a reward run (all in the signature)."""

    algorithm: str = "grpo"
    steps: int = 20
    batch_size: int = 4
    num_generations: int = 4
    max_new_tokens: int = 48
    learning_rate: float = 2e-5
    beta: float = 0.0
    temperature: float = 1.0
    top_p: float = 1.0
    mle_steps: int = 0
    mle_learning_rate: float = 5e-5
    gamma_start: float = 0.97
    gamma_end: float = 1.0
    eval_every: int = 5
    #: scst's MLE term: ``sum`` of the reference's token NLLs (Clark 2021, Eqs. 5.6-5.8: both
    #: terms are sums over the sequence) or their ``mean`` (about 1/length of the thesis')
    mle_form: str = "sum"
    seed: int = 0

    def __post_init__(self) -> None:
        check_choice(self.algorithm, ALGORITHMS, "algorithm")
        for name in ("steps", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.algorithm == "scst":
            if not 0 <= self.gamma_start <= 1 or not 0 <= self.gamma_end <= 1:
                raise ValueError("gamma_start and gamma_end must be in [0, 1]")
            if self.eval_every < 1:
                raise ValueError("eval_every must be at least 1")
            if self.mle_form not in ("sum", "mean"):
                raise ValueError(f"mle_form must be sum or mean, got {self.mle_form!r}")
            return
        if self.num_generations < 2:
            raise ValueError("num_generations must be at least 2 (rewards are compared in a group)")
        if self.batch_size % self.num_generations:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of num_generations "
                f"({self.num_generations})"
            )

    def signature_fields(self) -> dict[str, Any]:
        """The settings the algorithm reads (for the signature)."""
        skip = _GROUP_ONLY if self.algorithm == "scst" else _SCST_ONLY
        return {k: v for k, v in asdict(self).items() if k not in skip}

    def scst(self) -> Any:
        """The self-critical loop's settings."""
        from storyeval.tuning.scst import ScstSettings

        return ScstSettings(
            steps=self.steps,
            batch_size=self.batch_size,
            max_new_tokens=self.max_new_tokens,
            learning_rate=self.learning_rate,
            temperature=self.temperature,
            top_p=self.top_p,
            gamma_start=self.gamma_start,
            gamma_end=self.gamma_end,
            eval_every=self.eval_every,
            seed=self.seed,
            mle_form=self.mle_form,
        )


def _check_prompts(prompts: Sequence[Story], spec: RewardSpec) -> None:
    if len(prompts) < 2:
        raise StoryevalError(f"reward training needs at least 2 prompts; got {len(prompts)}")
    if spec.is_judge:
        return
    from storyeval.metrics.registry import get_metric

    if get_metric(spec.name).needs_reference:
        lacking = [p.id for p in prompts if not p.references]
        if lacking:
            raise StoryevalError(
                f"{spec.name} needs a reference: {len(lacking)} prompt(s) have none "
                f"(first: {lacking[0]}); give `reference` (or `story`) in the prompts file"
            )


def mean_reward(
    lm: Any,
    prompts: Sequence[Story],
    reward: Callable[[Sequence[str], Sequence[str], Sequence[str | None]], list[float]],
    *,
    max_new_tokens: int,
    samples: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
) -> tuple[float, list[str]]:
    """The mean reward of ``samples`` seeded continuations of each prompt (the same seed
    before and after training, so the two are compared on the same random draws), and the
    texts."""
    from storyeval.generate import DecodingConfig
    from storyeval.generate.core import generate_raw, seeded_generator

    decoding = DecodingConfig.from_options(temperature=temperature, max_new_tokens=max_new_tokens)
    contexts = [p.prompt for p in prompts for _ in range(samples)]
    texts = generate_raw(lm, contexts, decoding, separator=None, generator=seeded_generator(seed))
    references = [_first_reference(p) for p in prompts for _ in range(samples)]
    values = reward(contexts, texts, references)
    return float(sum(values) / len(values)), texts


def _first_reference(story: Story) -> str | None:
    refs = story.references
    return refs[0] if refs else None


def _dataset(prompts: Sequence[Story]) -> Any:
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": p.prompt, "reference": _first_reference(p) or ""} for p in prompts]
    )


def _pairs_dataset(prompts: Sequence[Story], what: str) -> Any:
    from datasets import Dataset

    pairs = [p for p in prompts if p.references]
    if not pairs:
        raise StoryevalError(f"maximum-likelihood training needs references in the {what}")
    return Dataset.from_list(
        [{"prompt": p.prompt, "completion": " " + (_first_reference(p) or "")} for p in pairs]
    )


def _selection_settings(eval_every: int | None) -> dict[str, Any]:
    """Evaluate and save every ``eval_every`` steps and keep the checkpoint of the lowest
    validation cross-entropy (Clark 2021, Appendix B: "We select the MLE models with the lowest
    cross-entropy loss ... on a sample of validation data")."""
    if eval_every is None:
        return {"save_strategy": "no"}
    return {
        "eval_strategy": "steps",
        "eval_steps": eval_every,
        "save_strategy": "steps",
        "save_steps": eval_every,
        "save_total_limit": 2,
        "load_best_model_at_end": True,
        "metric_for_best_model": "eval_loss",
        "greater_is_better": False,
        "per_device_eval_batch_size": 4,
    }


def _sft(
    lm: Any,
    prompts: Sequence[Story],
    steps: int,
    learning_rate: float,
    seed: int,
    work: Path,
    *,
    validation: Sequence[Story] | None = None,
    eval_every: int | None = None,
) -> dict[str, Any]:
    """Maximum-likelihood fine-tuning on (prompt, reference) pairs with TRL's SFTTrainer
    (the loss on the reference only). With ``validation``, the weights kept are those of the
    evaluation (every ``eval_every`` steps) with the lowest validation cross-entropy; returns
    the validation losses by step and the step kept."""
    from trl import SFTConfig, SFTTrainer

    data = _pairs_dataset(prompts, "prompts file")
    evaluation = _pairs_dataset(validation, "validation file") if validation else None
    every = (eval_every or max(1, steps // 5)) if evaluation is not None else None
    config = SFTConfig(
        output_dir=str(work / "sft"),
        max_steps=steps,
        per_device_train_batch_size=min(4, len(data)),
        learning_rate=learning_rate,
        use_cpu=not _on_gpu(lm),
        bf16=False,  # TRL turns bfloat16 on for GPUs by default: float32, as on the CPU
        fp16=False,
        report_to=[],
        logging_steps=1,
        seed=seed,
        disable_tqdm=True,
        **_selection_settings(every),
    )
    trainer = SFTTrainer(
        model=lm.model,
        args=config,
        train_dataset=data,
        eval_dataset=evaluation,
        processing_class=lm.tokenizer,
    )
    trainer.train()
    if evaluation is None:
        return {}
    losses = [
        (int(entry["step"]), float(entry["eval_loss"]))
        for entry in trainer.state.log_history
        if "eval_loss" in entry
    ]
    best = min(losses, key=lambda sl: sl[1]) if losses else None
    return {
        "validation_loss": losses,
        "best_step": best[0] if best else None,
        "best_validation_loss": best[1] if best else None,
        "eval_every": every,
    }


@contextlib.contextmanager
def _quiet_trl() -> Iterator[None]:
    """TRL still calls transformers' deprecated gradient-checkpointing names: a warning per
    call that the user cannot act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*checkpointing.*deprecated", category=FutureWarning
        )
        yield


def _private_copy(model: str | None, device: str) -> Any:
    """A trainable copy of the causal LM (the loaded one is shared by every metric and
    generator of the process and must not change)."""
    import copy
    import dataclasses

    from storyeval.models import load_causal_lm
    from storyeval.models.devices import place

    shared = load_causal_lm(model, option="--model")
    return place(dataclasses.replace(shared, model=copy.deepcopy(shared.model)), device)


def _on_gpu(lm: Any) -> bool:
    from storyeval.models.devices import model_device

    return bool(model_device(lm).type != "cpu")


@dataclass
class RewardResult:
    """What a run did: the before/after mean rewards on the training prompts (and on the
    validation prompts), the trainer's log, the signature of the saved model, and for
    ``scst`` the step whose weights were kept."""

    signature: Signature
    reward_before: float
    reward_after: float
    history: list[dict[str, Any]]
    seconds: float
    validation_before: float | None = None
    validation_after: float | None = None
    best_step: int | None = None


def _policy_trainer(
    lm: Any, prompts: Sequence[Story], reward: Any, settings: RewardTraining, work: Path
) -> Any:
    from trl import GRPOConfig, GRPOTrainer, RLOOConfig, RLOOTrainer

    def trl_reward(
        prompts: list[str], completions: list[str], reference: list[str], **_: Any
    ) -> list[float | None]:
        return list(reward(prompts, completions, [r or None for r in reference]))

    common: dict[str, Any] = {
        "output_dir": str(work / "rl"),
        "max_steps": settings.steps,
        "per_device_train_batch_size": settings.batch_size,
        "num_generations": settings.num_generations,
        "max_completion_length": settings.max_new_tokens,
        "learning_rate": settings.learning_rate,
        "beta": settings.beta,
        "temperature": settings.temperature,
        "top_p": settings.top_p,
        "use_cpu": not _on_gpu(lm),
        "bf16": False,  # TRL turns bfloat16 on for GPUs by default: float32, as on the CPU
        "fp16": False,
        "report_to": [],
        "save_strategy": "no",
        "logging_steps": 1,
        "seed": settings.seed,
        "disable_tqdm": True,
    }
    data = _dataset(prompts)
    if settings.algorithm == "rloo":
        return RLOOTrainer(
            model=lm.model,
            reward_funcs=trl_reward,
            args=RLOOConfig(**common),
            train_dataset=data,
            processing_class=lm.tokenizer,
        )
    return GRPOTrainer(
        model=lm.model,
        reward_funcs=trl_reward,
        args=GRPOConfig(**common),
        train_dataset=data,
        processing_class=lm.tokenizer,
    )


def _signature(
    kind: str,
    lm: Any,
    spec: RewardSpec | None,
    settings: Mapping[str, Any],
    prompts: Sequence[Story],
) -> Signature:
    import torch
    import trl

    from storyeval.learn.data import corpus_hash

    return Signature(
        kind,
        {
            "base": lm.identity,
            **({"reward": spec.describe()} if spec is not None else {}),
            **settings,
            "prompts": corpus_hash(prompts),
            "n_prompts": len(prompts),
            "trl": trl.__version__,
            "torch": torch.__version__,
        },
    )


def _save(lm: Any, output: Path, metadata: dict[str, Any]) -> None:
    from storyeval.base.io import atomic_directory
    from storyeval.learn.trainer import METADATA_FILE

    with atomic_directory(output, f"{metadata['kind']} model") as tmp:
        lm.model.save_pretrained(tmp)
        lm.tokenizer.save_pretrained(tmp)
        (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", encoding="utf-8")


def train_reward(
    prompts: Sequence[Story],
    output: str | Path,
    *,
    reward: RewardSpec,
    model: str | None = None,
    settings: RewardTraining | None = None,
    device: str = "cpu",
    validation: Sequence[Story] | None = None,
) -> RewardResult:
    """Fine-tune ``model`` (the offline SmolLM2 by default) against ``reward`` on the prompts
    (see the module docstring) and save it to ``output``.

    ``validation`` prompts are scored before and after too; ``scst`` keeps the weights with
    the best validation reward and, without validation prompts, holds out a fifth of the
    prompts (seeded) for it.

    Raises
    ------
    MissingTrainingExtra, StoryevalError
    """
    import functools
    import tempfile

    import torch

    settings = settings or RewardTraining()
    if settings.algorithm != "scst" or settings.mle_steps:
        require_trl()
    _check_prompts(prompts, reward)
    prompts, validation = _validation_split(prompts, validation, settings)
    torch.manual_seed(settings.seed)
    lm = _private_copy(model, device)
    score = reward_function(reward)
    fields = settings.signature_fields()
    if validation:
        from storyeval.learn.data import corpus_hash

        fields["validation"] = corpus_hash(validation)
    signature = _signature("reward", lm, reward, fields, prompts)
    started = time.perf_counter()
    measure = functools.partial(
        mean_reward,
        reward=score,
        max_new_tokens=settings.max_new_tokens,
        temperature=settings.temperature,
        seed=settings.seed,
    )
    before = measure(lm, prompts)[0]
    validation_before = measure(lm, validation)[0] if validation else None
    with tempfile.TemporaryDirectory(prefix="storyeval-rl-") as work:
        history, best_step = _train(lm, prompts, validation, score, settings, Path(work))
    lm.model.eval()
    result = RewardResult(
        signature,
        before,
        measure(lm, prompts)[0],
        history,
        0.0,
        validation_before,
        measure(lm, validation)[0] if validation else None,
        best_step,
    )
    result.seconds = time.perf_counter() - started
    _save(lm, Path(output), {"kind": "reward", "signature": signature.to_dict(), "training": {
        "reward_before": result.reward_before, "reward_after": result.reward_after,
        "validation_before": result.validation_before, "validation_after": result.validation_after,
        "best_step": best_step, "seconds": result.seconds, "history": history}})  # fmt: skip
    return result


def _validation_split(
    prompts: Sequence[Story], validation: Sequence[Story] | None, settings: RewardTraining
) -> tuple[list[Story], list[Story]]:
    """The training and validation prompts (``scst`` without validation prompts: a seeded
    fifth of the prompts held out)."""
    import random

    if validation or settings.algorithm != "scst":
        return list(prompts), list(validation or [])
    order = list(prompts)
    random.Random(settings.seed).shuffle(order)
    held = max(1, len(order) // 5)
    if len(order) - held < 1:
        raise StoryevalError("scst needs at least 2 prompts (one held out for validation)")
    return order[held:], order[:held]


def _train(
    lm: Any,
    prompts: Sequence[Story],
    validation: Sequence[Story],
    score: Any,
    settings: RewardTraining,
    work: Path,
) -> tuple[list[dict[str, Any]], int | None]:
    """The MLE warm-up, then the policy-gradient loop; the trainer's log and (scst) the kept
    step."""
    if settings.algorithm == "scst":
        from storyeval.tuning.scst import scst

        if settings.mle_steps:
            with _quiet_trl():
                _sft(
                    lm, prompts, settings.mle_steps, settings.mle_learning_rate, settings.seed, work
                )
        run = scst(lm, prompts, validation, score, settings.scst())
        history = run.history + [{"step": s, "validation_reward": v} for s, v in run.validation]
        return history, run.best_step
    from transformers import PrinterCallback

    with _quiet_trl():
        if settings.mle_steps:
            _sft(lm, prompts, settings.mle_steps, settings.mle_learning_rate, settings.seed, work)
        trainer = _policy_trainer(lm, prompts, score, settings, work)
        trainer.remove_callback(PrinterCallback)  # storyeval prints its own summary
        trainer.train()
    return [dict(h) for h in trainer.state.log_history], None


def train_mle(
    prompts: Sequence[Story],
    output: str | Path,
    *,
    model: str | None = None,
    steps: int = 20,
    learning_rate: float = 5e-5,
    seed: int = 0,
    device: str = "cpu",
    validation: Sequence[Story] | None = None,
    eval_every: int | None = None,
) -> Signature:
    """The thesis' baseline: the same model fine-tuned by maximum likelihood on the
    references only; saved like :func:`train_reward`'s models. With ``validation`` (prompts
    with references), the checkpoint kept is the one with the lowest validation
    cross-entropy, evaluated every ``eval_every`` steps (a fifth of the steps by default), as
    the thesis chose its MLE models; the losses and the step kept are in the model's
    ``storyeval.json``.

    Raises
    ------
    MissingTrainingExtra, StoryevalError
    """
    import tempfile

    import torch

    require_trl()
    if len(prompts) < 2:
        raise StoryevalError(f"training needs at least 2 prompts; got {len(prompts)}")
    torch.manual_seed(seed)
    lm = _private_copy(model, device)
    settings: dict[str, Any] = {"mle_steps": steps, "mle_learning_rate": learning_rate}
    if validation:
        settings["select"] = f"val-ce/{eval_every or max(1, steps // 5)}"
    settings["seed"] = seed
    signature = _signature("mle", lm, None, settings, prompts)
    with tempfile.TemporaryDirectory(prefix="storyeval-mle-") as work, _quiet_trl():
        training = _sft(
            lm,
            prompts,
            steps,
            learning_rate,
            seed,
            Path(work),
            validation=validation,
            eval_every=eval_every,
        )
    metadata = {"kind": "mle", "signature": signature.to_dict(), "training": training}
    _save(lm, Path(output), metadata)
    return signature
