"""Tension curves: how unpredictable a story's ending still is, sentence by sentence.

After each sentence of a story (the prompt and the sentences so far), a causal LM is asked how
the story ends, as in the "100 endings" idea: ``samples`` endings are sampled and each is
compared with the story's actual ending (its last sentence) by the encoder's cosine
similarity; the **miss rate** is the share of predicted endings less similar than
``threshold``. A story that holds its tension keeps the miss rate high until late; one whose
ending is foreseeable from the start has it low throughout. ``method="likelihood"`` is the
cheaper, deterministic variant: the LM's mean surprisal (negative log-likelihood per token, in
nats) of the actual ending after each prefix.

The table has the columns of :mod:`storyeval.analyses.curves` (``metric`` ``tension`` or
``ending_surprisal``; ``position`` the share of the story read), so ``storyeval curves
--tension`` plots it beside the other curves; :func:`turning_points` finds where a curve
turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from storyeval.analyses.curves import CURVE_COLUMNS
from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.corpus import Story


@dataclass(frozen=True)
class TensionSettings:
    """How endings are predicted and compared (all in the signature)."""

    method: Literal["sample", "likelihood"] = "sample"
    samples: int = 8
    threshold: float = 0.6
    top_p: float = 0.9
    max_new_tokens: int = 40
    seed: int = 0

    def check(self) -> None:
        """Raise ``ValueError`` for impossible settings."""
        if self.method not in ("sample", "likelihood"):
            raise ValueError(f"method must be sample or likelihood; got {self.method!r}")
        if self.samples < 1 or self.max_new_tokens < 1 or not 0 < self.top_p <= 1:
            raise ValueError("samples and max_new_tokens must be >= 1 and top_p in (0, 1]")
        if not -1 <= self.threshold <= 1:
            raise ValueError(
                f"threshold must be a cosine similarity in [-1, 1]; got {self.threshold}"
            )


def _prefixes(story: Story) -> tuple[list[str], str] | None:
    """The texts read before each prediction (prompt, then one more sentence each time) and
    the ending (the last sentence); None for a story of fewer than three sentences."""
    from storyeval.text import split_sentences

    sentences = split_sentences(story.story)
    if len(sentences) < 3:
        return None
    head = story.prompt.strip()
    contexts = [" ".join([head, *sentences[:k]]).strip() for k in range(1, len(sentences))]
    return contexts, sentences[-1]


def _first_sentence(text: str) -> str:
    from storyeval.text import split_sentences

    found = split_sentences(text.strip())
    return found[0] if found else text.strip()


def _sampled_miss_rates(
    lm: Any, encoder: Any, contexts: Sequence[str], ending: str, settings: TensionSettings
) -> list[float]:
    """Per context: the share of sampled endings less similar to ``ending`` than the
    threshold."""
    import torch

    from storyeval.models.devices import model_device

    tokenizer, model = lm.tokenizer, lm.model
    device = model_device(lm)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    target = encoder.text_embeddings([ending])[0]
    target = target / max(float(np.linalg.norm(target)), 1e-12)
    rates = []
    for k, context in enumerate(contexts):
        ids = tokenizer(context, return_tensors="pt").to(device)
        torch.manual_seed(settings.seed * 100_003 + k)
        with torch.inference_mode():
            out = model.generate(
                **ids,
                do_sample=True,
                top_p=settings.top_p,
                max_new_tokens=settings.max_new_tokens,
                num_return_sequences=settings.samples,
                pad_token_id=pad,
            )
        new = out[:, ids["input_ids"].shape[1] :]
        endings = [
            _first_sentence(t) for t in tokenizer.batch_decode(new, skip_special_tokens=True)
        ]
        vectors = encoder.text_embeddings([e or "." for e in endings])
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        rates.append(float(((vectors @ target) < settings.threshold).mean()))
    return rates


def _surprisals(lm: Any, contexts: Sequence[str], ending: str) -> list[float]:
    """Per context: the mean negative log-likelihood (nats per token) of ``ending`` after it."""
    from storyeval.models.nll import continuation_nll, start_token

    first = start_token(lm)
    target = lm.tokenizer(" " + ending, add_special_tokens=False)["input_ids"]
    groups = []
    for context in contexts:
        ids = lm.tokenizer(context, add_special_tokens=False)["input_ids"]
        groups.append(([first, *ids] if first is not None else ids, [target]))
    totals = continuation_nll(lm, groups)
    return [float(total[0]) / max(1, len(target)) for total in totals]


def tension_curves(
    stories: Sequence[Story],
    *,
    lm: Any = None,
    encoder: Any = None,
    settings: TensionSettings | None = None,
) -> tuple[pd.DataFrame, Signature]:
    """The tension curve of every story of three or more sentences (see the module
    docstring): a tidy table with the curves' columns, and the signature.

    Parameters
    ----------
    lm : loaded causal LM, optional
        Predicts the endings (default: the offline SmolLM2).
    encoder : EncoderCache-like, optional
        Compares them (``text_embeddings``; default: the offline MiniLM's cache).
    """
    from storyeval.models import load_causal_lm

    settings = settings or TensionSettings()
    settings.check()
    lm = lm or load_causal_lm()
    if encoder is None and settings.method == "sample":
        from storyeval.metrics.context import ScoringContext

        encoder = ScoringContext().cache(None)
    rows = []
    for story in stories:
        found = _prefixes(story)
        if found is None:
            continue
        contexts, ending = found
        values = (
            _sampled_miss_rates(lm, encoder, contexts, ending, settings)
            if settings.method == "sample"
            else _surprisals(lm, contexts, ending)
        )
        rows += _curve_rows(story, values, settings.method)
    if not rows:
        raise StoryevalError("no story has three or more sentences: a tension curve needs them")
    fields: dict[str, Any] = {
        "lm": lm.identity,
        "method": settings.method,
        "ending": "last-sentence",
    }
    if settings.method == "sample":
        fields |= {"encoder": encoder.identity, "samples": settings.samples}
        fields |= {"threshold": settings.threshold, "top_p": settings.top_p}
        fields |= {"max_new_tokens": settings.max_new_tokens, "seed": settings.seed}
    name = "tension" if settings.method == "sample" else "ending_surprisal"
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS)), Signature(name, fields)


def _curve_rows(story: Story, values: Sequence[float], method: str) -> list[dict[str, Any]]:
    total = len(values) + 1  # sentences: the predictions follow sentences 1..n-1
    metric = "tension" if method == "sample" else "ending_surprisal"
    return [
        {
            "item_id": story.id,
            "system": story.system,
            "segment": k,
            "title": f"after sentence {k + 1}",
            "start_word": None,
            "end_word": None,
            "position": (k + 1) / total,
            "metric": metric,
            "value": value,
        }
        for k, value in enumerate(values)
    ]


def turning_points(values: Sequence[float], *, min_change: float = 0.1) -> list[tuple[int, str]]:
    """Where a curve turns: ``(index, "peak" | "trough")`` at each local extreme whose rise and
    fall both reach ``min_change`` (plateaus count once, at their start).

    >>> turning_points([0.2, 0.8, 0.7, 0.1, 0.5])
    [(1, 'peak'), (3, 'trough')]
    >>> turning_points([0.5, 0.52, 0.5])
    []
    """
    array = np.asarray(values, dtype=float)
    points: list[tuple[int, str]] = []
    for i in range(1, array.size - 1):
        left, right = array[:i][::-1], array[i + 1 :]
        if array[i] == array[i - 1]:
            continue
        rise = array[i] - left.min() if left.size else 0.0
        fall = array[i] - right.min() if right.size else 0.0
        dip = left.max() - array[i] if left.size else 0.0
        climb = right.max() - array[i] if right.size else 0.0
        if array[i] >= array[i - 1] and array[i] >= array[i + 1] and min(rise, fall) >= min_change:
            points.append((i, "peak"))
        elif (
            array[i] <= array[i - 1] and array[i] <= array[i + 1] and min(dip, climb) >= min_change
        ):
            points.append((i, "trough"))
    return points
