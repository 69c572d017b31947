"""Fine-tuning the encoder of a story reward model (``train preference --fine-tune-epochs N``).

Frozen features limit what a head can learn; LitBench's reward models (Fein et al. 2025)
fine-tune the whole network on people's preferences. Here the encoder and a scalar head over
its mean-pooled last layer are trained together on the reward model's own objective (squared
error on the standardised mean ratings, the Bradley-Terry likelihood of the pairs, a prompt's
stories in one batch so its pairs meet), then the encoder is frozen again and the usual head
(length covariate, metric features, pair temperature) is fitted over its features. In
cross-validation each fold fine-tunes its own encoder on its training stories only, so the
held-out numbers stay honest; the final encoder is saved in the model directory.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

#: The fine-tuned encoder's folder in a model directory.
ENCODER_DIR = "encoder"
#: The head's learning rate relative to the encoder's (a new layer learns faster).
HEAD_LR_FACTOR = 30.0


def fine_tune_encoder(
    texts: Sequence[str],
    targets: np.ndarray,
    pairs: Sequence[tuple[int, int, float]],
    groups: Sequence[str],
    config: Any,
    *,
    device: str = "cpu",
    precision: str = "float32",
    negatives: Sequence[tuple[int, int]] = (),
) -> Any:
    """A copy of ``config.model``'s encoder fine-tuned on these texts (each story as its
    features read it; ``targets``: standardised mean ratings, NaN for none; ``pairs``:
    ``(i, j, outcome)``; ``negatives``: ``(original, copy)``, a perturbed copy that must
    score lower, weighted by ``config.negative_weight``), wrapped as a loaded model."""
    import torch

    from storyeval.models import load_encoder
    from storyeval.models.devices import place

    torch.manual_seed(config.seed)
    base = load_encoder(config.model)
    encoder = place(copy.deepcopy(base.model), device)
    head = place(torch.nn.Linear(encoder.config.hidden_size, 1), device)
    optimizer = torch.optim.AdamW(
        [
            {"params": encoder.parameters(), "lr": config.fine_tune_lr},
            {"params": head.parameters(), "lr": config.fine_tune_lr * HEAD_LR_FACTOR},
        ]
    )
    rng = np.random.default_rng(config.seed)
    encoder.train()
    for _ in range(config.fine_tune_epochs):
        for batch in _batches(groups, config.fine_tune_batch_size, rng):
            objectives = (targets, pairs, negatives)
            loss = _batch_loss(
                encoder, head, base.tokenizer, texts, objectives, batch, config, precision
            )
            if loss is None:
                continue
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    encoder.eval()
    return _wrapped(encoder, base)


def _batches(groups: Sequence[str], size: int, rng: np.random.Generator) -> list[list[int]]:
    """The stories in batches of about ``size``, a group's stories together, groups shuffled."""
    from storyeval.learn.trainer import packed_batches

    members: dict[str, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    return packed_batches([members[name] for name in rng.permutation(sorted(members))], size)


def _batch_loss(
    encoder: Any,
    head: Any,
    tokenizer: Any,
    texts: Sequence[str],
    objectives: tuple[np.ndarray, Sequence[tuple[int, int, float]], Sequence[tuple[int, int]]],
    batch: list[int],
    config: Any,
    precision: str,
) -> Any:
    """Squared error on the batch's rated stories plus the logistic (Bradley-Terry) loss of
    the pairs inside the batch (a tie's target is one half) and, weighted, of the negatives
    inside it (``objectives``: targets, pairs, negatives); None when the batch has none."""
    import torch
    import torch.nn.functional as F

    from storyeval.models.devices import autocast, model_device
    from storyeval.models.pooling import mean_pooled, tokenize

    targets, pairs, negatives = objectives
    position = {story: k for k, story in enumerate(batch)}
    inside = [(position[i], position[j], o) for i, j, o in pairs if i in position and j in position]
    rated = [k for k, story in enumerate(batch) if np.isfinite(targets[story])]
    worse = [(position[i], position[j]) for i, j in negatives if i in position and j in position]
    worse = worse if config.negative_weight else []
    if not inside and not rated and not worse:
        return None
    device = model_device(encoder)
    inputs = tokenize(tokenizer, [texts[i] for i in batch], config.fine_tune_max_length)
    inputs = {key: value.to(device) for key, value in inputs.items()}
    with autocast(str(device), precision):
        scores = head(mean_pooled(encoder, inputs)).squeeze(-1).float()
    loss = torch.zeros((), device=device)
    if rated:
        wanted = torch.tensor([targets[batch[k]] for k in rated], device=device)
        loss = loss + F.mse_loss(scores[rated], wanted.float())
    if inside:
        first, second, outcome = (torch.tensor(c, device=device) for c in zip(*inside, strict=True))
        logits = scores[first] - scores[second]
        loss = loss + F.binary_cross_entropy_with_logits(logits, outcome.float())
    if worse:
        original, copy = (torch.tensor(c, device=device) for c in zip(*worse, strict=True))
        loss = loss + config.negative_weight * F.softplus(scores[copy] - scores[original]).mean()
    return loss


def _wrapped(encoder: Any, base: Any) -> Any:
    """The fine-tuned encoder as a loaded model; its identity (a scoring context's key for
    its cache, never written anywhere) names this object."""
    from storyeval.models.loading import LoadedModel

    identity = f"{base.name}+fine-tuned@{id(encoder):x}"
    return LoadedModel(base.name, identity, base.path, base.tokenizer, encoder, "encoder")


def tuned_features(encoder: Any, texts: Sequence[str], *, device: str, precision: str) -> Any:
    """The mean-pooled last layer of each text under a fine-tuned encoder (float64 rows), the
    way the frozen features are computed."""
    from storyeval.metrics.context import ScoringContext

    context = ScoringContext(device=device, precision=precision)
    return context.cache(context.use(encoder)).text_embeddings(list(texts))


def save_encoder(encoder: Any, directory: Any) -> None:
    """Write the fine-tuned encoder and its tokenizer to ``directory/encoder`` (a complete
    folder replaces the old one only once written), and forget any copy loaded from there."""
    from pathlib import Path

    from storyeval.base.io import atomic_directory
    from storyeval.models.loading import forget_model

    target = Path(directory) / ENCODER_DIR
    with atomic_directory(target, "fine-tuned encoder", owned=True) as staging:
        encoder.model.save_pretrained(staging)
        encoder.tokenizer.save_pretrained(staging)
    forget_model(str(target))


def saved_encoder_identity(directory: Any) -> str | None:
    """The identity of the encoder saved in ``directory/encoder`` (as loading it would give:
    ``encoder@HASH`` of its files), read past the per-process memo of hashes by path since
    the files may have been rewritten; None when no encoder is saved there."""
    from pathlib import Path

    from storyeval.models.loading import file_identity

    encoder = Path(directory) / ENCODER_DIR
    if not (encoder / "config.json").is_file():
        return None
    return f"{ENCODER_DIR}@{file_identity.__wrapped__(str(encoder))}"


def tuning_key(fields: dict[str, Any], members: np.ndarray) -> str:
    """The key of one fine-tuning's features: what the tuning depends on (the settings, the
    base encoder, the data's hash, the device) and which stories it trained on."""
    import json

    digest = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode())
    digest.update(np.asarray(members, dtype=np.int64).tobytes())
    return digest.hexdigest()[:20]


def stored_tuning(directory: Any, key: str) -> np.ndarray | None:
    """The features a fine-tuning with this key saved in ``directory``, if any."""
    from pathlib import Path

    path = Path(directory) / f"{key}.npy"
    if not path.is_file():
        return None
    features: np.ndarray = np.load(path, allow_pickle=False)
    return features


def store_tuning(directory: Any, key: str, features: np.ndarray) -> None:
    """Save a fine-tuning's features (atomically), so a re-run does not tune again."""
    import io
    from pathlib import Path

    from storyeval.base.io import write_bytes_atomic

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(features, dtype=np.float64), allow_pickle=False)
    Path(directory).mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(Path(directory) / f"{key}.npy", buffer.getvalue())
