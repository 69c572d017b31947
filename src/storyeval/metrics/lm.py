"""Perplexity of a story under a causal language model.

Token-weighted: a story's perplexity is ``exp(sum of token negative log-likelihoods / number
of tokens)``; a system's corpus perplexity pools the tokens of all its stories
(``corpus_perplexity``), and the mean of story perplexities is reported beside it
(``mean_item_perplexity``): they differ, and papers use both.

By default the story is scored as a continuation of its prompt (the prompt's tokens are
context, not scored), after the model's beginning-of-text token. Texts longer than the
model's context are scored with a sliding window (every token is scored once, with at least
``window - stride`` tokens of left context), never truncated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from storyeval.metrics.cards import MetricCard
from storyeval.metrics.context import ScoringContext
from storyeval.metrics.function import INJECTED, Opt, Prompts, Scores, Texts, check, metric
from storyeval.metrics.registry import CorpusStatistic, MetricOption
from storyeval.models.nll import (
    PRECISIONS,
    encode_many,
    start_token,
    token_nll,
)


def perplexity_stats(
    lm: Any,
    texts: Sequence[str],
    prompts: Sequence[str] | None = None,
    *,
    window: int | None = None,
    stride: int | None = None,
    batch_tokens: int = 2048,
    progress: bool = False,
    precision: str = "float32",
) -> np.ndarray:
    """Per-text sufficient statistics ``[nll_sum, n_tokens]`` (shape ``(n, 2)``) of ``texts``
    scored after the start token and (when given) their prompts.

    >>> from storyeval.models import load_causal_lm
    >>> lm = load_causal_lm()
    >>> stats = perplexity_stats(lm, ["The cat sat on the mat."])
    >>> int(stats[0, 1]) == len(lm.tokenizer("The cat sat on the mat.", add_special_tokens=False)["input_ids"])
    True
    """
    first = start_token(lm)
    cleaned = [p.strip() for p in prompts] if prompts is not None else [""] * len(texts)
    # each text alone, or after a space when it follows its prompt (one batched call each)
    targets = encode_many(
        lm, [(" " if p else "") + t.strip() for p, t in zip(cleaned, texts, strict=True)]
    )
    contexts = encode_many(lm, cleaned)
    items = []
    for prompt_ids, target in zip(contexts, targets, strict=True):
        context = ([first] if first is not None else []) + prompt_ids
        if not context:  # no start token: the first token cannot be scored
            context, target = target[:1], target[1:]
        items.append((context, target))
    nll, count = token_nll(
        lm,
        items,
        window=window,
        stride=stride,
        batch_tokens=batch_tokens,
        progress=progress,
        precision=precision,
    )
    return np.column_stack([nll, count.astype(np.float64)])


def _corpus_perplexity(stats: np.ndarray, options: Mapping[str, Any]) -> float:
    total = stats.sum(axis=0)
    return math.exp(total[0] / total[1]) if total[1] > 0 else math.nan


@dataclass(frozen=True)
class PerplexityScores(Scores):
    """Perplexity of each text (``values``), its summed token NLL and token count
    (``stats``), and the perplexity of all texts as one corpus (``corpus``)."""

    @property
    def corpus(self) -> float:
        """Perplexity of all texts as one corpus: ``exp`` of the mean NLL of their tokens."""
        return float(self.corpus_values.get("corpus_perplexity", math.nan))

    @property
    def nll(self) -> np.ndarray:
        """Summed negative log-likelihood (nats) of each text's tokens."""
        assert self.stats is not None
        return self.stats[:, 0]

    @property
    def tokens(self) -> np.ndarray:
        """Scored tokens of each text."""
        assert self.stats is not None
        return self.stats[:, 1]


_PRECISION_OPTION = MetricOption(
    "precision",
    str,
    None,
    "matrix products in float32, or under bfloat16 autocast (about 2x faster on CPUs with "
    "AMX/AVX-512 BF16; the softmax stays float32); auto: the run's --precision",
    choices=PRECISIONS,
)


