"""Self-critical sequence training (Rennie et al. 2017), as Clark's thesis trains with a metric
reward (section 5.6, appendix B): for each prompt one continuation is sampled and one decoded
greedily; the sample's advantage is its reward minus the greedy decode's, and the loss mixes
the policy gradient with maximum likelihood on the reference,
``gamma * L_RL + (1 - gamma) * L_MLE``, with ``gamma`` rising linearly from ``gamma_start``
to ``gamma_end`` over the run (our reading of "gamma rising from 0.97"). Every ``eval_every``
steps the greedy decodes of the validation prompts are scored, and the weights with the best
validation reward are kept.

A plain PyTorch loop over any causal LM (TRL has no greedy baseline), on the model's device.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from storyeval.corpus import Story

Reward = Callable[[Sequence[str], Sequence[str], Sequence[str | None]], list[float]]


@dataclass(frozen=True)
class ScstSettings:
    """The loop's settings (in the reward run's signature)."""

    steps: int = 20
    batch_size: int = 4
    max_new_tokens: int = 48
    learning_rate: float = 2e-5
    temperature: float = 1.0
    top_p: float = 1.0
    gamma_start: float = 0.97
    gamma_end: float = 1.0
    eval_every: int = 5
    seed: int = 0
    mle_form: str = "sum"

    def gamma(self, step: int) -> float:
        """The policy-gradient weight at ``step`` (0-based), rising linearly.

        >>> s = ScstSettings(steps=3, gamma_start=0.9, gamma_end=1.0)
        >>> [round(s.gamma(k), 3) for k in range(3)]
        [0.9, 0.95, 1.0]
        """
        if self.steps <= 1:
            return self.gamma_end
        return self.gamma_start + (self.gamma_end - self.gamma_start) * step / (self.steps - 1)


@dataclass
class ScstRun:
    """What the loop did: per step the rewards and losses, the validation rewards, and the
    step whose weights were kept."""

    history: list[dict[str, Any]] = field(default_factory=list)
    validation: list[tuple[int, float]] = field(default_factory=list)
    best_step: int = 0


def _references(stories: Sequence[Story]) -> list[str | None]:
    return [s.references[0] if s.references else None for s in stories]


def _decode(lm: Any, contexts: Sequence[str], settings: ScstSettings, *, greedy: bool) -> Any:
    """Continuations of ``contexts`` (left-padded batch): ``(ids, texts, prompt_width)``."""
    import torch

    from storyeval.models.devices import model_device

    tokenizer = lm.tokenizer
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    inputs = tokenizer(list(contexts), return_tensors="pt", padding=True, padding_side="left").to(
        model_device(lm)
    )
    options: dict[str, Any] = {"do_sample": not greedy, "max_new_tokens": settings.max_new_tokens}
    if not greedy:
        options |= {"temperature": settings.temperature, "top_p": settings.top_p}
    with torch.no_grad():
        out = lm.model.generate(**inputs, pad_token_id=pad, **options)
    width = inputs["input_ids"].shape[1]
    texts = tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
    return out, inputs["attention_mask"], texts, width


def _sequence_logprob(lm: Any, ids: Any, prompt_mask: Any, width: int) -> Any:
    """Summed log-probability of each row's generated tokens (after ``width``), padding and
    tokens after the end of the sequence left out."""
    import torch

    tokenizer = lm.tokenizer
    eos = tokenizer.eos_token_id
    generated = ids[:, width:]
    keep = torch.ones_like(generated, dtype=torch.bool)
    if eos is not None:  # tokens after the first end-of-sequence are padding
        ended = (generated == eos).long().cumsum(dim=1)
        keep = (ended == 0) | ((ended == 1) & (generated == eos))
    mask = torch.cat([prompt_mask, keep.long()], dim=1)
    logits = lm.model(input_ids=ids, attention_mask=mask).logits[:, width - 1 : -1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, generated[..., None]).squeeze(-1)
    return (picked * keep).sum(dim=1)


def _mle_loss(
    lm: Any, contexts: Sequence[str], references: Sequence[str | None], form: str = "sum"
) -> Any:
    """The references' NLL after their contexts, averaged over the references (0 when none
    has one): per reference the sum over its tokens (``sum``, the thesis' Eq. 5.6, on the
    scale of the RL term's sequence log-probability) or their mean (``mean``)."""
    import torch

    from storyeval.models.devices import model_device

    pairs = [(c, r) for c, r in zip(contexts, references, strict=True) if r]
    device = model_device(lm)
    if not pairs:
        return torch.zeros((), device=device)
    losses = []
    for context, reference in pairs:
        prompt = lm.tokenizer(context, return_tensors="pt")["input_ids"]
        target = lm.tokenizer(
            " " + reference.strip(), return_tensors="pt", add_special_tokens=False
        )
        ids = torch.cat([prompt, target["input_ids"]], dim=1).to(device)
        labels = ids.clone()
        labels[:, : prompt.shape[1]] = -100
        mean = lm.model(input_ids=ids, labels=labels).loss
        losses.append(mean * target["input_ids"].shape[1] if form == "sum" else mean)
    return torch.stack(losses).mean()


def validation_reward(
    lm: Any, stories: Sequence[Story], reward: Reward, settings: ScstSettings
) -> float:
    """The mean reward of the greedy continuations of ``stories`` (deterministic)."""
    lm.model.eval()
    contexts = [s.prompt for s in stories]
    values: list[float] = []
    for start in range(0, len(contexts), settings.batch_size):
        chunk = contexts[start : start + settings.batch_size]
        _, _, texts, _ = _decode(lm, chunk, settings, greedy=True)
        values += reward(chunk, texts, _references(stories[start : start + settings.batch_size]))
    return float(sum(values) / len(values))


def _step(
    lm: Any, batch: Sequence[Story], reward: Reward, settings: ScstSettings, k: int, optimizer: Any
) -> dict[str, Any]:
    import torch

    contexts = [s.prompt for s in batch]
    references = _references(batch)
    lm.model.eval()
    _, _, greedy_texts, _ = _decode(lm, contexts, settings, greedy=True)
    torch.manual_seed(settings.seed * 1_000_003 + k)
    ids, prompt_mask, sampled_texts, width = _decode(lm, contexts, settings, greedy=False)
    sampled = reward(contexts, sampled_texts, references)
    greedy = reward(contexts, greedy_texts, references)
    lm.model.train()
    advantage = torch.tensor([s - g for s, g in zip(sampled, greedy, strict=True)])
    logprob = _sequence_logprob(lm, ids, prompt_mask, width)
    rl = -(advantage.to(logprob.device) * logprob).mean()
    gamma = settings.gamma(k)
    mle = (
        _mle_loss(lm, contexts, references, settings.mle_form)
        if gamma < 1
        else torch.zeros((), device=rl.device)
    )
    loss = gamma * rl + (1 - gamma) * mle
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return {
        "step": k + 1,
        "reward_sampled": sum(sampled) / len(sampled),
        "reward_greedy": sum(greedy) / len(greedy),
        "loss": float(loss.detach()),
        "gamma": gamma,
    }


def scst(
    lm: Any,
    prompts: Sequence[Story],
    validation: Sequence[Story],
    reward: Reward,
    settings: ScstSettings,
) -> ScstRun:
    """Train ``lm.model`` in place (see the module docstring); the kept weights are those of
    the best validation reward (before training counts as step 0)."""
    import torch

    torch.manual_seed(settings.seed)
    optimizer = torch.optim.AdamW(lm.model.parameters(), lr=settings.learning_rate)
    run = ScstRun()
    best = validation_reward(lm, validation, reward, settings)
    run.validation.append((0, best))
    kept = copy.deepcopy(lm.model.state_dict())
    for k in range(settings.steps):
        start = (k * settings.batch_size) % len(prompts)
        batch = [prompts[(start + i) % len(prompts)] for i in range(settings.batch_size)]
        run.history.append(_step(lm, batch, reward, settings, k, optimizer))
        if (k + 1) % settings.eval_every == 0 or k + 1 == settings.steps:
            value = validation_reward(lm, validation, reward, settings)
            run.validation.append((k + 1, value))
            if value > best:
                best, run.best_step = value, k + 1
                kept = copy.deepcopy(lm.model.state_dict())
    lm.model.load_state_dict(kept)
    lm.model.eval()
    return run
