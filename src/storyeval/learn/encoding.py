"""Encoding (prompt, text) pairs for BERT-like models with explicit, reported truncation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Encoded:
    """Token ids of one input; ``truncated`` says whether anything was cut, ``cut_second``
    whether the second text (the one evaluated) was."""

    input_ids: list[int]
    token_type_ids: list[int]
    special: list[bool]
    truncated: bool
    cut_second: bool = False


def encode_pair(tokenizer: Any, first: str | None, second: str, max_length: int) -> Encoded:
    """``[CLS] first [SEP] second [SEP]`` (or ``[CLS] second [SEP]`` without ``first``; the
    model's own special tokens), at most ``max_length`` tokens.

    ``first`` (a prompt or a previous sentence) keeps at most its last
    ``max_length // 2 - 2`` tokens, the ones nearest to ``second``; ``second`` is then cut at
    the end to fit. ``truncated`` says whether either was cut.

    >>> from storyeval.models import load_encoder
    >>> tok = load_encoder().tokenizer
    >>> e = encode_pair(tok, "A cat sat.", "It slept all day long.", 10)
    >>> tok.convert_ids_to_tokens(e.input_ids), e.truncated
    (['[CLS]', 'cat', 'sat', '.', '[SEP]', 'it', 'slept', 'all', 'day', '[SEP]'], True)
    """
    if max_length < 5:
        raise ValueError(f"max_length must be at least 5; got {max_length}")
    truncated = False
    first_count = 0
    if first:
        pieces = tokenizer(first, add_special_tokens=False, return_offsets_mapping=True)
        cap = max(1, max_length // 2 - 2)
        if len(pieces["input_ids"]) > cap:
            first = first[pieces["offset_mapping"][-cap][0] :]
            truncated = True
        first_count = len(tokenizer(first, add_special_tokens=False)["input_ids"])
    second_count = len(tokenizer(second, add_special_tokens=False)["input_ids"])
    encoded = tokenizer(
        first if first else second,
        second if first else None,
        truncation="only_second" if first else True,
        max_length=max_length,
        return_special_tokens_mask=True,
        return_token_type_ids=True,
    )
    input_ids = list(encoded["input_ids"])
    special = [bool(x) for x in encoded["special_tokens_mask"]]
    kept_second = sum(not x for x in special) - first_count
    cut_second = kept_second < second_count
    token_types = list(encoded.get("token_type_ids") or [0] * len(input_ids))
    return Encoded(input_ids, token_types, special, truncated or cut_second, cut_second)


def pad_batch(encoded: Sequence[Encoded], pad_id: int) -> dict[str, Any]:
    """Tensors ``input_ids``, ``token_type_ids``, ``attention_mask`` padded to the longest,
    on torch's default device (a trainer's GPU)."""
    return {name: moved(tensor) for name, tensor in pad_batch_on_host(encoded, pad_id).items()}


def pad_batch_on_host(
    encoded: Sequence[Encoded], pad_id: int, *, multiple: int = 1, limit: int = 0
) -> dict[str, Any]:
    """:func:`pad_batch` on the CPU (for work that stays there before the copy), padded to a
    ``multiple`` of tokens (no wider than ``limit`` unless the longest row is)."""
    import torch

    longest = max(len(item.input_ids) for item in encoded)
    rounded = -(-longest // multiple) * multiple
    width = max(longest, min(rounded, limit or rounded))

    def padded(rows: Iterable[Sequence[int]], fill: int) -> Any:
        made = [[*row, *([fill] * (width - len(row)))] for row in rows]
        return torch.tensor(made, dtype=torch.long, device="cpu")

    return {
        "input_ids": padded((i.input_ids for i in encoded), pad_id),
        "token_type_ids": padded((i.token_type_ids for i in encoded), 0),
        "attention_mask": padded(([1] * len(i.input_ids) for i in encoded), 0),
    }


def to_default_device(rows: Sequence[Any], dtype: Any = None) -> Any:
    """A tensor of ``rows`` (long unless ``dtype`` says) built on the CPU and copied to
    torch's default device in one transfer (built there element by element, a batch costs
    thousands of tiny GPU copies)."""
    import torch

    return moved(torch.tensor(rows, dtype=dtype or torch.long, device="cpu"))


def default_device() -> Any:
    """Torch's default device: where tensors made without a device land (a trainer's GPU
    inside :func:`storyeval.models.devices.on_device`)."""
    import torch

    return torch.empty(0).device


def moved(tensor: Any) -> Any:
    """A CPU tensor on torch's default device (:func:`default_device`). To a CUDA device the
    copy is asynchronous, from pinned memory, so preparing a batch does not wait for the GPU
    to finish the last step."""
    import torch

    default = default_device()
    if default.type == "cuda" and torch.cuda.is_available():
        return tensor.pin_memory().to(default, non_blocking=True)
    return tensor.to(default)


def pad_id(tokenizer: Any) -> int:
    """The tokenizer's padding id (its end-of-text id when it has none)."""
    value = tokenizer.pad_token_id
    return int(value) if value is not None else 0
