"""UNION (Guan & Huang 2020): an unreferenced story metric learned from perturbed stories.

The model is a BERT-like encoder with two heads:

* a classifier on the ``[CLS]`` vector, ``y = sigmoid(W_c v_CLS + b_c)``, the probability that
  the story was written by a human (Eq. 2), trained with binary cross-entropy (Eq. 3);
* a reconstruction head, a linear layer over the vocabulary on every token,
  ``P(r_i | s) = softmax(W_r v_i + b_r)`` (Eq. 4), trained to recover the original story
  ``r`` token by token from the perturbed story ``s`` (Eq. 5, the mean negative
  log-likelihood over the story's tokens; positions where the original has no token are
  left out).

The loss is ``mean_n (L_C + lambda * L_R)`` with lambda = 0.1 (Eq. 6). Training data are the
human stories (label 1, reconstructing themselves) and one negative sample per story
(label 0) made by a random mixture of repetition, substitution, reordering and negation
(:func:`storyeval.perturb.sample_mixture`). The score of a story is ``y`` in [0, 1].

Implementation choices the paper leaves open are documented where they are made: the
reconstruction head starts from a copy of the encoder's input word embeddings; the leading
context (prompt), when present, is the first segment of a pair input
(``[CLS] prompt [SEP] story [SEP]``) and only the story is perturbed.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from storyeval.base.errors import StoryevalError
from storyeval.base.signature import Signature
from storyeval.base.validation import check_fraction
from storyeval.corpus import Story
from storyeval.learn.data import training_data
from storyeval.learn.encoding import (
    Encoded,
    default_device,
    encode_pair,
    moved,
    pad_batch_on_host,
    pad_id,
    to_default_device,
)
from storyeval.learn.trainer import (
    TrainingConfig,
    TrainingResult,
    fit,
)
from storyeval.perturb.base import PerturbOptions, parse_techniques

HEADS_FILE = "union_heads.safetensors"


@dataclass(frozen=True)
class UnionConfig:
    """What defines a UNION model besides the optimization settings.

    Attributes
    ----------
    encoder : str or None
        Base encoder: ``None`` for the offline all-MiniLM-L6-v2, a local directory or any
        BERT-like hub name (``bert-base-uncased`` is the paper's).
    techniques : tuple of str
        Techniques negatives are drawn from (leave some out for the paper's ablations).
    reconstruction : bool
        Train the reconstruction head (``False`` is the paper's "-Recon" ablation).
    lam : float
        Weight of the reconstruction loss (lambda, 0.1).
    max_length : int
        Longest input in tokens (prompt and story); longer training inputs are cut (the
        perturbation may then be past the cut: use ``window``); longer stories are scored in
        sentence windows that fit, never cut.
    use_prompt : bool
        Give the prompt as the first segment of the input.
    delexicalize : bool
        Mask character names as ``[MALE]``/``[FEMALE]``/``[NEUTRAL]`` (training and scoring).
    negatives : int
        Negative samples per human story (1 in the paper).
    window : int or None
        Train on consecutive windows of this many sentences instead of whole stories (more,
        shorter examples: useful with a short ``max_length``, where perturbations past the
        cut would be invisible; the first window keeps the prompt). Scoring always reads the
        whole story.
    stride : int or None
        Sentences between the starts of consecutive windows (default: ``window``, no
        overlap; 1 gives every window, the most training examples).
    dev_fraction : float
        Share of the stories held out for early stopping (when no dev file is given).
    perturb : PerturbOptions
        Knobs of the techniques.
    recon_sample : int or None
        The reconstruction loss of a training step is a softmax over the batch's own tokens
        (inputs and targets) plus this many vocabulary tokens sampled at random, instead of
        the whole vocabulary (30,522 word pieces for BERT: the full softmax cost more than the
        encoder). ``None``: the full softmax, as in the paper. Dev losses always use the full
        softmax.
    rank_weight : float
        Weight of a pairwise ranking loss added to the paper's (storyeval's variant; 0, the
        paper's loss, by default): each story and its negatives share a batch, and every
        negative adds ``rank_weight * log(1 + exp(z_negative - z_story))`` on the classifier's
        logits (RankNet's logistic loss, Burges et al. 2005), a gradient on what the negative
        changed even when both read as human to the classifier. The dev loss includes it.
    tie_recon : bool
        The reconstruction head's weights are the encoder's input embeddings (as in BERT's
        masked-LM head; a bias of its own): a third fewer parameters to train and checkpoint
        for MiniLM, and a heads file of kilobytes. ``False``: a separate matrix initialized
        from the embeddings (before 0.2.0).
    """

    encoder: str | None = None
    techniques: tuple[str, ...] = ("repetition", "substitution", "reordering", "negation")
    reconstruction: bool = True
    lam: float = 0.1
    max_length: int = 256
    use_prompt: bool = True
    delexicalize: bool = False
    negatives: int = 1
    window: int | None = None
    stride: int | None = None
    dev_fraction: float = 0.1
    perturb: PerturbOptions = field(default_factory=PerturbOptions)
    recon_sample: int | None = 1024
    tie_recon: bool = True
    single_share: float = 0.0
    rank_weight: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "techniques", parse_techniques(list(self.techniques)))
        if not (
            isinstance(self.rank_weight, int | float)
            and self.rank_weight >= 0
            and math.isfinite(self.rank_weight)
        ):
            raise ValueError(f"rank_weight must be a finite number >= 0; got {self.rank_weight!r}")
        if not 0.0 <= self.single_share <= 1.0:
            raise ValueError(f"single_share must be in [0, 1]; got {self.single_share!r}")
        if self.recon_sample is not None and (
            not isinstance(self.recon_sample, int) or self.recon_sample < 0
        ):
            raise ValueError(
                f"recon_sample must be an integer >= 0 or None; got {self.recon_sample!r}"
            )
        if not (isinstance(self.lam, int | float) and self.lam >= 0 and math.isfinite(self.lam)):
            raise ValueError(f"lam must be a finite number >= 0; got {self.lam!r}")
        if not isinstance(self.max_length, int) or not 16 <= self.max_length <= 4096:
            raise ValueError(
                f"max_length must be an integer in [16, 4096]; got {self.max_length!r}"
            )
        if not isinstance(self.negatives, int) or self.negatives < 1:
            raise ValueError(f"negatives must be a positive integer; got {self.negatives!r}")
        check_fraction(self.dev_fraction, "dev_fraction")
        if self.window is not None and (not isinstance(self.window, int) or self.window < 2):
            raise ValueError(f"window must be an integer >= 2 or None; got {self.window!r}")
        if self.stride is not None and (
            self.window is None or not isinstance(self.stride, int) or self.stride < 1
        ):
            raise ValueError(
                f"stride must be a positive integer used with window; got {self.stride!r}"
            )

    def to_dict(self) -> dict[str, Any]:
        """The settings as a JSON-ready mapping (stored with the model)."""
        data = asdict(self)
        data["techniques"] = list(self.techniques)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnionConfig:
        """Settings from :meth:`to_dict`'s mapping."""
        values = dict(data)
        values["techniques"] = tuple(values.get("techniques", cls.techniques))
        values["perturb"] = PerturbOptions(**values.get("perturb", {}))
        values.setdefault("recon_sample", None)  # saved before 0.2.0: the full softmax,
        values.setdefault("tie_recon", False)  # and a separate reconstruction matrix
        values.setdefault("single_share", 0.0)  # before 0.7.0: mixtures only
        values.setdefault("rank_weight", 0.0)  # before 0.7.2: the paper's loss only
        return cls(**values)


@dataclass(frozen=True)
class UnionExample:
    """One training or dev input: ``text`` (label 1: human, 0: perturbed) and the original
    it should be reconstructed into."""

    id: str
    prompt: str
    text: str
    original: str
    label: int
    techniques: tuple[str, ...] = ()
    source_id: str = ""


# --------------------------------------------------------------------------- model


def _union_model_class() -> Any:
    import torch

    class UnionModel(torch.nn.Module):
        """Encoder + classifier on [CLS] + optional reconstruction head over the vocabulary."""

        def __init__(self, encoder: Any, reconstruction: bool, tie: bool = False) -> None:
            super().__init__()
            hidden = encoder.config.hidden_size
            vocab = encoder.config.vocab_size
            self.encoder = encoder
            self.classifier = torch.nn.Linear(hidden, 1)
            std = getattr(encoder.config, "initializer_range", 0.02)
            torch.nn.init.normal_(self.classifier.weight, std=std)
            torch.nn.init.zeros_(self.classifier.bias)
            self.reconstructor: Any = None
            if reconstruction:
                self.reconstructor = torch.nn.Linear(hidden, vocab)
                embeddings = encoder.get_input_embeddings().weight
                if tuple(embeddings.shape) == (vocab, hidden):
                    if tie:  # BERT's MLM head: the decoder is the input embedding matrix
                        self.reconstructor.weight = embeddings
                    else:
                        with torch.no_grad():
                            self.reconstructor.weight.copy_(embeddings)
                torch.nn.init.zeros_(self.reconstructor.bias)

        @property
        def tied(self) -> bool:
            """Whether the reconstruction head shares the input embeddings."""
            embeddings = self.encoder.get_input_embeddings().weight
            return self.reconstructor is not None and self.reconstructor.weight is embeddings

        def forward(
            self,
            input_ids: Any,
            attention_mask: Any,
            token_type_ids: Any = None,
            positions: Any = None,
            vocabulary: Any = None,
        ) -> tuple[Any, Any]:
            """Classifier logits (batch,) and, for ``positions`` (row and column indices), the
            reconstruction logits of those tokens (count, vocab), or over the token ids
            ``vocabulary`` only (count, len(vocabulary)): a sampled softmax."""
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None and _accepts_token_types(self.encoder):
                kwargs["token_type_ids"] = token_type_ids
            hidden = self.encoder(**kwargs).last_hidden_state
            logits = self.classifier(hidden[:, 0]).squeeze(-1)
            recon = None
            if positions is not None and self.reconstructor is not None:
                chosen = hidden[positions]
                if vocabulary is None:
                    recon = self.reconstructor(chosen)
                else:
                    weight = self.reconstructor.weight[vocabulary]
                    recon = torch.nn.functional.linear(
                        chosen, weight, self.reconstructor.bias[vocabulary]
                    )
            return logits, recon

    return UnionModel


def _accepts_token_types(encoder: Any) -> bool:
    return int(getattr(encoder.config, "type_vocab_size", 0) or 0) > 1


def _base_encoder(name: str | None) -> tuple[Any, Any, str]:
    """A fresh trainable copy of the base encoder, its tokenizer and identity."""
    import copy

    from transformers import AutoModel

    from storyeval.models import load_pretrained

    loaded = load_pretrained(name, "encoder", AutoModel, option="--model")
    return copy.deepcopy(loaded.model), loaded.tokenizer, loaded.identity


# --------------------------------------------------------------------------- task


class UnionTask:
    """Loss and evaluation of UNION for :func:`storyeval.learn.trainer.fit`."""

    kind = "union"
    head_prefixes = ("classifier.", "reconstructor.")

    def __init__(self, model: Any, tokenizer: Any, config: UnionConfig) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self._pad = pad_id(tokenizer)
        self._cache: dict[tuple[str, str], Encoded] = {}

    def _encode(self, prompt: str, text: str) -> Encoded:
        key = (prompt, text)
        found = self._cache.get(key)
        if found is None:
            first = prompt if self.config.use_prompt and prompt.strip() else None
            found = encode_pair(self.tokenizer, first, text, self.config.max_length)
            self._cache[key] = found
        return found

    def _tensors(self, batch: Sequence[UnionExample]) -> dict[str, Any]:
        """The batch's inputs on the model's device and, under ``recon``, the reconstruction
        targets as host lists (rows, positions, token ids, targets per row): every index a
        GPU step needs is known before the copy, so nothing waits on the GPU to find it."""
        import torch

        inputs = [self._encode(example.prompt, example.text) for example in batch]
        # on a GPU, widths in steps of 64: each new shape costs kernel set-up the first time
        on_gpu = default_device().type == "cuda"
        host = pad_batch_on_host(
            inputs, self._pad, multiple=64 if on_gpu else 1, limit=self.config.max_length
        )
        rows: list[int] = []
        cols: list[int] = []
        wanted: list[int] = []
        if self.model.reconstructor is not None:
            for row, (example, encoded) in enumerate(zip(batch, inputs, strict=True)):
                original = self._encode(example.prompt, example.original)
                for position, special in enumerate(encoded.special):
                    if special or position >= len(original.input_ids):
                        continue
                    if original.special[position]:
                        continue
                    rows.append(row)
                    cols.append(position)
                    wanted.append(original.input_ids[position])
        tensors = {name: moved(tensor) for name, tensor in host.items()}
        tensors["host_input_ids"] = host["input_ids"]
        tensors["recon"] = (rows, cols, wanted, [rows.count(r) for r in range(len(batch))])
        tensors["labels"] = to_default_device([float(e.label) for e in batch], torch.float32)
        return tensors

    def example_length(self, example: UnionExample) -> int:
        """A cheap length (characters) for length-bucketed batches."""
        return len(example.prompt) + len(example.text)

    def _sampled_vocabulary(self, host_ids: Any, wanted: list[int]) -> tuple[Any, Any]:
        """The token ids of a sampled softmax (the batch's inputs and targets and
        ``recon_sample`` random ids, sorted) and the targets as positions among them, found
        on the CPU (its random generator) and copied to the model's device."""
        import torch

        size = self.model.reconstructor.out_features
        sample = torch.randint(0, size, (int(self.config.recon_sample or 0),), device="cpu")
        targets = torch.tensor(wanted, dtype=torch.long, device="cpu")
        vocabulary = torch.unique(torch.cat([host_ids.flatten(), targets, sample]))
        return moved(vocabulary), moved(torch.searchsorted(vocabulary, targets))

    def example_group(self, example: UnionExample) -> str | None:
        """With a ranking loss, a story and its negatives share a batch (the trainer's
        groups); otherwise batches are drawn freely (None)."""
        return (example.source_id or example.id) if self.config.rank_weight else None

    def _losses(
        self, batch: Sequence[UnionExample], *, sampled: bool = False
    ) -> tuple[Any, Any, Any, Any]:
        """Per-example classification loss, reconstruction loss and logit, plus the mean
        total loss (the reconstruction over a sampled vocabulary if ``sampled``)."""
        import torch
        import torch.nn.functional as F

        tensors = self._tensors(batch)
        rows, cols, wanted_ids, per_row = tensors["recon"]
        positions = vocabulary = wanted = None
        if self.model.reconstructor is not None:
            positions = (to_default_device(rows), to_default_device(cols))
            if sampled and self.config.recon_sample is not None:
                vocabulary, wanted = self._sampled_vocabulary(tensors["host_input_ids"], wanted_ids)
            else:
                wanted = to_default_device(wanted_ids)
        logits, recon = self.model(
            tensors["input_ids"],
            tensors["attention_mask"],
            tensors["token_type_ids"],
            positions,
            vocabulary,
        )
        cls_loss = F.binary_cross_entropy_with_logits(logits, tensors["labels"], reduction="none")
        recon_loss = torch.zeros_like(cls_loss)
        if recon is not None and positions is not None and wanted is not None:
            token_loss = F.cross_entropy(recon, wanted, reduction="none")
            sums = torch.zeros_like(cls_loss).index_add(0, positions[0], token_loss)
            counts = to_default_device(per_row).clamp(min=1).to(sums.dtype)
            recon_loss = sums / counts
        total = (cls_loss + self.config.lam * recon_loss).mean()
        return cls_loss, recon_loss, logits, total

    def batch_loss(self, batch: Sequence[UnionExample]) -> tuple[Any, dict[str, Any]]:
        """BCE of the classifier plus lambda times the reconstruction loss (plus the ranking
        loss if asked), on a batch."""
        import torch.nn.functional as F

        cls_loss, recon_loss, logits, total = self._losses(batch, sampled=True)
        if self.config.rank_weight:
            ranked = F.softplus(rank_differences(batch, logits))
            if len(ranked):
                total = total + self.config.rank_weight * ranked.mean()
        shown = {"loss": total.detach(), "bce": cls_loss.detach().mean()}
        if self.model.reconstructor is not None:
            shown["nll"] = recon_loss.detach().mean()
        return total, shown

    def evaluate(self, examples: Sequence[UnionExample]) -> dict[str, float]:
        """Dev loss, accuracy, the loss parts and ``pair_accuracy``: the share of negatives
        scored below the story they were made from (ties count half), what
        :func:`heldout_discrimination` measures."""
        import torch
        import torch.nn.functional as F

        total = bce = nll = correct = 0.0
        logits = []
        for start in range(0, len(examples), 32):
            batch = examples[start : start + 32]
            cls_loss, recon_loss, logit, _ = self._losses(batch)
            total += float((cls_loss + self.config.lam * recon_loss).sum())
            bce += float(cls_loss.sum())
            nll += float(recon_loss.sum())
            logits.append(logit.detach().float().cpu())
            labels = [example.label for example in batch]
            correct += sum(
                int((p >= 0.5) == bool(y))
                for p, y in zip(torch.sigmoid(logit).tolist(), labels, strict=True)
            )
        n = len(examples)
        differences = rank_differences(examples, torch.cat(logits)) if n else torch.zeros(0)
        if self.config.rank_weight and len(differences):
            total += self.config.rank_weight * float(F.softplus(differences).mean()) * n
        metrics = {"loss": total / n, "bce": bce / n, "accuracy": correct / n}
        if self.model.reconstructor is not None:
            metrics["nll"] = nll / n
        if len(differences):
            wins = (differences < 0).float() + 0.5 * (differences == 0).float()
            metrics["pair_accuracy"] = float(wins.mean())
        return metrics

    def save(self, directory: Path) -> None:
        """Write the encoder, the tokenizer and the heads."""
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        self.model.encoder.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        heads = {
            f"classifier.{k}": v.contiguous() for k, v in self.model.classifier.state_dict().items()
        }
        if self.model.reconstructor is not None:
            heads.update(
                {
                    f"reconstructor.{k}": v.contiguous()
                    for k, v in self.model.reconstructor.state_dict().items()
                    if not (k == "weight" and self.model.tied)  # it is the encoder's
                }
            )
        save_file(heads, str(directory / HEADS_FILE))


def rank_differences(examples: Sequence[UnionExample], logits: Any) -> Any:
    """``z_negative - z_story`` for every negative whose story is among ``examples``
    (``logits`` in the same order); an empty tensor when there is none."""
    import torch

    rows = {example.id: row for row, example in enumerate(examples) if example.label == 1}
    pairs = [
        (rows[example.source_id], row)
        for row, example in enumerate(examples)
        if example.label == 0 and example.source_id in rows
    ]
    if not pairs:
        return logits.new_zeros(0)
    stories, negatives = torch.tensor(pairs, device=logits.device).T
    return logits[negatives] - logits[stories]


# --------------------------------------------------------------------------- data


def _delexicalized(stories: Sequence[Story], nlp: Any) -> list[Story]:
    from storyeval.perturb.delex import Delexicalizer

    delex = Delexicalizer(nlp=nlp)
    return [delex.story(story) for story in stories]


def sentence_windows(stories: Sequence[Story], size: int, stride: int | None = None) -> list[Story]:
    """Cut each story into windows of ``size`` consecutive sentences, starting every
    ``stride`` sentences (default ``size``: no overlap), with ids ``ID@K``. Without overlap,
    a last window shorter than 2 sentences joins the one before; a story shorter than
    ``size`` is one window. The first window keeps the prompt.

    >>> from storyeval.corpus import Story
    >>> story = Story("a", "P.", "One. Two. Three. Four. Five.")
    >>> [(w.id, w.prompt, w.story) for w in sentence_windows([story], 2)]
    [('a@0', 'P.', 'One. Two.'), ('a@1', '', 'Three. Four. Five.')]
    >>> [w.story for w in sentence_windows([story], 3, stride=1)]
    ['One. Two. Three.', 'Two. Three. Four.', 'Three. Four. Five.']
    """
    from storyeval.text import split_sentences

    step = stride or size
    windows: list[Story] = []
    for story in stories:
        sentences = split_sentences(story.story)
        if step == size:
            groups = [sentences[i : i + size] for i in range(0, len(sentences), size)]
            if len(groups) > 1 and len(groups[-1]) < 2:
                last = groups.pop()
                groups[-1] = groups[-1] + last
        else:
            starts = range(0, max(1, len(sentences) - size + 1), step)
            groups = [sentences[i : i + size] for i in starts]
        for k, group in enumerate(groups):
            windows.append(
                Story(f"{story.id}@{k}", story.prompt if k == 0 else "", " ".join(group))
            )
    return windows


def build_examples(
    stories: Sequence[Story],
    config: UnionConfig,
    *,
    seed: int,
    corpus: Any = None,
    nlp: Any = None,
    progress: bool = False,
) -> tuple[list[UnionExample], dict[str, str]]:
    """The human stories (label 1) and ``config.negatives`` UNION negatives of each
    (label 0). Returns the examples and the stories no technique could perturb (id ->
    reason); those keep their positive example only."""
    from storyeval.perturb.corpus import PerturbationCorpus

    if corpus is None and config.single_share:  # one corpus for every group of stories
        corpus = PerturbationCorpus(((s.id, s.story) for s in stories), nlp=nlp)
    negatives, skipped = [], {}
    for techniques, group in _negative_groups(stories, config, seed):
        run = mixture_negatives(
            group,
            techniques,
            seed=seed,
            samples=config.negatives,
            options=config.perturb,
            nlp=nlp,
            corpus=corpus,
            progress=progress,
        )
        negatives += run.stories
        skipped.update(run.skipped)
    by_id = {story.id: story for story in stories}
    order = {story.id: number for number, story in enumerate(stories)}
    examples = [UnionExample(s.id, s.prompt, s.story, s.story, 1) for s in stories]
    for negative in sorted(negatives, key=lambda n: order[n.source_id]):
        source = by_id[negative.source_id]
        examples.append(
            UnionExample(
                negative.id,
                source.prompt,
                negative.story,
                source.story,
                0,
                tuple(negative.techniques),
                negative.source_id,
            )
        )
    return examples, skipped


def mixture_negatives(
    stories: Sequence[Story],
    techniques: Sequence[str],
    *,
    seed: int,
    samples: int,
    options: PerturbOptions,
    nlp: Any = None,
    corpus: Any = None,
    progress: bool = False,
) -> Any:
    """UNION negatives of ``stories``: ``samples`` mixtures of ``techniques`` each
    (:func:`storyeval.perturb.engine.perturb_stories` in ``mix`` mode), stories no technique
    can change skipped quietly (the run's ``skipped`` names them)."""
    from storyeval.perturb.engine import perturb_stories

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return perturb_stories(
            stories,
            techniques,
            mode="mix",
            seed=seed,
            samples=samples,
            options=options,
            skip_inapplicable=True,
            nlp=nlp,
            corpus=corpus,
            progress=progress,
        )


def _negative_groups(
    stories: Sequence[Story], config: UnionConfig, seed: int
) -> list[tuple[tuple[str, ...], list[Story]]]:
    """Which stories get the paper's mixture of techniques and which one technique alone:
    ``single_share`` of the stories (drawn by a hash of the seed and the story id, so a story's
    draw does not depend on the others) get a single technique, the techniques in turn."""
    import hashlib

    if not config.single_share:
        return [(config.techniques, list(stories))]
    mixed: list[Story] = []
    single: dict[str, list[Story]] = {name: [] for name in config.techniques}
    for story in stories:
        digest = hashlib.sha256(f"{seed}|{story.id}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 < config.single_share:
            name = config.techniques[digest[8] % len(config.techniques)]
            single[name].append(story)
        else:
            mixed.append(story)
    groups: list[tuple[tuple[str, ...], list[Story]]] = (
        [(config.techniques, mixed)] if mixed else []
    )
    return groups + [((name,), group) for name, group in single.items() if group]


def _example_record(example: UnionExample) -> list[Any]:
    return [
        example.id,
        example.prompt,
        example.text,
        example.original,
        example.label,
        list(example.techniques),
        example.source_id,
    ]


def _example_of(record: list[Any]) -> UnionExample:
    return UnionExample(
        record[0], record[1], record[2], record[3], int(record[4]), tuple(record[5]), record[6]
    )


def cached_examples(
    train: Sequence[Story],
    dev: Sequence[Story],
    config: UnionConfig,
    *,
    seed: int,
    nlp: Any,
    progress: bool = False,
) -> tuple[tuple[list[UnionExample], dict[str, str]], tuple[list[UnionExample], dict[str, str]]]:
    """The training and dev examples with their negatives, drawn once per corpus and
    settings and cached on disk (keyed by every story, the techniques, the number of
    negatives, the perturbation options, the seed, the spaCy pipeline and the storyeval
    version), so a second run skips parsing and perturbing."""
    import hashlib
    import json

    from storyeval import __version__
    from storyeval.base.io import write_text_atomic
    from storyeval.models import cache_dir, spacy_identity
    from storyeval.perturb.corpus import PerturbationCorpus

    payload = {
        "train": [(s.id, s.prompt, s.story) for s in train],
        "dev": [(s.id, s.prompt, s.story) for s in dev],
        "techniques": list(config.techniques),
        "negatives": config.negatives,
        **({"single_share": config.single_share} if config.single_share else {}),
        "perturb": config.perturb.signature_fields(),
        "seed": seed,
        "spacy": spacy_identity(nlp),
        "version": __version__,
    }
    key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]
    path = cache_dir() / "union-negatives" / f"{key}.json"
    if path.is_file():
        stored = json.loads(path.read_text(encoding="utf-8"))
        return (
            ([_example_of(r) for r in stored["train"]], stored["skipped_train"]),
            ([_example_of(r) for r in stored["dev"]], stored["skipped_dev"]),
        )
    corpus = PerturbationCorpus(
        ((s.id, s.story) for s in [*train, *dev]), nlp=nlp, progress=progress
    )
    train_part = build_examples(train, config, seed=seed, corpus=corpus, nlp=nlp, progress=progress)
    dev_part = build_examples(dev, config, seed=seed + 1, corpus=corpus, nlp=nlp)
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = {
        "train": [_example_record(e) for e in train_part[0]],
        "skipped_train": train_part[1],
        "dev": [_example_record(e) for e in dev_part[0]],
        "skipped_dev": dev_part[1],
    }
    write_text_atomic(path, json.dumps(stored))
    return train_part, dev_part


def examples_from_file(
    stories: Sequence[Story], path: str | Path
) -> tuple[list[UnionExample], dict[str, str]]:
    """The stories (label 1) and, as their negatives, the records of a ``storyeval perturb``
    output file made from them (label 0); stories without one are reported (id -> reason)."""
    import json

    by_id = {story.id: story for story in stories}
    examples = [UnionExample(s.id, s.prompt, s.story, s.story, 1) for s in stories]
    found: set[str] = set()
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                source = by_id.get(str(record["source_id"]))
                text = str(record["story"])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise StoryevalError(
                    f"{path}:{number}: not a perturbation record ({exc})"
                ) from None
            if source is None:
                continue
            found.add(source.id)
            techniques = tuple(record.get("techniques") or ())
            examples.append(
                UnionExample(
                    str(record.get("id") or f"{source.id}-n{number}"),
                    source.prompt,
                    text,
                    source.story,
                    0,
                    techniques,
                    source.id,
                )
            )
    missing = {s.id: "no negative in the file" for s in stories if s.id not in found}
    return examples, missing


def union_signature(
    config: UnionConfig,
    training: TrainingConfig,
    *,
    encoder_identity: str,
    data: str,
    n_stories: int,
    dev: str,
) -> Signature:
    """The signature of a UNION model: everything that changes its scores."""
    return Signature(
        "union",
        {
            "encoder": encoder_identity,
            "techniques": ",".join(config.techniques),
            "recon": config.reconstruction,
            "lambda": config.lam if config.reconstruction else None,
            "recon_softmax": (
                None
                if not config.reconstruction
                else "full"
                if config.recon_sample is None
                else f"sampled:{config.recon_sample}"
            ),
            "recon_tied": config.tie_recon if config.reconstruction else None,
            "max_length": config.max_length,
            "prompt": config.use_prompt,
            "delex": config.delexicalize,
            "negatives": config.negatives,
            "window": config.window,
            "stride": config.stride,
            "single_share": config.single_share or None,
            "rank_weight": config.rank_weight or None,
            **config.perturb.signature_fields(),
            **training.signature_fields(),
            "data": data,
            "stories": n_stories,
            "dev": dev,
        },
    )


def _prepared(stories: list[Story], config: UnionConfig, nlp: Any) -> list[Story]:
    """The stories as UNION reads them: delexicalized, cut into sentence windows, if asked."""
    if config.delexicalize:
        stories = _delexicalized(stories, nlp)
    if config.window is not None:
        stories = sentence_windows(stories, config.window, config.stride)
    return stories


def _union_examples(
    train_stories: list[Story],
    dev_list: list[Story],
    config: UnionConfig,
    seed: int,
    nlp: Any,
    progress: bool,
    negatives: str | Path | None,
) -> tuple[list[Any], list[Any], dict[str, str]]:
    """Training and dev examples (each story with its negative samples, from a file or drawn
    here and cached) and the stories left without a negative (warned about)."""
    if negatives is not None:
        train_examples, skipped_train = examples_from_file(train_stories, negatives)
        dev_examples, skipped_dev = examples_from_file(dev_list, negatives)
    else:
        (train_examples, skipped_train), (dev_examples, skipped_dev) = cached_examples(
            train_stories, dev_list, config, seed=seed, nlp=nlp, progress=progress
        )
    skipped = {**skipped_train, **skipped_dev}
    if skipped:
        warnings.warn(
            f"{len(skipped)} stor{'y' if len(skipped) == 1 else 'ies'} could not be perturbed "
            f"and have no negative sample (first: {next(iter(skipped.values()))})",
            UserWarning,
            stacklevel=3,
        )
    return train_examples, dev_examples, skipped


def _check_negatives_file(negatives: str | Path | None, config: UnionConfig) -> None:
    """A negatives file holds the raw perturbed stories: they would not be delexicalized or cut
    into windows as the positives are, and the model would learn that difference (masked names,
    window length) instead of the perturbations."""
    if negatives is None:
        return
    done = {
        "delexicalize": (config.delexicalize, "with names masked"),
        "window": (config.window, "cut into sentence windows"),
    }
    if config.single_share:
        raise ValueError(
            "single_share decides how negatives are drawn, and a negatives file already holds "
            "them: leave out one of the two"
        )
    for setting, (value, what) in done.items():
        if value:
            raise ValueError(
                f"a negatives file cannot be used with {setting}: the positives would be "
                f"{what} and the file's perturbed stories not, a difference the model would "
                f"learn instead of the perturbations; prepare the stories before `storyeval "
                "perturb`, or let training draw the negatives (leave out the negatives file)"
            )


def train_union(
    stories: Sequence[Story],
    output: str | Path,
    *,
    config: UnionConfig | None = None,
    training: TrainingConfig | None = None,
    dev_stories: Sequence[Story] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    nlp: Any = None,
    on_step: Callable[[int], None] | None = None,
    negatives: str | Path | None = None,
) -> TrainingResult:
    """Train UNION on human-written stories and write the model to ``output``.

    Parameters
    ----------
    stories : sequence of Story
        Human-written stories (``prompt`` is the leading context, ``story`` the text).
    output : path
        The model directory (see :func:`storyeval.learn.trainer.fit` for resuming).
    config : UnionConfig, optional
        Model, negative sampling and input settings (defaults follow the paper).
    training : TrainingConfig, optional
        Optimization settings (learning rate 5e-5, batch size 10, ...).
    dev_stories : sequence of Story, optional
        A separate dev set; by default ``config.dev_fraction`` of ``stories`` is held out.
    overwrite : bool
        Replace a model trained with other settings in ``output``.
    progress : bool
        Show progress bars.
    nlp : spaCy Language, optional
        Pipeline for the perturbations (default :func:`storyeval.models.load_spacy`).
    on_step : callable, optional
        Called after every optimizer step with the step number.
    negatives : path, optional
        A ``storyeval perturb`` output file whose records (``source_id``, ``story``,
        ``techniques``) are the negatives of the stories they were made from, instead of
        drawing them here. Without it, the negatives drawn for these stories and settings are
        cached on disk (``~/.cache/storyeval/union-negatives``) and reused by the next run.

    Returns
    -------
    TrainingResult
        ``result.dev`` has the dev ``loss``, ``bce``, ``nll`` and ``accuracy`` of the kept
        weights.

    Raises
    ------
    storyeval.learn.data.InsufficientDataError
        When the corpus is too small to split or to train on.
    """
    from storyeval.learn.trainer import existing_model

    config = config or UnionConfig()
    training = training or TrainingConfig()
    _check_negatives_file(negatives, config)
    if nlp is None and (negatives is None or config.delexicalize):
        from storyeval.models import load_spacy  # perturbing and delexicalizing need it, no more

        nlp = load_spacy()
    data = training_data(stories, dev_stories, dev_fraction=config.dev_fraction, seed=training.seed)
    train_stories, dev_list = data.train, data.dev
    encoder, tokenizer, identity = _base_encoder(config.encoder)
    signature = union_signature(
        config,
        training,
        encoder_identity=identity,
        data=data.data_hash,
        n_stories=len(train_stories),
        dev=data.dev_tag,
    )
    if negatives is not None:
        from storyeval.models import file_identity

        fields = {**signature.fields, "negatives_file": file_identity(str(negatives))}
        signature = Signature(signature.name, fields, signature.version)
    reused = existing_model(output, signature, overwrite=overwrite)
    if reused is not None:
        return reused
    train_stories, dev_list = (
        _prepared(train_stories, config, nlp),
        _prepared(dev_list, config, nlp),
    )
    train_examples, dev_examples, skipped = _union_examples(
        train_stories, dev_list, config, training.seed, nlp, progress, negatives
    )
    import torch

    torch.manual_seed(training.seed)
    model = _union_model_class()(encoder, config.reconstruction, tie=config.tie_recon)
    task = UnionTask(model, tokenizer, config)
    train_examples, hidden = visible_negatives(train_examples, task)
    dev_examples, dev_hidden = visible_negatives(dev_examples, task)
    techniques_used: dict[str, int] = {}
    for example in train_examples:
        for name in example.techniques:
            techniques_used[name] = techniques_used.get(name, 0) + 1
    return fit(
        task,
        train_examples,
        dev_examples,
        training,
        output,
        signature,
        task_config=config.to_dict() | {"base_identity": identity},
        data_summary={
            "train_texts": len(train_stories),
            "dev_texts": len(dev_list),
            "negatives_without_source": sorted(skipped),
            "technique_counts": techniques_used,
            "negatives_past_max_length": {"train": hidden, "dev": dev_hidden},
            "hash": signature.fields["data"],
        },
        overwrite=overwrite,
        progress=progress,
        on_step=on_step,
    )


def visible_negatives(
    examples: Sequence[UnionExample], task: UnionTask
) -> tuple[list[UnionExample], int]:
    """The examples without the negatives whose input, cut at ``max_length`` tokens, equals
    their original's: their edit lies past the cut, so the model would be taught that two
    identical inputs differ (a sentence repetition late in a long story, for instance).
    Returns the kept examples and how many negatives were dropped (a warning counts them)."""
    kept, dropped = [], 0
    for example in examples:
        if example.label == 0 and example.text != example.original:
            seen = task._encode(example.prompt, example.text).input_ids
            if seen == task._encode(example.prompt, example.original).input_ids:
                dropped += 1
                continue
        kept.append(example)
    if dropped:
        warnings.warn(
            f"{dropped} negative(s) left out: their edits lie past max_length "
            f"({task.config.max_length} tokens), so they read as their originals (raise "
            "--max-length or train on --window)",
            UserWarning,
            stacklevel=2,
        )
    return kept, dropped
