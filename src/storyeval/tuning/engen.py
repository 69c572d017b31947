"""ENGEN: entity-based generation (Clark 2021, chapter 3; Clark, Ji and Smith 2018), with its
two ablations.

The model reads a text word by word with an LSTM. Before each word it combines three
contexts into the state that predicts the word:

* the local hidden state ``h_t``;
* the **previous-sentence context** ``p_t``: attention over the hidden states of the previous
  sentence with a bilinear score ``h_i^T W_a h_t`` (as S2SA);
* the **entity context** ``e_t``: the dynamic representation of the entity being mentioned
  (inside a mention) or else of the most salient entity (the most recently mentioned one).

The three are combined by parameter-free max pooling, ``c_t = max(h_t, p_t, e_t)`` element by
element (the thesis' Eq. 3.5, which argues against a parameterised combination; ablations pool
the contexts they have), and ``P(word | c_t)`` is a class-factored softmax over word classes
estimated from the training data (section 3.2.3; ``softmax="full"``: one softmax over the
vocabulary); ``combine="tanh"`` gives the
parameterised ``c_t = tanh(W_h h_t + W_p p_t + W_e e_t)`` of storyeval before 0.4.0. As in
EntityNLM (Ji et al. 2017), the model also predicts, before each word, whether a mention
starts (``R``), which entity it refers to (``E``: Eq. 3.3, a bilinear score of ``h_t`` with
each entity's vector plus a weighted distance feature, the new entity scored with its vector
``r``) and its length (``L``, up to
``max_mention`` words). After each mention its entity's vector is updated,
``e <- normalise(d e + (1 - d) h)`` with a learned gate ``d``, and a new entity starts from a
vector drawn from N(r, 0.01^2 I) (Eq. 3.4; ``r`` itself when scoring, so scores are
deterministic). Training maximises the words' likelihood plus the R, E and L likelihoods on
the annotated mentions and coreference clusters (the mention and coreference supervision).

Variants (``variant``): ``engen`` (all three contexts), ``s2sa`` (no entity context, no
entity predictions: a seq2seq-with-attention language model over sentences) and
``entitynlm`` (no previous-sentence context).

Words are tokens of a simple tokenizer (words and punctuation), downcased, numbers as
``NUM``; the vocabulary is the words seen at least ``min_count`` (10) times in training, the
rest ``<unk>``; texts are trained on in segments of at most 50 sentences
(:mod:`storyeval.tuning.engen_text`; section 3.4). Training is SGD at learning rate 0.1
(section 3.3; ``optimizer="adam"`` as an option), the epoch of the best dev log-likelihood
kept. Models saved before 0.7.0 load with the settings they were trained with. Texts without annotations
(a prompt to continue, a raw story) get approximate mentions from
:func:`storyeval.entities.detect_mentions`.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from storyeval.base.errors import ModelLoadError, StoryevalError
from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice
from storyeval.entities import AnnotatedText
from storyeval.tuning.engen_text import normalise_word

VARIANTS = ("engen", "s2sa", "entitynlm")
COMBINES = ("max", "tanh")
SOFTMAXES = ("class", "full")
OPTIMIZERS = ("sgd", "adam")
NEW_ENTITY_SCORES = ("eq3.3", "linear")
# what a model saved before 0.7.0 did (its metadata lacks these settings)
LEGACY_CONFIG = {
    "combine": "tanh",
    "vocabulary": 4000,
    "min_count": 1,
    "lowercase": False,
    "numbers": False,
    "segment_sentences": 0,
    "softmax": "full",
    "new_entity": "linear",
    "new_entity_sigma": 0.0,
    "max_mention": 4,
    "optimizer": "adam",
}
CLASSES_FILE = "classes.json"
WEIGHTS_FILE = "engen.pt"
VOCAB_FILE = "vocab.json"
UNK, BOS, EOS = "<unk>", "<s>", "</s>"
#: Positions computed at once by the previous-sentence attention and the softmax: long texts
#: are read whole, their memory bounded (the numbers do not depend on it)
BLOCK = 512
_TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]")
_SENTENCE_END = {".", "!", "?"}


def tokenize(text: str) -> list[tuple[str, int, int]]:
    """Words and punctuation with their character offsets.

    >>> [t for t, _, _ in tokenize("Emily's dog barked.")]
    ["Emily's", 'dog', 'barked', '.']
    """
    return [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text)]


def detokenize(words: Sequence[str]) -> str:
    """Words joined with spaces, none before punctuation.

    >>> detokenize(["She", "ran", ",", "fast", "."])
    'She ran, fast.'
    """
    text = ""
    for word in words:
        if text and not (len(word) == 1 and not word.isalnum() and word not in "([\"'"):
            text += " "
        text += word
    return text


@dataclass(frozen=True)
class EngenConfig:
    """The model's size and training settings (all in the signature). The training and data
    choices default to the thesis' (sections 3.3-3.4): SGD at learning rate 0.1, a
    class-factored softmax over 160 word classes, downcased words, numbers as ``NUM``, words
    seen fewer than 10 times as ``<unk>``, 50-sentence segments, a new entity drawn from
    N(r, 0.01^2 I) and scored like the known ones (Eq. 3.3), 512 dimensions. The thesis names
    no dropout, batch size, epoch count or entity limit: no dropout, 8 texts a batch, 3 epochs
    and 24 entities per text here. Every token of every text (segment) is read, trained on
    and scored: nothing is cut (before 0.9.0 a ``max_tokens`` of 400 cut longer texts)."""

    variant: str = "engen"
    combine: str = "max"
    embedding: int = 512
    hidden: int = 512
    vocabulary: int | None = None
    min_count: int = 10
    lowercase: bool = True
    numbers: bool = True
    segment_sentences: int = 50
    softmax: str = "class"
    classes: int = 160
    new_entity: str = "eq3.3"
    new_entity_sigma: float = 0.01
    max_entities: int = 24
    max_mention: int = 3
    epochs: int = 3
    batch_size: int = 8
    optimizer: str = "sgd"
    learning_rate: float = 0.1
    dropout: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name, allowed in (
            ("variant", VARIANTS),
            ("combine", COMBINES),
            ("softmax", SOFTMAXES),
            ("optimizer", OPTIMIZERS),
            ("new_entity", NEW_ENTITY_SCORES),
        ):
            check_choice(getattr(self, name), allowed, name)
        for name in (
            "embedding",
            "hidden",
            "min_count",
            "classes",
            "max_entities",
            "max_mention",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        if self.vocabulary is not None and self.vocabulary < 1:
            raise ValueError(f"vocabulary must be at least 1 or None; got {self.vocabulary}")
        if self.segment_sentences < 0 or self.new_entity_sigma < 0:
            raise ValueError("segment_sentences and new_entity_sigma must not be negative")

    @property
    def entities(self) -> bool:
        """Whether the variant keeps entity representations."""
        return self.variant != "s2sa"

    @property
    def previous_sentence(self) -> bool:
        """Whether the variant attends to the previous sentence."""
        return self.variant != "entitynlm"


# --------------------------------------------------------------------------- encoding


@dataclass
class EncodedText:
    """A text as word ids with, per position, the mention it starts (cluster index, length),
    whether it is inside a mention (and of which entity), and the sentence of each word."""

    ids: list[int]
    starts: dict[int, tuple[int, int]] = field(default_factory=dict)
    inside: list[int] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=dict)
    sentence: list[int] = field(default_factory=list)


def encode(
    text: AnnotatedText, vocab: dict[str, int], config: EngenConfig, *, end_of_text: bool = True
) -> EncodedText:
    """Word ids (BOS first) of every token and the mention structure, clusters numbered by
    first mention. Mentions are cut to ``max_mention`` words; clusters beyond ``max_entities``
    are left out (the model keeps that many entities)."""
    tokens = tokenize(text.text)
    ids = [vocab[BOS]] + [vocab.get(_word(word, config), vocab[UNK]) for word, _, _ in tokens]
    inside = [-1] * len(ids)
    starts: dict[int, tuple[int, int]] = {}
    ends: dict[int, int] = {}
    clusters: dict[str, int] = {}
    for mention in text.mentions:
        covered = [
            i + 1
            for i, (_, start, end) in enumerate(tokens)
            if start < mention.end and end > mention.start
        ]
        if not covered or any(inside[i] >= 0 for i in covered):
            continue
        if mention.cluster not in clusters:
            if len(clusters) >= config.max_entities:
                continue
            clusters[mention.cluster] = len(clusters)
        entity = clusters[mention.cluster]
        span = covered[: config.max_mention]
        starts[span[0]] = (entity, len(span))
        ends[span[-1]] = entity
        for i in span:
            inside[i] = entity
    sentence, number = [0] * len(ids), 0
    for i in range(1, len(ids)):
        sentence[i] = number
        if tokens[i - 1][0] in _SENTENCE_END:
            number += 1
    if end_of_text:
        ids.append(vocab[EOS])
        inside.append(-1)
        sentence.append(number)
    return EncodedText(ids, starts, inside, ends, sentence)


def _word(token: str, config: EngenConfig) -> str:
    """A token as the vocabulary sees it (downcased, numbers as NUM, by the settings)."""
    return normalise_word(token, lowercase=config.lowercase, numbers=config.numbers)


def build_vocabulary(texts: Sequence[AnnotatedText], config: EngenConfig) -> dict[str, int]:
    """The words seen at least ``min_count`` times (at most ``vocabulary`` of them, the most
    frequent; ties by first appearance) after the special tokens.

    >>> texts = [AnnotatedText("t", "The dog saw the cat in 1999.", ())]
    >>> list(build_vocabulary(texts, EngenConfig(min_count=2)))
    ['<unk>', '<s>', '</s>', 'the']
    """
    counts: Counter[str] = Counter(
        _word(word, config) for t in texts for word, _, _ in tokenize(t.text)
    )
    words = [w for w, n in counts.most_common(config.vocabulary) if n >= config.min_count]
    words = [w for w in words if w not in (UNK, BOS, EOS)]
    return {word: i for i, word in enumerate([UNK, BOS, EOS, *words])}


# --------------------------------------------------------------------------- the model


def class_factored(logits: Any, class_logits: Any, word_class: Any) -> Any:
    """``log P(class(w)) + log P(w | class(w))`` for every word ``w`` (columns of ``logits``),
    each class's words normalised among themselves (Goodman 2001).

    >>> import torch
    >>> out = class_factored(torch.zeros(1, 3), torch.zeros(1, 2), torch.tensor([0, 0, 1]))
    >>> [round(v, 3) for v in out.exp()[0].tolist()]
    [0.25, 0.25, 0.5]
    """
    import torch

    index = word_class.expand_as(logits)
    width = (logits.shape[0], class_logits.shape[-1])
    peak = torch.full(width, float("-inf"), dtype=logits.dtype, device=logits.device)
    peak = peak.scatter_reduce(1, index, logits.detach(), "amax")
    shifted = (logits - peak.gather(1, index)).exp()
    totals = torch.zeros(width, dtype=logits.dtype, device=logits.device)
    log_z = totals.scatter_add(1, index, shifted).log() + peak
    class_lp = torch.log_softmax(class_logits, dim=-1)
    return class_lp.gather(1, index) + logits - log_z.gather(1, index)


def _layers(
    module: Any, config: EngenConfig, vocab_size: int, word_class: Sequence[int] | None
) -> None:
    """The network's layers; some only with some settings: the tanh combination (max
    pooling has no parameters), the class-factored softmax's class layer and word classes,
    and the separate new-entity score of storyeval before 0.7.0."""
    import torch
    from torch import nn

    h = config.hidden
    module.embed = nn.Embedding(vocab_size, config.embedding)
    module.lstm = nn.LSTM(config.embedding, h, batch_first=True)
    module.drop = nn.Dropout(config.dropout)
    module.attend = nn.Linear(h, h, bias=False)  # W_a
    module.out = nn.Linear(h, vocab_size)
    module.r = nn.Linear(h, 1)  # does a mention start?
    module.e_score = nn.Linear(h, h, bias=False)  # W_entity, bilinear with each entity
    module.recency = nn.Parameter(torch.tensor(-0.1))  # w_dist (one distance feature)
    module.new_entity = nn.Parameter(torch.randn(h) * 0.1)  # r of Eq. 3.4
    module.length = nn.Linear(2 * h, config.max_mention)
    module.gate = nn.Linear(h, h, bias=False)
    if config.combine == "tanh":
        module.w_h = nn.Linear(h, h)
        module.w_p = nn.Linear(h, h, bias=False)
        module.w_e = nn.Linear(h, h, bias=False)
    if config.softmax == "class":
        classes = torch.tensor(list(word_class or ()), dtype=torch.long)
        module.register_buffer("word_class", classes)
        module.class_out = nn.Linear(h, int(classes.max()) + 1)
    if config.new_entity == "linear":
        module.new_score = nn.Linear(h, 1)


def _previous_sentence_attention(
    queries: Any, states: Any, sentence: Any, lows: Sequence[int]
) -> Any:
    """Each position's attention over the states of the sentence before its own, block by
    block (:data:`BLOCK` queries at a time, keys from ``lows[k]`` on)."""
    import torch

    parts = []
    for number, start in enumerate(range(0, states.shape[1], BLOCK)):
        stop, low = min(start + BLOCK, states.shape[1]), lows[number]
        keys, kept = states[:, low:stop], sentence[:, low:stop]
        scores = torch.einsum("bth,bsh->bts", queries[:, start:stop], keys)
        mask = sentence[:, start:stop].unsqueeze(2) - 1 == kept.unsqueeze(1)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # first sentence: none
        parts.append(torch.einsum("bts,bsh->bth", weights, keys))
    return torch.cat(parts, dim=1)


def _module(config: EngenConfig, vocab_size: int, word_class: Sequence[int] | None) -> Any:
    import torch
    from torch import nn

    if config.softmax == "class" and (word_class is None or len(word_class) != vocab_size):
        raise ModelLoadError("a class-factored softmax needs a class for every word")

    class Engen(nn.Module):
        """The network (see the module docstring)."""

        # set by _layers (some by the settings only)
        embed: Any
        lstm: Any
        drop: Any
        attend: Any
        out: Any
        r: Any
        e_score: Any
        recency: Any
        new_entity: Any
        length: Any
        gate: Any
        w_h: Any
        w_p: Any
        w_e: Any
        class_out: Any
        new_score: Any

        def __init__(self) -> None:
            super().__init__()
            _layers(self, config, vocab_size, word_class)

        # ----------------------------------------------------------- pieces

        def previous_context(self, states: Any, sentence: Any, lows: Sequence[int]) -> Any:
            """Attention of every position over the previous sentence's states (B, T, H),
            computed for :data:`BLOCK` positions at a time over the keys they can reach
            (``lows[k]``: the first position block ``k``'s previous sentences start at), so
            memory grows with the text's length, not its square."""
            if not config.previous_sentence:
                return torch.zeros_like(states)
            return _previous_sentence_attention(self.attend(states), states, sentence, lows)

        def word_log_probs(self, c: Any) -> Any:
            """log P(word | c_t) for every word (rows of ``c``): a full softmax, or the
            class-factored ``log P(class | c) + log P(word | class, c)`` (section 3.2.3)."""
            if config.softmax == "full":
                return torch.log_softmax(self.out(c), dim=-1)
            return class_factored(self.out(c), self.class_out(c), self.word_class)

        def new_vector(self, draw: bool, generator: Any = None, rows: int | None = None) -> Any:
            """A new entity's vector: u ~ N(r, sigma^2 I) (Eq. 3.4) when ``draw``, else r
            (``rows``: one draw per row)."""
            if not draw or not config.new_entity_sigma:
                return self.new_entity
            shape = self.new_entity.shape if rows is None else (rows, *self.new_entity.shape)
            noise = torch.randn(shape, generator=generator)
            return self.new_entity + config.new_entity_sigma * noise.to(self.new_entity)

        def entity_scores_batch(self, h: Any, table: Any, valid: Any, distance: Any) -> Any:
            """Log-probabilities of each row's known entities and of a new one (the last
            column): ``h^T W_entity e_i + w_dist f(i)`` (Eq. 3.3) with ``f`` the log of
            ``distance``, the words since the entity's last mention (0 for the new entity,
            whose vector is r). ``table`` (rows, slots, hidden) holds the entities, ``valid``
            which slots are known."""
            projected = self.e_score(h)
            known = torch.einsum("bmh,bh->bm", table, projected)
            known = (known + self.recency * torch.log1p(distance)).masked_fill(
                ~valid, float("-inf")
            )
            if config.new_entity == "linear":
                new = self.new_score(h)
            else:
                new = (projected @ self.new_entity).unsqueeze(1)
            return torch.log_softmax(torch.cat([known, new], dim=1), dim=1)

        def combine(self, h: Any, p: Any, e: Any) -> Any:
            """The state that predicts the word: max pooling over the variant's contexts, or
            the parameterised tanh combination."""
            if config.combine == "tanh":
                return torch.tanh(self.w_h(h) + self.w_p(p) + self.w_e(e))
            parts = [h, *([p] if config.previous_sentence else [])]
            parts += [e] if config.entities else []
            return torch.stack(parts).amax(dim=0)

        def update(self, entity: Any, h: Any) -> Any:
            """EntityNLM's gated update of an entity after its mention (one vector, or a row
            per text)."""
            d = torch.sigmoid((self.gate(h) * entity).sum(-1, keepdim=True))
            mixed = d * entity + (1 - d) * h
            return mixed / mixed.norm(dim=-1, keepdim=True).clamp_min(1e-6)

    return Engen()


@dataclass
class _Events:
    """A batch's mention structure as (rows, predicted positions) tables: the entity and
    length of a mention starting at the predicted word (-1: none), the entity of a mention
    the word is inside, and of one ending at it; and the positions where anything happens."""

    start: Any
    length: Any
    inside: Any
    end: Any
    start_steps: set[int]
    end_steps: set[int]

    @classmethod
    def of(cls, batch: Sequence[EncodedText], width: int, device: Any) -> _Events:
        import torch

        start, length = [[-1] * width for _ in batch], [[1] * width for _ in batch]
        inside, end = [[-1] * width for _ in batch], [[-1] * width for _ in batch]
        start_steps: set[int] = set()
        end_steps: set[int] = set()
        for row, text in enumerate(batch):
            for position, (entity, words) in text.starts.items():
                start[row][position - 1], length[row][position - 1] = entity, words
                start_steps.add(position - 1)
            for position, entity in text.ends.items():
                end[row][position - 1] = entity
                end_steps.add(position - 1)
            for position in range(1, len(text.ids)):
                inside[row][position - 1] = text.inside[position]

        def table(values: list[list[int]]) -> Any:
            return torch.tensor(values, dtype=torch.long, device=device)

        return cls(table(start), table(length), table(inside), table(end), start_steps, end_steps)


def _entity_pass(
    model: Any, batch: Sequence[EncodedText], states: Any, cfg: EngenConfig, width: int
) -> tuple[Any, Any]:
    """Teacher-forced entity decisions of a batch, every row at once, position by position
    (each entity update feeds the next decision): per predicted position the log-probability
    of E and L where a mention starts, and the entity context (the mentioned entity inside a
    mention, else the most salient one)."""
    import torch

    rows, size, hidden = len(batch), cfg.max_entities, cfg.hidden
    device, dtype = states.device, states.dtype
    events = _Events.of(batch, width, device)
    every = torch.arange(rows, device=device)
    slots = torch.arange(size, device=device)
    table = torch.zeros(rows, size, hidden, dtype=dtype, device=device)
    known = torch.zeros(rows, dtype=torch.long, device=device)
    last = torch.zeros(rows, size, dtype=torch.long, device=device)
    salient = torch.full((rows,), -1, dtype=torch.long, device=device)
    fresh = torch.zeros(rows, hidden, dtype=dtype, device=device)
    terms = torch.zeros(rows, width, dtype=dtype, device=device)
    contexts = []
    for t in range(width):
        h = states[:, t]
        if t in events.start_steps:
            term, fresh = _mention_start(model, h, table, known, last, fresh, events, t)
            terms = terms.index_put((every, torch.full_like(every, t)), term)
        inside = events.inside[:, t]
        chosen = torch.where(inside >= 0, inside, salient).clamp(min=0)
        use_fresh = ((inside >= 0) & (inside >= known)).unsqueeze(1)
        vector = torch.where(use_fresh, fresh, table[every, chosen])
        present = ((inside >= 0) | (salient >= 0)).unsqueeze(1)
        contexts.append(torch.where(present, vector, torch.zeros_like(vector)))
        if t in events.end_steps:
            ended = events.end[:, t]
            entity = ended.clamp(min=0)
            base = torch.where((entity < known).unsqueeze(1), table[every, entity], fresh)
            updated = model.update(base, states[:, t + 1])
            hit = (slots.unsqueeze(0) == entity.unsqueeze(1)) & (ended >= 0).unsqueeze(1)
            table = torch.where(hit.unsqueeze(2), updated.unsqueeze(1), table)
            last = torch.where(hit, t + 1, last)
            known = torch.where(ended >= 0, torch.maximum(known, entity + 1), known)
            salient = torch.where(ended >= 0, entity, salient)
    return terms, torch.stack(contexts, dim=1)


def _mention_start(
    model: Any, h: Any, table: Any, known: Any, last: Any, fresh: Any, events: _Events, t: int
) -> tuple[Any, Any]:
    """At position ``t``, for the rows where a mention starts: ``log P(E) + log P(L)``
    (Eq. 3.3 over the known entities and a new one), and the rows' new-entity vectors."""
    import torch

    starting = events.start[:, t]
    entity = starting.clamp(min=0)
    size = table.shape[1]
    valid = torch.arange(size, device=h.device).unsqueeze(0) < known.unsqueeze(1)
    scores = model.entity_scores_batch(h, table, valid, (t - last).to(h.dtype))
    is_new = entity >= known
    choice = torch.where(is_new | (starting < 0), size, entity)
    entity_lp = scores.gather(1, choice.unsqueeze(1)).squeeze(1)
    drawn = model.new_vector(model.training, rows=len(entity)).expand_as(fresh)
    fresh = torch.where((is_new & (starting >= 0)).unsqueeze(1), drawn, fresh)
    vector = torch.where(is_new.unsqueeze(1), fresh, table[torch.arange(len(entity)), entity])
    lengths = torch.log_softmax(model.length(torch.cat([h, vector], dim=1)), dim=1)
    length_lp = lengths.gather(1, (events.length[:, t] - 1).unsqueeze(1)).squeeze(1)
    term = torch.where(starting >= 0, entity_lp + length_lp, torch.zeros_like(entity_lp))
    return term, fresh


def _batch_terms(
    model: Any, batch: Sequence[EncodedText], states: Any, previous: Any, cfg: EngenConfig
) -> list[tuple[Any, Any]]:
    """Per text of a batch and predicted position ``t`` (word ``t + 1``): the word's
    log-probability and the log-probability of the entity decisions made before it (R at every
    position; E and L where a mention starts). Gold mentions are followed (teacher forcing);
    the entity decisions of every text advance together (:func:`_entity_pass`)."""
    import torch
    import torch.nn.functional as F

    width = max(len(t.ids) for t in batch) - 1
    device, dtype = states.device, states.dtype
    h_all, p_all = states[:, :width], previous[:, :width]
    decisions = torch.zeros(len(batch), width, dtype=dtype, device=device)
    contexts = torch.zeros_like(h_all)
    if cfg.entities:
        marks = [[1.0 if t + 1 in text.starts else 0.0 for t in range(width)] for text in batch]
        starts = torch.tensor(marks, dtype=dtype, device=device)
        r_logits = model.r(h_all).squeeze(-1)
        decisions = -F.binary_cross_entropy_with_logits(r_logits, starts, reduction="none")
        terms, contexts = _entity_pass(model, batch, states, cfg, width)
        decisions = decisions + terms
    combined = model.combine(h_all, p_all, contexts)
    results = []
    for row, text in enumerate(batch):  # the vocabulary-wide softmax by blocks (memory)
        n = len(text.ids) - 1
        targets = torch.tensor(text.ids[1:], device=device).unsqueeze(1)
        words = [
            model.word_log_probs(model.drop(combined[row, start : min(start + BLOCK, n)]))
            .gather(1, targets[start : min(start + BLOCK, n)])
            .squeeze(1)
            for start in range(0, n, BLOCK)
        ]
        results.append((torch.cat(words), decisions[row, :n]))
    return results


def _block_lows(batch: Sequence[EncodedText], width: int) -> list[int]:
    """For each block of :data:`BLOCK` positions, the first position any of its positions'
    previous sentence starts at (in any text of the batch): the keys the block attends to."""
    lows = []
    for start in range(0, width, BLOCK):
        low = start
        for text in batch:
            if start >= len(text.sentence):
                continue
            wanted = text.sentence[start] - 1
            first = start
            while first > 0 and text.sentence[first - 1] >= wanted:
                first -= 1
            low = min(low, first)
        lows.append(low)
    return lows


def _forward(model: Any, batch: Sequence[EncodedText]) -> tuple[Any, Any]:
    """LSTM states and previous-sentence contexts of a batch (padded)."""
    import torch

    width = max(len(t.ids) for t in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    sentence = torch.full((len(batch), width), -5, dtype=torch.long)
    for row, text in enumerate(batch):
        ids[row, : len(text.ids)] = torch.tensor(text.ids)
        sentence[row, : len(text.ids)] = torch.tensor(text.sentence)
    device = model.embed.weight.device
    ids, sentence = ids.to(device), sentence.to(device)
    states, _ = model.lstm(model.drop(model.embed(ids)))
    return states, model.previous_context(states, sentence, _block_lows(batch, width))


# --------------------------------------------------------------------------- training


@dataclass
class EngenModel:
    """A trained (or loaded) ENGEN model: the network, its vocabulary and configuration."""

    module: Any
    vocab: dict[str, int]
    config: EngenConfig
    signature: Signature
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def words(self) -> list[str]:
        """Word by id."""
        return [w for w, _ in sorted(self.vocab.items(), key=lambda item: item[1])]

    @property
    def identity(self) -> str:
        """The model's identity in signatures (variant and a hash of its settings)."""
        import hashlib

        digest = hashlib.sha256(self.signature.render().encode()).hexdigest()[:12]
        return f"engen-{self.config.variant}@{digest}"

    def loss(self, texts: Sequence[EncodedText]) -> tuple[Any, Any, int]:
        """Summed word and entity losses of a batch, and its word count."""
        states, previous = _forward(self.module, texts)
        word_total, extra_total, count = 0.0, 0.0, 0
        terms = _batch_terms(self.module, texts, states, previous, self.config)
        for text, (words, decisions) in zip(texts, terms, strict=True):
            word_total = word_total - words.sum()
            extra_total = extra_total - decisions.sum()
            count += len(text.ids) - 1
        return word_total, extra_total, count

    def save(self, directory: str | Path) -> Path:
        """Write the model directory atomically (weights, vocabulary, metadata)."""
        import torch

        from storyeval.base.io import atomic_directory
        from storyeval.learn.trainer import METADATA_FILE

        with atomic_directory(directory, "engen model") as tmp:
            torch.save(self.module.state_dict(), tmp / WEIGHTS_FILE)
            (tmp / VOCAB_FILE).write_text(json.dumps(self.words), encoding="utf-8")
            if self.config.softmax == "class":
                classes = self.module.word_class.tolist()
                (tmp / CLASSES_FILE).write_text(json.dumps(classes), encoding="utf-8")
            metadata = {
                "kind": "engen",
                "config": asdict(self.config),
                "signature": self.signature.to_dict(),
                "training": {"history": self.history},
            }
            (tmp / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n", "utf-8")
        return Path(directory)

    @classmethod
    def load(cls, directory: str | Path) -> EngenModel:
        """A model written by :meth:`save` (``storyeval train engen``).

        Raises
        ------
        ModelLoadError
            When the directory is not an ENGEN model.
        """
        import torch

        from storyeval.learn.trainer import read_metadata

        meta = read_metadata(directory)
        if meta["kind"] != "engen":
            raise ModelLoadError(f"{directory}: a {meta['kind']} model, not an ENGEN model")
        known = {f.name for f in fields(EngenConfig)}  # max_tokens: a cut before 0.9.0
        config = EngenConfig(
            **{k: v for k, v in {**LEGACY_CONFIG, **meta["config"]}.items() if k in known}
        )
        words = json.loads((Path(directory) / VOCAB_FILE).read_text(encoding="utf-8"))
        vocab = {w: i for i, w in enumerate(words)}
        classes_file = Path(directory) / CLASSES_FILE
        word_class = json.loads(classes_file.read_text("utf-8")) if classes_file.is_file() else None
        module = _module(config, len(vocab), word_class)
        module.load_state_dict(
            torch.load(Path(directory) / WEIGHTS_FILE, map_location="cpu", weights_only=True)
        )
        module.eval()
        history = meta.get("training", {}).get("history", [])
        return cls(module, vocab, config, Signature.from_dict(meta["signature"]), history)


def train_engen(
    texts: Sequence[AnnotatedText],
    *,
    config: EngenConfig | None = None,
    dev_fraction: float = 0.1,
    source: str = "annotated",
    progress: bool = False,
    max_steps: int | None = None,
    device: str = "cpu",
) -> EngenModel:
    """Train ENGEN (or an ablation) on annotated texts; the dev loss (per word) after each
    epoch is in ``history``. ``device``: where the network trains (the device's kind is in
    the signature; the saved weights load on the CPU).

    Raises
    ------
    StoryevalError
        With fewer than 4 texts, or no mention at all for an entity variant.
    """
    import random

    import torch

    from storyeval.learn.data import corpus_hash

    config = config or EngenConfig()
    if len(texts) < 4:
        raise StoryevalError(f"ENGEN needs at least 4 texts to train on; got {len(texts)}")
    if config.entities and not any(t.mentions for t in texts):
        raise StoryevalError(
            f"the {config.variant} variant needs mention annotations; the texts have none"
        )
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    encoded, dev_encoded, vocab, word_class = _prepared(texts, config, dev_fraction, rng)
    module = _module(config, len(vocab), word_class).to(device)
    from storyeval.corpus import Story

    signature = Signature(
        "engen",
        {
            **asdict(config),
            "epoch": "best-dev",
            "data": corpus_hash([Story(t.id, "", t.text) for t in texts]),
            "texts": len(texts),
            "mentions": source,
            "word_classes": "exchange" if config.softmax == "class" else "none",
            **({"device": device.split(":", 1)[0]} if device != "cpu" else {}),
            "torch": torch.__version__,
        },
    )
    model = EngenModel(module, vocab, config, signature)
    kind = torch.optim.SGD if config.optimizer == "sgd" else torch.optim.Adam
    optimizer = kind(module.parameters(), lr=config.learning_rate)
    step = 0
    best: tuple[float, dict[str, Any]] | None = None
    for epoch in range(config.epochs):
        rng.shuffle(encoded)
        started = time.perf_counter()
        total, words, step = _epoch(model, optimizer, encoded, epoch, step, progress, max_steps)
        with torch.no_grad():
            dev_words, dev_extra, dev_count = model.loss(dev_encoded)
        model.history.append(
            {
                "epoch": epoch + 1,
                "steps": step,
                "train_word_nll": total / max(words, 1),
                "dev_word_nll": float(dev_words) / dev_count,
                "dev_perplexity": math.exp(float(dev_words) / dev_count),
                "dev_entity_nll": float(dev_extra) / dev_count,
                "seconds": time.perf_counter() - started,
            }
        )
        dev_total = float(dev_words + dev_extra)  # the dev set's negative log-likelihood
        if best is None or dev_total < best[0]:
            best = (dev_total, {k: v.detach().clone() for k, v in module.state_dict().items()})
        if max_steps is not None and step >= max_steps:
            break
    _keep_best(model, best)
    return model


def _prepared(
    texts: Sequence[AnnotatedText], config: EngenConfig, dev_fraction: float, rng: Any
) -> tuple[list[EncodedText], list[EncodedText], dict[str, int], list[int] | None]:
    """The texts split into training and dev texts (whole texts, then cut into segments), the
    vocabulary and word classes from the training segments, and both sides encoded."""
    from storyeval.tuning.engen_text import exchange_clusters, segments

    order = list(texts)
    rng.shuffle(order)
    n_dev = max(1, round(len(order) * dev_fraction))
    dev = [s for t in order[:n_dev] for s in segments(t, config.segment_sentences)]
    train = [s for t in order[n_dev:] for s in segments(t, config.segment_sentences)]
    vocab = build_vocabulary(train, config)
    encoded = [encode(t, vocab, config) for t in train]
    dev_encoded = [encode(t, vocab, config) for t in dev]
    word_class = None
    if config.softmax == "class":
        word_class = exchange_clusters([e.ids for e in encoded], len(vocab), config.classes)
    return encoded, dev_encoded, vocab, word_class


def _epoch(
    model: EngenModel,
    optimizer: Any,
    encoded: Sequence[EncodedText],
    epoch: int,
    step: int,
    progress: bool,
    max_steps: int | None,
) -> tuple[float, int, int]:
    """One pass over the training texts: the summed word NLL, the words and the step count."""
    import torch

    config, module = model.config, model.module
    module.train()
    total, words = 0.0, 0
    for start in range(0, len(encoded), config.batch_size):
        batch = encoded[start : start + config.batch_size]
        word_loss, extra_loss, count = model.loss(batch)
        loss = (word_loss + extra_loss) / count
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 5.0)
        optimizer.step()
        total, words, step = total + float(word_loss.detach()), words + count, step + 1
        if progress:
            print(f"epoch {epoch + 1} step {step}: loss/word {float(loss):.3f}", flush=True)
        if max_steps is not None and step >= max_steps:
            break
    module.eval()
    return total, words, step


def _keep_best(model: EngenModel, best: tuple[float, dict[str, Any]] | None) -> None:
    """Restore the epoch of the best dev log-likelihood (section 3.3) and mark it in the
    history."""
    if best is None:
        return
    model.module.load_state_dict(best[1])
    model.module.eval()
    totals = [row["dev_word_nll"] + row["dev_entity_nll"] for row in model.history]
    kept = min(range(len(totals)), key=totals.__getitem__)
    for number, row in enumerate(model.history):
        row["kept"] = number == kept


# --------------------------------------------------------------------------- scoring


def _joined(context: str, addition: str) -> tuple[str, int]:
    """``context`` and ``addition`` joined by one space (none when the context is empty or
    already ends in whitespace), and where the addition starts."""
    gap = " " if context and not context[-1].isspace() else ""
    return context + gap + addition, len(context) + len(gap)


class EngenScorer:
    """ENGEN for the entity evaluation tasks (:mod:`storyeval.analyses.entity_eval`): a
    :class:`~storyeval.analyses.entity_eval.MentionScorer` on all three mention-generation tasks, and
    ``score`` (log-probability of a continuation) for sentence selection.

    The entity states of a context come from the annotated texts bound with :meth:`bind` (the
    mention-generation task binds its texts), else from the approximate detector. Candidate
    scores: *cluster and mention* ``log P(E = cluster) + log P(L) + log P(words | entity)``;
    *cluster only* ``log P(E = cluster)``; *mention only* ``log P(words)`` with the most
    salient entity as context. ``score`` is ``log P(words, entity decisions | context)``.
    """

    tasks = ("cluster_and_mention", "cluster_only", "mention_only")

    def __init__(self, model: EngenModel | str | Path, *, batch_size: int = 16) -> None:
        self.model = model if isinstance(model, EngenModel) else EngenModel.load(model)
        self.name = self.model.identity
        self.batch_size = batch_size
        self._texts: list[AnnotatedText] = []
        self._nlp: Any = None

    def bind(self, texts: Sequence[AnnotatedText]) -> EngenScorer:
        """Use these texts' annotations for contexts that are their prefixes."""
        self._texts = list(texts)
        return self

    def _context_mentions(self, context: str) -> list[Any]:
        for text in self._texts:
            if text.text.startswith(context):
                return [m for m in text.mentions if m.end <= len(context)]
        if self._nlp is None:
            from storyeval.models import load_spacy

            self._nlp = load_spacy()
        from storyeval.entities import detect_mentions

        return list(detect_mentions([("context", context)], nlp=self._nlp)[0].mentions)

    def _total(self, items: list[tuple[AnnotatedText, int, bool, bool]]) -> list[float]:
        """For each (text, character offset, count words, count decisions): the summed
        log-probabilities of the positions from the offset on."""
        import torch

        config = self.model.config
        results: list[float] = []
        with torch.no_grad():
            for start in range(0, len(items), self.batch_size):
                chunk = items[start : start + self.batch_size]
                encoded = [
                    encode(t, self.model.vocab, config, end_of_text=False) for t, *_ in chunk
                ]
                states, previous = _forward(self.model.module, encoded)
                terms = _batch_terms(self.model.module, encoded, states, previous, config)
                for (text, offset, words, decisions), (word_lp, decision_lp) in zip(
                    chunk, terms, strict=True
                ):
                    first = 1 + sum(1 for _, s, _ in tokenize(text.text) if s < offset)
                    total = 0.0
                    if words:
                        total += float(word_lp[first - 1 :].sum())
                    if decisions:
                        total += float(decision_lp[first - 1 :].sum())
                    results.append(total)
        return results

    def score_mentions(self, requests: Sequence[tuple[str, str, str]]) -> list[float]:
        """The score of each ``(context, words, cluster)`` candidate (see the class)."""
        from storyeval.entities import Mention

        items = []
        for context, words, cluster in requests:
            earlier = self._context_mentions(context)
            if cluster and not words:  # cluster only: the entity decision at the next word
                text, at = _joined(context, UNK)
                mention = Mention(at, len(text), cluster)
                items.append((AnnotatedText("c", text, (*earlier, mention)), at, False, True))
            elif cluster:
                text, at = _joined(context, words)
                mention = Mention(at, len(text), cluster)
                items.append((AnnotatedText("c", text, (*earlier, mention)), at, True, True))
            else:
                text, at = _joined(context, words)
                items.append((AnnotatedText("c", text, tuple(earlier)), at, True, False))
        return self._total(items)

    def score(self, requests: Sequence[tuple[str, str]]) -> list[float]:
        """``log P(continuation | context)`` of each pair (words and entity decisions; the
        mentions of both found by the approximate detector unless bound)."""
        from storyeval.entities import detect_mentions

        if self._nlp is None:
            from storyeval.models import load_spacy

            self._nlp = load_spacy()
        items = []
        for context, continuation in requests:
            text, at = _joined(context, continuation)
            [annotated] = detect_mentions([("c", text)], nlp=self._nlp)
            items.append((annotated, at, True, self.model.config.entities))
        return self._total(items)
