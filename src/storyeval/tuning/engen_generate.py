"""Generating with a trained ENGEN model (Clark, Ji & Smith 2018): the model as a causal LM
that `storyeval generate` runs, registered as a kind of generator."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storyeval.generate.core import GENERATORS, GeneratorKind
from storyeval.tuning.engen import (
    _SENTENCE_END,
    BOS,
    EOS,
    UNK,
    EncodedText,
    EngenModel,
    _word,
    detokenize,
    encode,
    tokenize,
)

# --------------------------------------------------------------------------- generation


def _filtered(logits: Any, decoding: Any) -> Any:
    """Temperature, top-k and top-p applied to each row of logits."""
    import torch

    if decoding.temperature and decoding.temperature != 1.0:
        logits = logits / decoding.temperature
    if decoding.top_k:
        kth = torch.topk(logits, min(int(decoding.top_k), logits.shape[-1])).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if decoding.top_p is not None and decoding.top_p < 1.0:
        ordered, order = torch.sort(logits, descending=True)
        probs = torch.softmax(ordered, dim=-1)
        cut = probs.cumsum(-1) - probs > decoding.top_p
        logits = logits.masked_fill(cut.scatter(-1, order, cut), float("-inf"))
    return logits


@dataclass
class _Rows:
    """The state of a batch of continuations: the LSTM state, each row's entities (a table of
    ``max_entities`` slots, how many are known, the salient one, the position of each one's
    last mention), the mention in progress (entity, words left, its vector), the current and
    previous sentences' states (buffers with masks), the words so far, which rows have ended
    and the position of each row's last word read."""

    h: Any
    hidden: Any
    table: Any
    known: Any
    salient: Any
    mention: Any
    left: Any
    vector: Any
    current: Any
    current_mask: Any
    previous: Any
    previous_mask: Any
    words: list[list[str]]
    done: Any
    last: Any = None
    position: Any = None
    column: int = 0


