"""A siamese next-sentence head for sentence-embedding encoders.

``P(B follows A) = sigmoid(scale * cos(e(A), e(B)) + bias)``, where ``e`` is the encoder's
mean-pooled, normalised token embedding. Sentence encoders such as all-MiniLM-L6-v2 were
trained for exactly these embeddings, so the head starts far above chance (the untrained
cosine already separates consecutive from random sentences) and fine-tuning improves it;
a cross-encoder NSP head on their never-trained [CLS] vector stays at chance on small corpora.

This module imports torch at import time; :mod:`storyeval.learn.nsp` imports it lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from storyeval.models.pooling import mean_pooled, tokenize

HEAD_FILE = "nsp_head.safetensors"
__all__ = ["HEAD_FILE", "SiameseNsp", "fit_head_to_cosines", "mean_pooled", "tokenize"]


class SiameseNsp(torch.nn.Module):
    """An encoder and a one-feature logistic head on the cosine of two mean-pooled texts."""

    def __init__(self, encoder: Any, scale: float = 10.0, bias: float = -2.0) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = torch.nn.Linear(1, 1)
        with torch.no_grad():
            self.head.weight.fill_(scale)
            self.head.bias.fill_(bias)

    def embed(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Mean-pooled, L2-normalised last hidden states of a tokenized batch."""
        return mean_pooled(self.encoder, inputs)

    def cosine(
        self, first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """Cosine of the mean-pooled embeddings of the two texts of each pair."""
        return (self.embed(first) * self.embed(second)).sum(dim=-1)

    def forward(
        self, first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        """Logits of "second follows first", one per pair."""
        result: torch.Tensor = self.head(self.cosine(first, second).unsqueeze(-1)).squeeze(-1)
        return result

    def save_head(self, directory: Path, filename: str = HEAD_FILE) -> None:
        """Write the head's scale and bias into ``directory``."""
        from safetensors.torch import save_file

        save_file(
            {"weight": self.head.weight.detach().clone(), "bias": self.head.bias.detach().clone()},
            str(directory / filename),
        )

    def load_head(self, directory: Path, filename: str = HEAD_FILE) -> None:
        """Read the head's scale and bias from ``directory``."""
        from safetensors.torch import load_file

        state = load_file(str(directory / filename))
        self.head.load_state_dict(state)


def fit_head_to_cosines(model: SiameseNsp, cosines: torch.Tensor, follows: torch.Tensor) -> None:
    """Start the head at the logistic regression of ``follows`` on the untrained cosines, so
    its probabilities are calibrated for this encoder before fine-tuning begins."""
    scale = torch.zeros(1, requires_grad=True)
    bias = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.LBFGS([scale, bias], lr=1.0, max_iter=100)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = F.binary_cross_entropy_with_logits(scale * cosines + bias, follows)
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        model.head.weight.fill_(float(scale))
        model.head.bias.fill_(float(bias))
