"""Sentence embeddings from an encoder: padded batches and mean pooling over real tokens
(the sentence-transformers recipe), shared by the siamese NSP head and the paraphrase check.

This module imports torch at import time; import it where a model runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F


def mean_pooled(encoder: Any, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The L2-normalised mean of an encoder's last hidden states over the unpadded tokens."""
    hidden = encoder(
        input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]
    ).last_hidden_state
    mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
    return F.normalize(pooled, dim=-1)


def tokenize(tokenizer: Any, texts: Sequence[str], max_length: int) -> dict[str, torch.Tensor]:
    """A padded batch, each text cut to ``max_length`` tokens."""
    encoded = tokenizer(
        list(texts), padding=True, truncation=True, max_length=max_length, return_tensors="pt"
    )
    return {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