class EngenLM:
    """ENGEN behind the generation interface of :func:`storyeval.generate.generate_stories`:
    ``name``, ``identity``, ``max_length``, a ``tokenizer`` and :meth:`generate_texts`. The
    prompts' entities come from the approximate detector; then, word by word and every prompt
    of a batch at once, the model decides whether a mention starts, its entity and length, and
    the word, and updates the entity after each mention. Draws come from the run's generator
    in a fixed order, so a seed and a batch give the same continuations."""

    def __init__(self, model: EngenModel) -> None:
        self.engen = model
        self.model = model.module
        self.name = f"ENGEN-{model.config.variant}"
        self.identity = model.identity
        self.max_length = 10**6
        self._words = model.words

    def tokenizer(self, text: str, **_: Any) -> dict[str, list[int]]:
        """Word ids of ``text`` (the interface of a Hugging Face tokenizer call)."""
        vocab = self.engen.vocab
        return {
            "input_ids": [
                vocab.get(_word(w, self.engen.config), vocab[UNK]) for w, _, _ in tokenize(text)
            ]
        }

    def generate_texts(
        self, contexts: Sequence[str], decoding: Any, *, generator: Any
    ) -> list[str]:
        """One continuation of each context (sampling draws from ``generator``)."""
        import torch

        if not contexts:
            return []
        with torch.no_grad():
            rows = self._start(contexts, decoding.max_new_tokens)
            for step in range(decoding.max_new_tokens):
                self._step(rows, decoding, generator, step)
                if bool(rows.done.all()):
                    break
        return [detokenize(words) for words in rows.words]

    def _start(self, contexts: Sequence[str], max_new: int) -> _Rows:
        """Read the prompts: their LSTM states, entities and last two sentences."""
        import torch

        from storyeval.entities import detect_mentions
        from storyeval.models import load_spacy

        model, config = self.model, self.engen.config
        device = model.embed.weight.device
        annotated = detect_mentions([(str(i), c) for i, c in enumerate(contexts)], nlp=load_spacy())
        encoded = [encode(a, self.engen.vocab, config, end_of_text=False) for a in annotated]
        width = max(len(e.ids) for e in encoded)
        # each prompt read alone (its own final LSTM state; packing would need its lengths on
        # the CPU and gives the same states), then the continuations advance together
        read = [model.lstm(model.embed(torch.tensor([e.ids], device=device))) for e in encoded]
        hidden = tuple(torch.cat([r[1][k] for r in read], dim=1) for k in range(2))
        states = torch.zeros(len(encoded), width, self.engen.config.hidden, device=device)
        for row, (out, _) in enumerate(read):
            states[row, : out.shape[1]] = out[0]
        rows = self._empty(len(encoded), width + max_new, hidden, device, states.dtype)
        rows.h = torch.stack([out[0, -1] for out, _ in read])
        rows.column = width  # the step's column in the sentence buffers
        for row, e in enumerate(encoded):
            rows.position[row] = len(e.ids) - 1
            self._prompt_entities(rows, row, e, states[row])
            last = e.sentence[-1]
            for column, position in enumerate(
                i for i in range(len(e.ids)) if e.sentence[i] == last
            ):
                rows.current[row, column], rows.current_mask[row, column] = (
                    states[row, position],
                    True,
                )
            for column, position in enumerate(
                i for i in range(len(e.ids)) if e.sentence[i] == last - 1
            ):
                rows.previous[row, column], rows.previous_mask[row, column] = (
                    states[row, position],
                    True,
                )
        return rows

    def _empty(self, count: int, width: int, hidden: Any, device: Any, dtype: Any) -> _Rows:
        import torch

        size, dim = self.engen.config.max_entities, self.engen.config.hidden

        def zeros(*shape: int, kind: Any = dtype) -> Any:
            return torch.zeros(*shape, dtype=kind, device=device)

        return _Rows(
            h=zeros(count, dim), hidden=hidden, table=zeros(count, size, dim),
            known=zeros(count, kind=torch.long), salient=zeros(count, kind=torch.long) - 1,
            mention=zeros(count, kind=torch.long) - 1, left=zeros(count, kind=torch.long),
            vector=zeros(count, dim), current=zeros(count, width, dim),
            current_mask=zeros(count, width, kind=torch.bool), previous=zeros(count, width, dim),
            previous_mask=zeros(count, width, kind=torch.bool), words=[[] for _ in range(count)],
            done=zeros(count, kind=torch.bool), last=zeros(count, size, kind=torch.long),
            position=zeros(count, kind=torch.long),
        )  # fmt: skip

    def _prompt_entities(self, rows: _Rows, row: int, encoded: EncodedText, states: Any) -> None:
        """The entities a prompt's mentions leave (updated after each of their mentions)."""
        for position in sorted(encoded.ends):
            entity = encoded.ends[position]
            if entity >= self.engen.config.max_entities:
                continue
            known = int(rows.known[row])
            base = rows.table[row, entity] if entity < known else self.model.new_entity
            rows.table[row, entity] = self.model.update(base, states[position])
            rows.known[row] = max(known, entity + 1)
            rows.salient[row] = entity
            rows.last[row, entity] = position

    def _step(self, rows: _Rows, decoding: Any, generator: Any, step: int) -> None:
        """One word for every row that has not ended."""
        import torch

        model, config = self.model, self.engen.config
        if config.entities:
            self._maybe_start_mentions(rows, generator)
        context = self._entity_context(rows)
        attended = self._attend(rows) if config.previous_sentence else torch.zeros_like(rows.h)
        logits = model.word_log_probs(model.combine(rows.h, attended, context))
        logits[:, self.engen.vocab[UNK]] = float("-inf")
        logits[:, self.engen.vocab[BOS]] = float("-inf")
        if decoding.do_sample:
            probs = torch.softmax(_filtered(logits, decoding).float(), dim=-1).cpu()
            chosen = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:
            chosen = logits.argmax(dim=-1).cpu()
        ended = (chosen == self.engen.vocab[EOS]) & ~rows.done.cpu()
        for row, word_id in enumerate(chosen.tolist()):
            if not rows.done[row] and not ended[row]:
                rows.words[row].append(self._words[word_id])
        rows.done |= ended.to(rows.done.device)
        self._advance(rows, chosen.to(rows.h.device), step)

    def _advance(self, rows: _Rows, chosen: Any, step: int) -> None:
        """Feed the chosen words, finish mentions whose last word this was, move sentences."""
        import torch

        model = self.model
        out, rows.hidden = model.lstm(model.embed(chosen.unsqueeze(1)), rows.hidden)
        rows.h = out[:, -1]
        column = rows.column + step
        rows.current[:, column] = rows.h
        rows.current_mask[:, column] = ~rows.done
        finishing = (rows.mention >= 0) & (rows.left <= 1)
        if bool(finishing.any()):
            entity = rows.mention.clamp(min=0)
            base = torch.where(
                (entity < rows.known).unsqueeze(1),
                rows.table[torch.arange(len(entity)), entity],
                rows.vector,
            )
            updated = model.update(base, rows.h)
            slots = torch.arange(rows.table.shape[1], device=rows.h.device)
            hit = (slots.unsqueeze(0) == entity.unsqueeze(1)) & finishing.unsqueeze(1)
            rows.table = torch.where(hit.unsqueeze(2), updated.unsqueeze(1), rows.table)
            rows.known = torch.where(finishing, torch.maximum(rows.known, entity + 1), rows.known)
            rows.salient = torch.where(finishing, entity, rows.salient)
            ended = hit & ~rows.done.unsqueeze(1)
            rows.last = torch.where(ended, (rows.position + 1).unsqueeze(1), rows.last)
        rows.position = rows.position + 1
        rows.left = torch.where(rows.mention >= 0, rows.left - 1, rows.left)
        rows.mention = torch.where(finishing, -1, rows.mention)
        ends = [bool(w) and w[-1] in _SENTENCE_END for w in rows.words]
        for row, is_end in enumerate(ends):
            if is_end and bool(rows.current_mask[row, column]):
                rows.previous[row], rows.previous_mask[row] = (
                    rows.current[row].clone(),
                    rows.current_mask[row].clone(),
                )
                rows.current_mask[row] = False

    def _maybe_start_mentions(self, rows: _Rows, generator: Any) -> None:
        """Rows outside a mention draw whether one starts; those that start draw its entity
        (a known one or a new one, Eq. 3.3; no new one when the table is full), its vector and
        its length."""
        import torch

        model, size = self.model, self.engen.config.max_entities
        draws = torch.rand(len(rows.words), generator=generator)
        p = torch.sigmoid(model.r(rows.h)).squeeze(-1).float().cpu()
        starting = ((draws < p) & (rows.mention < 0).cpu() & ~rows.done.cpu()).to(rows.h.device)
        if not bool(starting.any()):
            return
        slots = torch.arange(size, device=rows.h.device)
        valid = slots.unsqueeze(0) < rows.known.unsqueeze(1)
        # Eq. 3.3's distance feature: words read since each entity's last mention, as in training
        distance = (rows.position.unsqueeze(1) - rows.last).clamp(min=0).to(rows.h.dtype)
        logp = model.entity_scores_batch(rows.h, rows.table, valid, distance)
        full = rows.known >= size
        logp[:, size] = torch.where(full, float("-inf"), logp[:, size])
        choice = torch.multinomial(logp.exp().float().cpu(), 1, generator=generator).squeeze(1)
        choice = choice.to(rows.h.device)
        is_new = choice == size
        entity = torch.where(is_new, rows.known, choice).clamp(max=size - 1)
        drawn = model.new_vector(True, generator, rows=len(rows.words)).expand_as(rows.vector)
        known_vector = rows.table[torch.arange(len(entity)), entity]
        vector = torch.where(is_new.unsqueeze(1), drawn, known_vector)
        lengths = torch.softmax(model.length(torch.cat([rows.h, vector], dim=1)), dim=1)
        length = 1 + torch.multinomial(lengths.float().cpu(), 1, generator=generator).squeeze(1)
        rows.mention = torch.where(starting, entity, rows.mention)
        rows.left = torch.where(starting, length.to(rows.h.device), rows.left)
        rows.vector = torch.where(starting.unsqueeze(1), vector, rows.vector)

    def _entity_context(self, rows: _Rows) -> Any:
        """The mention's entity inside a mention, else the salient one, else zeros."""
        import torch

        if not self.engen.config.entities:
            return torch.zeros_like(rows.h)
        salient = rows.table[torch.arange(len(rows.words)), rows.salient.clamp(min=0)]
        salient = torch.where((rows.salient >= 0).unsqueeze(1), salient, torch.zeros_like(salient))
        return torch.where((rows.mention >= 0).unsqueeze(1), rows.vector, salient)

    def _attend(self, rows: _Rows) -> Any:
        """Attention of each row over its previous sentence (zeros where there is none)."""
        import torch

        scores = torch.einsum("bph,bh->bp", rows.previous, self.model.attend(rows.h))
        scores = scores.masked_fill(~rows.previous_mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        return torch.einsum("bp,bph->bh", weights, rows.previous)


def is_engen_directory(path: str | Path | None) -> bool:
    """Whether ``path`` is a model directory written by ``storyeval train engen``."""
    if path is None:
        return False
    meta = Path(path) / "storyeval.json"
    if not meta.is_file():
        return False
    try:
        return bool(json.loads(meta.read_text(encoding="utf-8")).get("kind") == "engen")
    except (OSError, ValueError):
        return False


def _load_engen_lm(path: str) -> EngenLM:
    return EngenLM(EngenModel.load(path))


# ENGEN directories generate through ``storyeval generate --model DIR`` (a generator plug-in:
# the generation layer does not import this package)
GENERATORS.register("engen", GeneratorKind(is_engen_directory, _load_engen_lm), replace=True)
