"""Generating continuations of prompts with a causal LM.

Every generated story carries a signature of the model and every decoding setting, so a run
can be repeated exactly: same inputs, seed and batch size give the same stories on a CPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from storyeval.corpus import Story
from storyeval.signature import Signature
from storyeval.text import split_sentences, truncate

_MAX_ATTEMPTS = 3
_TERMINAL = re.compile(r"[.!?][\"')\]]*$")


@dataclass(frozen=True)
class DecodingConfig:
    """Decoding settings passed to ``model.generate``.

    ``do_sample=False`` is greedy decoding; otherwise ``temperature``, ``top_k`` and
    ``top_p`` shape the sampling distribution (``None`` disables a filter).
    """

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float = 1.0
    max_new_tokens: int = 160

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0; got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be >= 1; got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1]; got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0; got {self.repetition_penalty}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1; got {self.max_new_tokens}")

    def generate_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": self.do_sample,
        }
        if self.repetition_penalty != 1.0:
            kwargs["repetition_penalty"] = self.repetition_penalty
        if self.do_sample:
            kwargs["temperature"] = self.temperature
            kwargs["top_k"] = self.top_k if self.top_k is not None else 0
            kwargs["top_p"] = self.top_p if self.top_p is not None else 1.0
        return kwargs

    def describe(self) -> str:
        """A short label such as ``greedy``, ``p0.9`` or ``k40-t0.7``."""
        if not self.do_sample:
            return "greedy"
        parts = []
        if self.top_k is not None:
            parts.append(f"k{self.top_k}")
        if self.top_p is not None:
            parts.append(f"p{self.top_p:g}")
        if self.temperature != 1.0:
            parts.append(f"t{self.temperature:g}")
        if self.repetition_penalty != 1.0:
            parts.append(f"rp{self.repetition_penalty:g}")
        return "-".join(parts) or "sample"


def clean_continuation(
    text: str, *, max_words: int | None = None, max_chars: int | None = None
) -> str:
    """Normalise whitespace, cut to the cap at a sentence end, and drop an unfinished last
    sentence (generation stops mid-sentence when it runs out of tokens).

    >>> clean_continuation("  It rained.\\n\\nThe roof leaked and")
    'It rained.'
    """
    text = re.sub(r"\s+", " ", text).strip()
    if max_words is not None or max_chars is not None:
        text = truncate(text, max_words=max_words, max_chars=max_chars)
    sentences = split_sentences(text)
    while len(sentences) > 1 and not _TERMINAL.search(sentences[-1]):
        sentences.pop()
    return " ".join(sentences)


def generate_stories(
    prompts: Sequence[Story],
    *,
    model: str | None = None,
    decoding: DecodingConfig | None = None,
    num_stories: int = 1,
    seed: int = 0,
    batch_size: int = 8,
    max_words: int | None = None,
    max_chars: int | None = None,
    system: str | None = None,
    progress: bool = True,
) -> list[Story]:
    """Continue each prompt ``num_stories`` times.

    Returns one :class:`Story` per continuation with ``id`` ``{prompt_id}-{system}-{n}``
    (``-{n}`` only when ``num_stories > 1``), the prompt, the prompt record's reference
    (its human continuation, if any), ``system``, and a ``signature`` field.
    """
    import torch
    from tqdm.auto import tqdm

    from storyeval.models import load_causal_lm

    if not prompts:
        raise ValueError("prompts must not be empty")
    if num_stories < 1 or batch_size < 1:
        raise ValueError("num_stories and batch_size must be >= 1")
    decoding = decoding or DecodingConfig()
    lm = load_causal_lm(model)
    tokenizer, lm_model = lm.tokenizer, lm.model
    tokenizer.padding_side = "left"
    pad_id = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    )
    system = system or f"{lm.name}-{decoding.describe()}"
    signature = Signature(
        "generate",
        {
            "model": lm.identity,
            **{k: v for k, v in asdict(decoding).items()},
            "num_stories": num_stories,
            "batch_size": batch_size,
            "max_words": max_words,
            "max_chars": max_chars,
            "seed": seed,
        },
    ).render()
    jobs = [(record, n) for record in prompts for n in range(num_stories)]
    torch.manual_seed(seed)
    finished: dict[tuple[str, int], str] = {}
    bar = tqdm(total=len(jobs), desc=f"generate {system}", disable=not progress, unit="story")
    for _attempt in range(_MAX_ATTEMPTS):
        pending = [job for job in jobs if (job[0].id, job[1]) not in finished]
        for start in range(0, len(pending), batch_size):
            batch = pending[start : start + batch_size]
            texts = [record.prompt.rstrip() for record, _ in batch]
            if any(not t for t in texts):
                raise ValueError("every prompt must be non-empty to generate a continuation")
            encoded = tokenizer(texts, return_tensors="pt", padding=True)
            with torch.no_grad():
                output = lm_model.generate(
                    **encoded, **decoding.generate_kwargs(), pad_token_id=pad_id
                )
            new_tokens = output[:, encoded["input_ids"].shape[1] :]
            for (record, n), tokens in zip(batch, new_tokens, strict=True):
                raw = tokenizer.decode(tokens, skip_special_tokens=True)
                story = clean_continuation(raw, max_words=max_words, max_chars=max_chars)
                if story:  # an empty continuation is generated again
                    finished[(record.id, n)] = story
                    bar.update(1)
    bar.close()
    failed = [f"{record.id}#{n + 1}" for record, n in jobs if (record.id, n) not in finished]
    if failed:
        raise RuntimeError(
            f"no usable continuation after {_MAX_ATTEMPTS} attempts for {', '.join(failed)}"
        )
    results = []
    for record, n in jobs:
        suffix = f"-{n + 1}" if num_stories > 1 else ""
        results.append(
            Story(
                id=f"{record.id}-{system}{suffix}",
                prompt=record.prompt,
                story=finished[(record.id, n)],
                reference=record.reference,
                system=system,
                extra={"prompt_id": record.id, "signature": signature},
            )
        )
    return results
