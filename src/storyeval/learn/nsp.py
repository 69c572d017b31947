"""A trainable next-sentence-prediction (NSP) head, so the coherence metrics of Callan and
Foster (2023) (``nsp_prompt``, ``nsp_prev``) work with an encoder that ships without one.

Training pairs follow BERT's NSP objective: for every pair of consecutive sentences
``(A, B)`` of a story (the prompt's sentences come first), the true pair is labelled
``IsNext`` and ``A`` with a sentence drawn at random from another story is labelled
``NotNext``, so the classes are balanced. Two architectures:

* ``cross``: a transformers ``BertForNextSentencePrediction`` reading ``[CLS] A [SEP] B``
  (label 0 = B follows A, as in transformers); the directory loads with
  ``BertForNextSentencePrediction.from_pretrained(DIR)``. Right for a BERT pre-trained with
  NSP (bert-base-uncased): its head starts trained.
* ``siamese``: ``sigmoid(scale * cos(e(A), e(B)) + bias)`` over the encoder's mean-pooled
  embeddings (:mod:`storyeval.learn.siamese`); the directory holds the fine-tuned encoder
  (``AutoModel.from_pretrained(DIR)``) and ``nsp_head.safetensors``. Right for sentence
  encoders such as the offline all-MiniLM-L6-v2, whose [CLS] vector was never trained: a cross
  head on it stays at chance on a corpus of hundreds of pairs, while the siamese head starts
  above chance and improves.

``auto`` (the default) picks ``cross`` when the base checkpoint has a trained NSP head and
``siamese`` otherwise. Every directory carries ``storyeval.json`` with the signature.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from storyeval.base.errors import ModelLoadError
from storyeval.base.signature import Signature
from storyeval.base.validation import check_choice, check_fraction
from storyeval.corpus import Story
from storyeval.learn.data import InsufficientDataError, training_data
from storyeval.learn.encoding import Encoded, encode_pair, pad_batch, pad_id
from storyeval.learn.trainer import TrainingConfig, TrainingResult, existing_model, fit
from storyeval.perturb.base import story_rng

IS_NEXT = 0
NOT_NEXT = 1
ARCHITECTURES = ("auto", "cross", "siamese")
HEAD_FILE = "nsp_head.safetensors"  # the siamese head (see storyeval.learn.siamese)


@dataclass(frozen=True)
class NspConfig:
    """What defines an NSP model besides the optimization settings.

    Attributes
    ----------
    encoder : str or None
        Base model: ``None`` for the offline all-MiniLM-L6-v2, a local directory or a BERT
        hub name. It must be a BERT model (``model_type`` ``bert``).
    max_length : int
        Longest pair in tokens.
    use_prompt : bool
        Include the prompt's sentences before the story's (so the pair (last prompt
        sentence, first story sentence) is trained too).
    dev_fraction : float
        Share of the stories held out for early stopping.
    architecture : str
        ``cross`` (BERT NSP head on [CLS] of the pair), ``siamese`` (cosine of mean-pooled
        embeddings) or ``auto``: ``cross`` when the base checkpoint has a trained NSP head,
        else ``siamese``. For ``siamese``, ``max_length`` applies to each text.
    """

    encoder: str | None = None
    max_length: int = 128
    use_prompt: bool = True
    dev_fraction: float = 0.1
    architecture: str = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.max_length, int) or not 16 <= self.max_length <= 4096:
            raise ValueError(
                f"max_length must be an integer in [16, 4096]; got {self.max_length!r}"
            )
        check_fraction(self.dev_fraction, "dev_fraction")
        check_choice(self.architecture, ARCHITECTURES, "architecture")


@dataclass(frozen=True)
class NspExample:
    """A sentence pair; ``label`` is 0 (IsNext) or 1 (NotNext)."""

    first: str
    second: str
    label: int


def nsp_pairs(
    stories: Sequence[Story],
    *,
    seed: int,
    use_prompt: bool = True,
    others: Sequence[Story] = (),
) -> list[NspExample]:
    """Consecutive sentence pairs (IsNext) and, for each, the same first sentence with a
    random sentence of another story (NotNext). ``others`` adds stories whose sentences
    only serve as random second sentences (e.g. the training stories for the dev pairs).

    Raises
    ------
    InsufficientDataError
        When there are fewer than two stories or no story has two sentences.

    Examples
    --------
    >>> from storyeval.corpus import Story
    >>> pairs = nsp_pairs([Story("a", "", "A1. A2."), Story("b", "", "B1. B2.")], seed=0)
    >>> [(p.first, p.second, p.label) for p in pairs]
    [('A1.', 'A2.', 0), ('A1.', 'B1.', 1), ('B1.', 'B2.', 0), ('B1.', 'A2.', 1)]
    """
    from storyeval.text import split_sentences

    def sentences_of(story: Story) -> list[str]:
        parts = split_sentences(story.prompt) if use_prompt and story.prompt else []
        return parts + split_sentences(story.story)

    sentences = {story.id: sentences_of(story) for story in stories}
    pool = [(sid, s) for sid, items in sentences.items() for s in items]
    pool += [(f"other:{o.id}", s) for o in others for s in sentences_of(o)]
    if len({sid for sid, _ in pool}) < 2:
        raise InsufficientDataError("NSP training needs at least 2 stories (for random pairs)")
    examples: list[NspExample] = []
    for story_id, items in sentences.items():
        candidates = [s for sid, s in pool if sid != story_id]
        rng: random.Random = story_rng(seed, "nsp", story_id)
        for first, second in itertools.pairwise(items):
            examples.append(NspExample(first, second, IS_NEXT))
            examples.append(NspExample(first, rng.choice(candidates), NOT_NEXT))
    if not examples:
        raise InsufficientDataError(
            "no story has two consecutive sentences: NSP training needs sentence pairs"
        )
    return examples


class NspTask:
    """Loss and evaluation of the NSP head for :func:`storyeval.learn.trainer.fit`."""

    kind = "nsp"
    head_prefixes = ("cls.",)

    def __init__(self, model: Any, tokenizer: Any, config: NspConfig) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self._pad = pad_id(tokenizer)
        self._cache: dict[tuple[str, str], Encoded] = {}

    def _tensors(self, batch: Sequence[NspExample]) -> dict[str, Any]:
        import torch

        encoded = []
        for example in batch:
            key = (example.first, example.second)
            if key not in self._cache:
                self._cache[key] = encode_pair(
                    self.tokenizer, example.first, example.second, self.config.max_length
                )
            encoded.append(self._cache[key])
        tensors = pad_batch(encoded, self._pad)
        tensors["labels"] = torch.tensor([e.label for e in batch], dtype=torch.long)
        return tensors

    def example_length(self, example: NspExample) -> int:
        """A cheap length (characters) for length-bucketed batches."""
        return len(example.first) + len(example.second)

    def batch_loss(self, batch: Sequence[NspExample]) -> tuple[Any, dict[str, Any]]:
        """Cross-entropy of the NSP head on a batch of pairs, and the values to show."""
        output = self.model(**self._tensors(batch))
        return output.loss, {"loss": output.loss.detach()}

    def evaluate(self, examples: Sequence[NspExample]) -> dict[str, float]:
        """Dev loss and accuracy."""
        import torch.nn.functional as F

        total = correct = 0.0
        for start in range(0, len(examples), 64):
            batch = examples[start : start + 64]
            tensors = self._tensors(batch)
            logits = self.model(
                input_ids=tensors["input_ids"],
                attention_mask=tensors["attention_mask"],
                token_type_ids=tensors["token_type_ids"],
            ).logits
            total += float(F.cross_entropy(logits, tensors["labels"], reduction="sum"))
            correct += float((logits.argmax(dim=-1) == tensors["labels"]).sum())
        return {"loss": total / len(examples), "accuracy": correct / len(examples)}

    def save(self, directory: Path) -> None:
        """Write the model (loadable with ``from_pretrained``) and the tokenizer."""
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)


class SiameseNspTask:
    """Loss and evaluation of the siamese NSP head for :func:`storyeval.learn.trainer.fit`."""

    kind = "nsp"
    head_prefixes = ("head.",)

    def __init__(self, model: Any, tokenizer: Any, config: NspConfig) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = config

    def logits(self, batch: Sequence[NspExample]) -> Any:
        """The head's logits for a batch of pairs."""
        from storyeval.learn.siamese import tokenize

        first = tokenize(self.tokenizer, [e.first for e in batch], self.config.max_length)
        second = tokenize(self.tokenizer, [e.second for e in batch], self.config.max_length)
        return self.model(first, second)

    @staticmethod
    def targets(batch: Sequence[NspExample]) -> Any:
        """The labels of a batch of pairs as a float tensor."""
        import torch

        return torch.tensor([1.0 if e.label == IS_NEXT else 0.0 for e in batch])

    def example_length(self, example: NspExample) -> int:
        """A cheap length (characters) for length-bucketed batches."""
        return len(example.first) + len(example.second)

    def batch_loss(self, batch: Sequence[NspExample]) -> tuple[Any, dict[str, Any]]:
        """Binary cross-entropy of the siamese head on a batch of pairs."""
        import torch.nn.functional as F

        loss = F.binary_cross_entropy_with_logits(self.logits(batch), self.targets(batch))
        return loss, {"loss": loss.detach()}

    def evaluate(self, examples: Sequence[NspExample]) -> dict[str, float]:
        """Dev loss and accuracy."""
        import torch.nn.functional as F

        total = correct = 0.0
        for start in range(0, len(examples), 64):
            batch = examples[start : start + 64]
            logits, targets = self.logits(batch), self.targets(batch)
            total += float(F.binary_cross_entropy_with_logits(logits, targets, reduction="sum"))
            correct += float(((logits > 0).float() == targets).sum())
        return {"loss": total / len(examples), "accuracy": correct / len(examples)}

    def initialize_head(self, examples: Sequence[NspExample], *, limit: int = 2000) -> None:
        """Fit the head to the untrained encoder's cosines on (at most ``limit``) pairs."""
        import torch

        from storyeval.learn.siamese import fit_head_to_cosines, tokenize

        sample = list(examples[:limit])
        cosines = []
        self.model.eval()
        with torch.no_grad():
            for start in range(0, len(sample), 64):
                batch = sample[start : start + 64]
                first = tokenize(self.tokenizer, [e.first for e in batch], self.config.max_length)
                second = tokenize(self.tokenizer, [e.second for e in batch], self.config.max_length)
                cosines.append(self.model.cosine(first, second))
        self.model.train()
        fit_head_to_cosines(self.model, torch.cat(cosines), self.targets(sample))

    def save(self, directory: Path) -> None:
        """Write the encoder, the tokenizer and the head."""
        directory.mkdir(parents=True, exist_ok=True)
        self.model.encoder.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        self.model.save_head(directory)