@metric(
    "perplexity",
    description="Perplexity of the story under a causal LM (token-weighted, conditioned on the "
    "prompt by default); per system: corpus and mean per-story perplexity",
    families=("lm",),
    model="causal-lm",
    higher_is_better=False,
    value_range=(1.0, None),
    extra_options=[_PRECISION_OPTION],
    corpus=(
        CorpusStatistic(
            "corpus_perplexity",
            _corpus_perplexity,
            "exp of the mean NLL of all the system's tokens",
        ),
    ),
    item_statistic="mean_item_perplexity",
    card=MetricCard(
        measures="Perplexity of the story under a causal language model: `exp` of the mean "
        "negative log-likelihood of its tokens, scored as a continuation of its prompt by "
        "default (`context=prompt`; the prompt's tokens are context only) after the model's "
        "start token. Per system: `corpus_perplexity` (pooling every token of the system) and "
        "`mean_item_perplexity` (the mean of story perplexities); they differ and papers use "
        "both. Texts longer than the model's context are scored with a sliding window "
        "(`window`, `stride`), never truncated.",
        read="Lower = more predictable to the LM. It measures fluency/typicality under one "
        "model, not quality: repetitive, bland text has low perplexity, and sampling with a "
        "low temperature lowers it. Compare only under one model and tokenizer (in the "
        "signature).",
        papers="The source documents report no perplexity of stories. For orientation, "
        "the offline SmolLM2-135M gives about 7 on a fluent sentence and above 2,000 on the "
        "same words shuffled.",
        limits="The offline model is a small 4-bit-quantised instruction model "
        "(dequantised to float32): its perplexities are higher and noisier than a large LM's. "
        "Scoring a system's own generations with the model that generated them favours that "
        "system.",
        refs="Jelinek et al. (1977); Hugging Face, Perplexity of fixed-length models.",
    ),
)
def perplexity(
    texts: Texts,
    prompts: Prompts | None = None,
    *,
    model: Annotated[
        str | None,
        Opt("causal LM: hub name or local directory (default: offline SmolLM2-135M)", model=True),
    ] = None,
    context: Annotated[
        Literal["prompt", "none"], Opt("score the story after its prompt, or alone")
    ] = "prompt",
    window: Annotated[
        int | None, Opt("tokens per window (auto: the model's context length)", minimum=2)
    ] = None,
    stride: Annotated[int | None, Opt("window step (auto: half the window)", minimum=1)] = None,
    batch_tokens: Annotated[
        int, Opt("tokens per forward batch", minimum=16, in_signature=False)
    ] = 2048,
    scoring: ScoringContext = INJECTED,
    device: str | None = None,
    precision: Literal["float32", "bfloat16", "float16"] | None = None,
    progress: bool = False,
) -> PerplexityScores:
    """Perplexity of each text under a causal LM, after its prompt when prompts are given
    (the prompt's tokens are context, not scored); texts longer than the window are scored
    with a sliding window, never truncated.

    Examples
    --------
    >>> result = perplexity(["The cat sat on the mat.", "Mat the on sat cat the."])
    >>> bool(result.values[0] < result.values[1]), result.corpus > 1
    (True, True)
    """
    lm = scoring.causal_lm(model)
    size = window or int(lm.max_length)
    step = stride or max(1, size // 2)
    check(
        step < size, f"perplexity.stride ({step}) must be smaller than perplexity.window ({size})"
    )
    use_prompts = prompts if context == "prompt" and prompts is not None else None
    run_precision = precision or scoring.precision
    stats = perplexity_stats(
        lm,
        list(texts),
        use_prompts,
        window=size,
        stride=step,
        batch_tokens=int(batch_tokens * scoring.batch_scale),  # larger on a roomy GPU
        progress=scoring.progress,
        precision=run_precision,
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(stats[:, 1] > 0, np.exp(stats[:, 0] / np.maximum(stats[:, 1], 1)), np.nan)
    first = start_token(lm)
    start = lm.tokenizer.convert_ids_to_tokens(first) if first is not None else "none"
    long = int(sum(1 for ids in encode_many(lm, list(texts)) if len(ids) > size))
    notes = (
        (f"{long} stories longer than {size} tokens were scored with a sliding window",)
        if long
        else ()
    )
    fields: dict[str, Any] = {}
    if prompts is None:
        fields["context"] = "none"
    fields.update(window=size, stride=step, start=str(start), precision=run_precision)
    return PerplexityScores(
        values, stats, models={"model": lm.identity}, fields=fields, notes=notes
    )
