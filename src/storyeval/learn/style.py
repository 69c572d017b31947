"""The classifiers of classifier-based style-transfer evaluation (De Mattei et al. 2021).

* :class:`StyleClassifier` (the paper's *main* classifier): an encoder, the mean of its last
  hidden states, and a linear layer over the two styles. The layer starts at the logistic
  regression of the style on the untrained embeddings (sentence encoders separate registers
  well before any fine-tuning), then the encoder and the layer are fine-tuned together.
* match classifiers (the paper's *HH*, original vs output, and *AH*, source document vs
  output): the siamese head of :mod:`storyeval.learn.siamese`,
  ``P(match) = sigmoid(scale * cos(e(A), e(B)) + bias)``, started at the logistic fit of the
  untrained cosines. The paper fine-tunes a cross-encoder BERT; a cross head on a sentence
  encoder's never-trained [CLS] vector stays at chance on corpora of hundreds of pairs (see
  :mod:`storyeval.learn.nsp`), so storyeval uses the siamese form with every encoder.

Every model directory holds the fine-tuned encoder (``AutoModel.from_pretrained(DIR)``), its
tokenizer, the head (``style_head.safetensors`` or ``match_head.safetensors``) and
``storyeval.json`` with the signature. This module imports torch at import time;
:mod:`storyeval.analyses.classifier_eval` imports it lazily.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from storyeval.base.errors import ModelLoadError
from storyeval.base.signature import Signature
from storyeval.learn.nsp import IS_NEXT, NOT_NEXT, NspConfig, NspExample, SiameseNspTask
from storyeval.learn.siamese import SiameseNsp, mean_pooled, tokenize
from storyeval.learn.trainer import TrainingConfig, TrainingResult, fit

STYLE_HEAD_FILE = "style_head.safetensors"
MATCH_HEAD_FILE = "match_head.safetensors"
BATCH = 64


@dataclass(frozen=True)
class TextExample:
    """A text and the index of its style (in the classifier's ``labels``)."""

    text: str
    label: int


@dataclass(frozen=True)
class PairExample:
    """Two texts and whether they match (same content, or the text fits the document)."""

    first: str
    second: str
    match: bool


class StyleClassifier(torch.nn.Module):
    """An encoder, mean pooling (L2-normalised) and a linear layer over the styles."""

    def __init__(self, encoder: Any, n_labels: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = torch.nn.Linear(int(encoder.config.hidden_size), n_labels)

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Logits over the styles, one row per text."""
        result: torch.Tensor = self.head(mean_pooled(self.encoder, inputs))
        return result

    def save_head(self, directory: Path) -> None:
        """Write the linear layer into ``directory``."""
        from safetensors.torch import save_file

        state = {k: v.detach().clone() for k, v in self.head.state_dict().items()}
        save_file(state, str(directory / STYLE_HEAD_FILE))

    def load_head(self, directory: Path) -> None:
        """Read the linear layer from ``directory``."""
        from safetensors.torch import load_file

        self.head.load_state_dict(load_file(str(directory / STYLE_HEAD_FILE)))


def _embeddings(model: Any, tokenizer: Any, texts: Sequence[str], max_length: int) -> np.ndarray:
    parts = []
    with torch.no_grad():
        for start in range(0, len(texts), BATCH):
            batch = tokenize(tokenizer, texts[start : start + BATCH], max_length)
            parts.append(mean_pooled(model.encoder, batch).numpy())
    return np.concatenate(parts)


class StyleTask:
    """Loss and evaluation of the style classifier for :func:`storyeval.learn.trainer.fit`."""

    kind = "style_classifier"
    head_prefixes = ("head.",)

    def __init__(self, model: StyleClassifier, tokenizer: Any, max_length: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length

    def logits(self, batch: Sequence[TextExample]) -> torch.Tensor:
        """The classifier's logits for a batch of texts."""
        logits: torch.Tensor = self.model(
            tokenize(self.tokenizer, [e.text for e in batch], self.max_length)
        )
        return logits

    def example_length(self, example: TextExample) -> int:
        """A cheap length (characters) for length-bucketed batches."""
        return len(example.text)

    def batch_loss(self, batch: Sequence[TextExample]) -> tuple[Any, dict[str, Any]]:
        """Cross-entropy over the styles."""
        targets = torch.tensor([e.label for e in batch], dtype=torch.long)
        loss = F.cross_entropy(self.logits(batch), targets)
        return loss, {"loss": loss.detach()}

    def evaluate(self, examples: Sequence[TextExample]) -> dict[str, float]:
        """Dev loss and accuracy."""
        total = correct = 0.0
        for start in range(0, len(examples), BATCH):
            batch = examples[start : start + BATCH]
            targets = torch.tensor([e.label for e in batch], dtype=torch.long)
            logits = self.logits(batch)
            total += float(F.cross_entropy(logits, targets, reduction="sum"))
            correct += float((logits.argmax(dim=-1) == targets).sum())
        return {"loss": total / len(examples), "accuracy": correct / len(examples)}

    def initialize_head(self, examples: Sequence[TextExample]) -> None:
        """Start the layer at the logistic regression of the style on the untrained
        embeddings, so fine-tuning starts from a working classifier."""
        from sklearn.linear_model import LogisticRegression

        self.model.eval()
        x = _embeddings(self.model, self.tokenizer, [e.text for e in examples], self.max_length)
        self.model.train()
        y = np.array([e.label for e in examples])
        fitted = LogisticRegression(C=10.0, max_iter=1000).fit(x, y)
        coef, intercept = fitted.coef_, fitted.intercept_
        if coef.shape[0] == 1:  # binary: logit(class 1) - logit(class 0) = w.x + b
            coef = np.vstack([np.zeros_like(coef), coef])
            intercept = np.array([0.0, float(intercept[0])])
        with torch.no_grad():
            self.model.head.weight.copy_(torch.as_tensor(coef, dtype=torch.float32))
            self.model.head.bias.copy_(torch.as_tensor(intercept, dtype=torch.float32))

    def save(self, directory: Path) -> None:
        """Write the encoder, the tokenizer and the layer."""
        directory.mkdir(parents=True, exist_ok=True)
        self.model.encoder.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        self.model.save_head(directory)


class MatchTask(SiameseNspTask):
    """The siamese NSP task on (text, text) pairs whose label 0 means "match"."""

    kind = "match_classifier"

    def save(self, directory: Path) -> None:
        """Write the encoder, the tokenizer and the head."""
        directory.mkdir(parents=True, exist_ok=True)
        self.model.encoder.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        self.model.save_head(directory, MATCH_HEAD_FILE)


def _base_encoder(name: str | None) -> tuple[Any, Any, str]:
    """A private float32 copy of the base encoder, its tokenizer and identity."""
    from transformers import AutoModel

    from storyeval.models import load_pretrained

    loaded = load_pretrained(name, "encoder", AutoModel, option="--model")
    return copy.deepcopy(loaded.model).float(), loaded.tokenizer, loaded.identity


def _nsp_examples(pairs: Sequence[PairExample]) -> list[NspExample]:
    return [NspExample(p.first, p.second, IS_NEXT if p.match else NOT_NEXT) for p in pairs]


def train_style_classifier(
    train: Sequence[TextExample],
    dev: Sequence[TextExample],
    output: str | Path,
    *,
    labels: Sequence[str],
    encoder: str | None = None,
    max_length: int = 128,
    training: TrainingConfig | None = None,
    data: str = "",
    overwrite: bool = False,
    progress: bool = True,
    on_step: Callable[[int], None] | None = None,
) -> TrainingResult:
    """Fine-tune a style classifier over ``labels`` (``TextExample.label`` indexes them)."""
    training = training or TrainingConfig()
    torch.manual_seed(training.seed)
    base, tokenizer, identity = _base_encoder(encoder)
    model = StyleClassifier(base, len(labels))
    signature = Signature(
        "style_classifier",
        {
            "encoder": identity,
            "labels": ",".join(labels),
            "max_length": max_length,
            **training.signature_fields(),
            "data": data,
        },
    )
    task = StyleTask(model, tokenizer, max_length)
    task.initialize_head(train)
    with torch.no_grad():
        initial = task.evaluate(dev)
    return fit(
        task,
        list(train),
        list(dev),
        training,
        output,
        signature,
        task_config={"labels": list(labels), "max_length": max_length, "base_identity": identity},
        data_summary={"train": len(train), "dev": len(dev), "initial_dev": initial},
        overwrite=overwrite,
        progress=progress,
        on_step=on_step,
    )


def train_match_classifier(
    train: Sequence[PairExample],
    dev: Sequence[PairExample],
    output: str | Path,
    *,
    check: str,
    encoder: str | None = None,
    max_length: int = 128,
    training: TrainingConfig | None = None,
    data: str = "",
    overwrite: bool = False,
    progress: bool = True,
) -> TrainingResult:
    """Fine-tune a siamese match classifier (``check``: ``hh`` or ``ah``) on labelled pairs."""
    training = training or TrainingConfig()
    torch.manual_seed(training.seed)
    base, tokenizer, identity = _base_encoder(encoder)
    signature = Signature(
        "match_classifier",
        {
            "check": check,
            "encoder": identity,
            "max_length": max_length,
            **training.signature_fields(),
            "data": data,
        },
    )
    task = MatchTask(SiameseNsp(base), tokenizer, NspConfig(max_length=max_length))
    train_pairs, dev_pairs = _nsp_examples(train), _nsp_examples(dev)
    task.initialize_head(train_pairs)
    with torch.no_grad():
        initial = task.evaluate(dev_pairs)
    return fit(
        task,
        train_pairs,
        dev_pairs,
        training,
        output,
        signature,
        task_config={"check": check, "max_length": max_length, "base_identity": identity},
        data_summary={"train": len(train), "dev": len(dev), "initial_dev": initial},
        overwrite=overwrite,
        progress=progress,
    )


def _load(directory: str | Path, head_file: str, what: str) -> tuple[Path, dict[str, Any], Any]:
    from transformers import AutoModel

    from storyeval.learn.trainer import read_metadata
    from storyeval.models.loading import quiet_transformers

    quiet_transformers()
    path = Path(directory).expanduser().resolve()
    if not (path / head_file).is_file():
        raise ModelLoadError(
            f"{directory}: not a trained {what} (no {head_file}); train one with "
            "`storyeval classify-eval train CORPUS -o DIR`"
        )
    metadata = read_metadata(path)
    return path, metadata, AutoModel.from_pretrained(str(path), dtype=torch.float32)


class StyleModel:
    """A trained style classifier: style probabilities of texts."""

    def __init__(self, directory: str | Path) -> None:
        from transformers import AutoTokenizer

        from storyeval.models import file_identity

        path, self.metadata, encoder = _load(directory, STYLE_HEAD_FILE, "style classifier")
        config = self.metadata.get("config", {})
        self.labels: list[str] = list(config["labels"])
        self.max_length = int(config.get("max_length", 128))
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = StyleClassifier(encoder, len(self.labels))
        self.model.load_head(path)
        self.model.eval()
        self.identity = f"{path.name}@{file_identity(str(path))}"

    def probabilities(self, texts: Sequence[str]) -> np.ndarray:
        """Shape (n, n_labels): the probability of each style for each text."""
        parts = [np.zeros((0, len(self.labels)))]
        with torch.inference_mode():
            for start in range(0, len(texts), BATCH):
                batch = tokenize(self.tokenizer, texts[start : start + BATCH], self.max_length)
                parts.append(torch.softmax(self.model(batch), dim=-1).numpy())
        return np.concatenate(parts)

    def predict(self, texts: Sequence[str]) -> list[str]:
        """The most probable style of each text."""
        return [self.labels[i] for i in self.probabilities(texts).argmax(axis=1)]


class MatchModel:
    """A trained match classifier: P(match) of (text, text) pairs."""

    def __init__(self, directory: str | Path) -> None:
        from transformers import AutoTokenizer

        from storyeval.models import file_identity

        path, self.metadata, encoder = _load(directory, MATCH_HEAD_FILE, "match classifier")
        self.max_length = int(self.metadata.get("config", {}).get("max_length", 128))
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = SiameseNsp(encoder)
        self.model.load_head(path, MATCH_HEAD_FILE)
        self.model.eval()
        self.identity = f"{path.name}@{file_identity(str(path))}"

    def probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """P(match) of each pair, in order."""
        values = [np.zeros(0)]
        with torch.inference_mode():
            for start in range(0, len(pairs), BATCH):
                batch = pairs[start : start + BATCH]
                first = tokenize(self.tokenizer, [a for a, _ in batch], self.max_length)
                second = tokenize(self.tokenizer, [b for _, b in batch], self.max_length)
                values.append(torch.sigmoid(self.model(first, second)).numpy())
        return np.concatenate(values)