def checkpoint_keys(path: Path) -> set[str] | None:
    """Parameter names stored in a local checkpoint directory (None if none is found)."""
    keys: set[str] = set()
    found = False
    for file in sorted(path.glob("*.safetensors")):
        from safetensors import safe_open

        found = True
        with safe_open(str(file), framework="pt") as handle:
            keys.update(handle.keys())
    if not found:
        for file in sorted(path.glob("pytorch_model*.bin")):
            import torch

            found = True
            state = torch.load(str(file), map_location="cpu", weights_only=True, mmap=True)
            keys.update(state.keys())
    return keys if found else None


def has_trained_nsp_head(path_or_name: str | Path) -> bool | None:
    """Whether a checkpoint stores BERT next-sentence-prediction weights
    (``cls.seq_relationship``); a model without them would get a randomly initialised head
    from ``BertForNextSentencePrediction.from_pretrained``.

    Returns None when the checkpoint files cannot be inspected (a hub name not cached).
    """
    path = Path(path_or_name).expanduser()
    keys: set[str] | None = None
    if path.is_dir():
        keys = checkpoint_keys(path)
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            for filename in ("model.safetensors", "pytorch_model.bin"):
                cached = try_to_load_from_cache(str(path_or_name), filename)
                if isinstance(cached, str):
                    keys = checkpoint_keys(Path(cached).parent)
                    break
        except ImportError:  # pragma: no cover
            keys = None
    if keys is None:
        return None
    return any(key.endswith("seq_relationship.weight") for key in keys)


