"""Paraphrase by rewriting with a language model: a quality-preserving change for the
invariance tests of :mod:`storyeval.analyses.robustness` (OpenMEVA's paraphrase test).

Each sentence is rewritten by an instruction-tuned causal LM (a chat prompt when the
tokenizer has a chat template, a plain "Paraphrase:" prompt otherwise): ``candidates``
samples are drawn (seeded), and a sample replaces the sentence only if it is a real
paraphrase by three checks:

* the encoder's cosine between the original and the sample is at least ``min_similarity``
  (0.85: the meaning is kept);
* its words differ from the original's (lower-cased, punctuation ignored);
* its length is within 0.6-1.6 times the original's (no added commentary, no truncation);
* it has as many negations (not, n't, never, no, nothing, ...) as the original: embedding
  similarity barely sees a flipped negation.

Of the samples that pass, the most similar one is kept; a sentence without one stays as it
was, and a story none of whose sentences could be paraphrased is not applicable. Small LMs
mostly copy or ramble, so the filter rejects most of their samples; with the offline
SmolLM2-135M-Instruct about half the sentences of a story get a paraphrase. Name a larger
instruction-tuned model for more (``--paraphrase-model``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PROMPT = (
    "Rewrite the following sentence using different words, keeping the meaning. Reply with "
    "one sentence.\n\n{sentence}"
)
PLAIN_PROMPT = "Sentence: {sentence}\nThe same sentence in other words:"
MIN_SIMILARITY = 0.85
CANDIDATES = 4
LENGTH_RATIO = (0.6, 1.6)
_WORD = re.compile(r"[a-z0-9']+")
_LABEL = re.compile(r"^(?:rewrite|rewritten|paraphrase|answer|sentence|new sentence)\s*:\s*", re.I)
_NEGATIONS = frozenset(
    {"not", "no", "never", "nothing", "nobody", "none", "nowhere", "neither", "nor"}
)


@dataclass(frozen=True)
class Paraphrase:
    """The kept rewrite of a sentence and its cosine to the original."""

    text: str
    similarity: float


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("’", "'"))


def _negations(words: list[str]) -> int:
    return sum(word in _NEGATIONS or word.endswith("n't") for word in words)


def _clean(sample: str) -> str:
    """The first line of a sample, without a label ("Rewrite:") or surrounding quotes."""
    lines = [line.strip() for line in sample.strip().splitlines() if line.strip()]
    text = _LABEL.sub("", lines[0] if lines else "")
    return text.strip().strip('"“”').strip()


class Paraphraser:
    """An LM that rewrites sentences and an encoder that checks the rewrites."""

    def __init__(self, model: str | None = None, encoder: str | None = None) -> None:
        from storyeval.models import load_causal_lm, load_encoder

        self.lm = load_causal_lm(model, option="--paraphrase-model")
        self.encoder = load_encoder(encoder)
        self.identity = self.lm.identity

    def place(self, device: str) -> Paraphraser:
        """Run the LM and the encoder on ``device``; returns the paraphraser."""
        from storyeval.models.devices import place

        place(self.lm, device)
        place(self.encoder, device)
        return self

    def _prompt_ids(self, sentence: str) -> Any:
        tokenizer = self.lm.tokenizer
        if getattr(tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": PROMPT.format(sentence=sentence)}]
            ids = tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt"
            )
            return ids if hasattr(ids, "shape") else ids["input_ids"]
        return tokenizer(PLAIN_PROMPT.format(sentence=sentence), return_tensors="pt")["input_ids"]

    def samples(self, sentence: str, *, seed: int, n: int = CANDIDATES) -> list[str]:
        """``n`` sampled rewrites (temperature 0.8, top-p 0.95), the same for the same seed."""
        import torch

        from storyeval.models.devices import model_device

        device = model_device(self.lm)
        ids = self._prompt_ids(sentence).to(device)
        limit = max(16, 2 * len(self.lm.tokenizer(sentence)["input_ids"]))
        pad = self.lm.tokenizer.pad_token_id or self.lm.tokenizer.eos_token_id
        with torch.random.fork_rng(devices=[]), torch.inference_mode():
            torch.manual_seed(seed)
            output = self.lm.model.generate(
                ids.repeat(n, 1),
                attention_mask=torch.ones((n, ids.shape[1]), dtype=torch.long, device=device),
                max_new_tokens=limit,
                do_sample=True,
                temperature=0.8,
                top_p=0.95,
                pad_token_id=pad,
            )
        tokenizer = self.lm.tokenizer
        return [
            _clean(tokenizer.decode(row[ids.shape[1] :], skip_special_tokens=True))
            for row in output
        ]

    def similarities(self, sentence: str, candidates: list[str]) -> list[float]:
        """The encoder's cosine between ``sentence`` and each candidate."""
        import torch

        from storyeval.models.devices import model_device
        from storyeval.models.pooling import mean_pooled, tokenize

        device = model_device(self.encoder)
        with torch.inference_mode():
            batch = tokenize(self.encoder.tokenizer, [sentence, *candidates], 128)
            batch = {key: value.to(device) for key, value in batch.items()}
            vectors = mean_pooled(self.encoder.model, batch).float()
        result: list[float] = (vectors[1:] @ vectors[0]).cpu().tolist()
        return result

    def paraphrase(
        self, sentence: str, *, seed: int, min_similarity: float = MIN_SIMILARITY
    ) -> Paraphrase | None:
        """The best sample that passes the checks (see the module docstring), or None."""
        original = _words(sentence)
        samples = [
            s
            for s in dict.fromkeys(self.samples(sentence, seed=seed))
            if s
            and _words(s) != original
            and LENGTH_RATIO[0] <= len(_words(s)) / max(1, len(original)) <= LENGTH_RATIO[1]
            and _negations(_words(s)) == _negations(original)
        ]
        if not samples:
            return None
        scored = sorted(
            zip(self.similarities(sentence, samples), samples, strict=True), reverse=True
        )
        similarity, text = scored[0]
        return Paraphrase(text, similarity) if similarity >= min_similarity else None


_PARAPHRASERS: dict[str | None, Paraphraser] = {}


def paraphraser(model: str | None = None) -> Paraphraser:
    """The paraphraser of ``model`` (None: the offline LM), loaded once per process."""
    if model not in _PARAPHRASERS:
        _PARAPHRASERS[model] = Paraphraser(model)
    return _PARAPHRASERS[model]