def resolve_architecture(config: NspConfig) -> str:
    """``config.architecture`` with ``auto`` decided by the base checkpoint."""
    if config.architecture != "auto":
        return config.architecture
    from storyeval.models import resolve_model_path

    _, path, _ = resolve_model_path(config.encoder, "encoder")
    return "cross" if has_trained_nsp_head(path) else "siamese"


def _base_cross_model(name: str | None) -> tuple[Any, Any, str]:
    """A ``BertForNextSentencePrediction`` from the base encoder (its NSP head as stored,
    or newly initialised), its tokenizer and the base identity."""
    import warnings

    import torch
    from transformers import AutoModel, BertForNextSentencePrediction

    from storyeval.models import load_pretrained

    loaded = load_pretrained(name, "encoder", AutoModel, option="--model")
    model_type = getattr(loaded.model.config, "model_type", None)
    if model_type != "bert":
        raise ModelLoadError(
            f"{loaded.name}: the cross NSP head needs a BERT model (model_type 'bert'); this one "
            f"is {model_type!r}. Use --architecture siamese or a BERT such as bert-base-uncased"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = BertForNextSentencePrediction.from_pretrained(loaded.path, dtype=torch.float32)
    return model, loaded.tokenizer, loaded.identity


def _base_siamese_model(name: str | None) -> tuple[Any, Any, str]:
    """A :class:`~storyeval.learn.siamese.SiameseNsp` over a private copy of the encoder."""
    import copy

    from transformers import AutoModel

    from storyeval.learn.siamese import SiameseNsp
    from storyeval.models import load_pretrained

    loaded = load_pretrained(name, "encoder", AutoModel, option="--model")
    return SiameseNsp(copy.deepcopy(loaded.model).float()), loaded.tokenizer, loaded.identity


def nsp_signature(
    config: NspConfig,
    training: TrainingConfig,
    *,
    encoder_identity: str,
    architecture: str,
    data: str,
    n: int,
    dev: str,
) -> Signature:
    """The signature of an NSP head: base model, task settings, optimization and data hash."""
    return Signature(
        "nsp",
        {
            "encoder": encoder_identity,
            "architecture": architecture,
            "max_length": config.max_length,
            "prompt": config.use_prompt,
            **training.signature_fields(),
            "data": data,
            "stories": n,
            "dev": dev,
        },
    )


def train_nsp(
    stories: Sequence[Story],
    output: str | Path,
    *,
    config: NspConfig | None = None,
    training: TrainingConfig | None = None,
    dev_stories: Sequence[Story] | None = None,
    overwrite: bool = False,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
) -> TrainingResult:
    """Train an NSP head (and fine-tune the encoder under it) on a story corpus.

    Parameters mirror :func:`storyeval.learn.union.train_union`. The result directory loads
    with :class:`NspScorer` (and the nsp metrics' ``nsp.model`` option); a ``cross`` one also
    with ``transformers.BertForNextSentencePrediction.from_pretrained(output)``. A ``siamese``
    head starts at the logistic fit of the untrained cosines on the training pairs.

    Raises
    ------
    InsufficientDataError
        When the corpus is too small to split or has no sentence pairs.
    storyeval.base.errors.ModelLoadError
        When the base model is not a BERT model.
    """
    config = config or NspConfig()
    training = training or TrainingConfig()
    data = training_data(stories, dev_stories, dev_fraction=config.dev_fraction, seed=training.seed)
    train_stories, dev_list = data.train, data.dev
    import torch

    architecture = resolve_architecture(config)
    torch.manual_seed(training.seed)  # a new cross NSP head is initialized while loading
    base = _base_cross_model if architecture == "cross" else _base_siamese_model
    model, tokenizer, identity = base(config.encoder)
    signature = nsp_signature(
        config,
        training,
        encoder_identity=identity,
        architecture=architecture,
        data=data.data_hash,
        n=len(train_stories),
        dev=data.dev_tag,
    )
    reused = existing_model(output, signature, overwrite=overwrite)
    if reused is not None:
        return reused
    train_pairs = nsp_pairs(train_stories, seed=training.seed, use_prompt=config.use_prompt)
    dev_pairs = nsp_pairs(
        dev_list, seed=training.seed + 1, use_prompt=config.use_prompt, others=train_stories
    )
    task: NspTask | SiameseNspTask
    initial: dict[str, float] = {}
    if architecture == "cross":
        task = NspTask(model, tokenizer, config)
    else:
        task = SiameseNspTask(model, tokenizer, config)
        task.initialize_head(train_pairs)
        with torch.no_grad():
            initial = task.evaluate(dev_pairs)  # the fitted head before any fine-tuning
    return fit(
        task,
        train_pairs,
        dev_pairs,
        training,
        output,
        signature,
        task_config=asdict(config)
        | {"architecture": architecture, "base_identity": identity, "is_next_label": IS_NEXT},
        data_summary={
            "train_stories": len(train_stories),
            "dev_stories": len(dev_list),
            "train_pairs": len(train_pairs),
            "dev_pairs": len(dev_pairs),
            "hash": signature.fields["data"],
            "initial_dev": initial,
        },
        overwrite=overwrite,
        progress=progress,
        on_step=on_step,
    )


def has_nsp_head(directory: str | Path) -> bool:
    """Whether a model directory holds a trained NSP head: BERT's ``cls.seq_relationship``
    weights or a siamese head (``nsp_head.safetensors``)."""
    path = Path(directory)
    return (path / HEAD_FILE).is_file() or bool(has_trained_nsp_head(path))


class NspScorer:
    """A trained NSP model (cross or siamese): the probability that a text follows another.

    ``identity`` names the directory and its content hash; ``architecture`` is ``cross`` or
    ``siamese``.

    Raises
    ------
    storyeval.base.errors.ModelLoadError
        When the directory has no trained NSP head (a bare encoder, a UNION model).
    """

    def __init__(self, directory: str | Path) -> None:
        import torch

        from storyeval.learn.trainer import read_metadata
        from storyeval.models import file_identity
        from storyeval.models.loading import quiet_transformers

        quiet_transformers()
        path = Path(directory).expanduser().resolve()
        if not path.is_dir():
            raise ModelLoadError(f"{directory}: no such NSP model directory")
        if not has_nsp_head(path):
            raise ModelLoadError(
                f"{directory}: has no next-sentence-prediction head (cls.seq_relationship or "
                f"{HEAD_FILE}); train one with `storyeval train nsp --stories HUMAN.jsonl -o DIR`"
            )
        self.metadata = read_metadata(path) if (path / "storyeval.json").is_file() else None
        config = (self.metadata or {}).get("config", {})
        self.architecture = "siamese" if (path / HEAD_FILE).is_file() else "cross"
        self.max_length = int(config.get("max_length", 0) or 512)
        self.identity = f"{path.name}@{file_identity(str(path))}"
        self.model: Any
        if self.architecture == "siamese":
            from transformers import AutoModel, AutoTokenizer

            from storyeval.learn.siamese import SiameseNsp

            self.tokenizer = AutoTokenizer.from_pretrained(str(path))
            self.model = SiameseNsp(AutoModel.from_pretrained(str(path), dtype=torch.float32))
            self.model.load_head(path)
        else:
            from transformers import AutoTokenizer, BertForNextSentencePrediction

            self.tokenizer = AutoTokenizer.from_pretrained(str(path))
            self.model = BertForNextSentencePrediction.from_pretrained(
                str(path), dtype=torch.float32
            )
        self.model.eval()

    def probabilities(
        self, pairs: Sequence[tuple[str, str]], *, batch_size: int = 64
    ) -> list[float]:
        """P(IsNext) for each ``(context, text)`` pair, in order. Batches group pairs of
        similar length so padding stays small."""
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        values = [0.0] * len(pairs)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            batch = [pairs[i] for i in chunk]
            found = self._siamese(batch) if self.architecture == "siamese" else self._cross(batch)
            for index, value in zip(chunk, found, strict=True):
                values[index] = value
        return values

    def _siamese(self, batch: Sequence[tuple[str, str]]) -> list[float]:
        import torch

        from storyeval.learn.siamese import tokenize

        with torch.inference_mode():
            first = tokenize(self.tokenizer, [a for a, _ in batch], self.max_length)
            second = tokenize(self.tokenizer, [b for _, b in batch], self.max_length)
            result: list[float] = torch.sigmoid(self.model(first, second)).tolist()
        return result

    def _cross(self, batch: Sequence[tuple[str, str]]) -> list[float]:
        import torch

        encoded = [encode_pair(self.tokenizer, a, b, self.max_length) for a, b in batch]
        with torch.inference_mode():
            logits = self.model(**pad_batch(encoded, pad_id(self.tokenizer))).logits.float()
            result: list[float] = torch.softmax(logits, dim=-1)[:, IS_NEXT].tolist()
        return result
