"""Batched forward passes of a local judge: the logits after many prompts at once.

A judge's prompts share structure: every prompt of a rubric starts with the same preamble,
and the prompts about one story (one per criterion) share the story and differ only in the
question. :func:`last_logits` computes

1. the preamble's key-value cache once per run (``rubric_state``);
2. the stories of a batch in one forward pass after the preamble's cache expanded to the
   batch (right-padded, sorted by length so that a batch holds stories of similar lengths);
3. every question about those stories in one more pass after the stories' caches, each
   story's cache repeated for its questions (left-padded, so the last position of every row
   is its prompt's last token and only that position goes through the output layer). Where
   the repeated caches would not fit (:func:`cache_budget`: a large model, many criteria),
   one pass per question instead: the first question of every story, then the second, each
   after the same stories' cache, which is cut back after each pass.

A batch's tokens follow the device's free memory and what one token costs the model
(:func:`token_budget`); a batch that still runs out of GPU memory is split in two and
retried.

Padding sits between parts of a row; the attention mask hides it and explicit position ids
number each row's real tokens consecutively, so a prompt's logits equal its unbatched
logits up to float rounding (tested against the prompt read alone).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from storyeval.base.errors import StoryevalError

CPU_BATCH_TOKENS = 16384
GPU_MEMORY_SHARE = 0.5  # of the free memory once the model is loaded; the rest is headroom
# of the free memory for the stories' caches repeated for their questions (a pass that reads
# few new tokens), beside the stories' own cache: together within the card
GPU_CACHE_SHARE = 0.45
ATTENTION_KEYS = 2048  # the keys a layer's attention scores are sized for, per query token


@dataclass(frozen=True)
class Prompt:
    """One prompt split into its shared preamble, its subject (story) and its question."""

    index: int
    rubric: tuple[int, ...]
    subject: tuple[int, ...]
    question: tuple[int, ...]


def split_prompts(
    token_lists: Sequence[list[int]], subjects: Sequence[str], rubric_length: int
) -> list[Prompt]:
    """Split each prompt at ``rubric_length`` and after the tokens it shares with the other
    prompts of its subject (each keeps at least its last token as its question)."""
    by_subject: dict[str, list[int]] = {}
    for index, subject in enumerate(subjects):
        by_subject.setdefault(subject, []).append(index)
    prompts = []
    for members in by_subject.values():
        lists = [token_lists[i][rubric_length:] for i in members]
        shared = common_prefix(lists) if len(lists) > 1 else max(len(lists[0]) - 1, 0)
        for index, rest in zip(members, lists, strict=True):
            tokens = token_lists[index]
            prompts.append(
                Prompt(
                    index, tuple(tokens[:rubric_length]), tuple(rest[:shared]), tuple(rest[shared:])
                )
            )
    return prompts


def common_prefix(token_lists: Sequence[Sequence[int]]) -> int:
    """The number of leading tokens all lists share (each keeps at least its last token).

    >>> common_prefix([[1, 2, 3], [1, 2, 4, 5]]), common_prefix([[1, 2], [1, 2]])
    (2, 1)
    """
    first = token_lists[0]
    shared = min(len(ids) for ids in token_lists) - 1
    for ids in token_lists[1:]:
        k = 0
        while k < shared and ids[k] == first[k]:
            k += 1
        shared = k
    return max(shared, 0)


@dataclass
class Batcher:
    """Runs a causal LM over prompts in batches (see the module docstring).

    ``rubric_state(tokens)`` returns the key-value cache after ``tokens`` (batch 1; kept by the
    caller for the run); ``autocast()`` the precision context of the forward passes.
    """

    model: Any
    device: Any
    pad_id: int
    rubric_state: Callable[[tuple[int, ...]], Any]
    autocast: Callable[[], Any]
    batch_size: int = 8
    batch_tokens: int = CPU_BATCH_TOKENS
    cache_tokens: int = CPU_BATCH_TOKENS
    calls: int = 0

    def last_logits(self, prompts: Sequence[Prompt]) -> dict[int, Any]:
        """The logits after each prompt (float32, on the CPU), by prompt index."""
        result: dict[int, Any] = {}
        for batch in self._batches(prompts):
            result.update(self._run_fitting(batch))
        return result

    def _run_fitting(self, groups: list[list[Prompt]]) -> dict[int, Any]:
        """:meth:`_run_batch`, split in halves for as long as the GPU runs out of memory."""
        import torch

        try:
            return self._run_batch(groups)
        except torch.OutOfMemoryError as exc:
            if len(groups) == 1:
                raise StoryevalError(
                    f"one story's judge prompts do not fit in {self.device}'s memory ({exc}); "
                    "use a smaller model or --precision bfloat16, or cut long stories "
                    "(--max-words N --truncate)"
                ) from None
        # out of the except block: the failed pass's tensors are freed before the retry
        torch.cuda.empty_cache()
        half = len(groups) // 2
        return {**self._run_fitting(groups[:half]), **self._run_fitting(groups[half:])}

    def _batches(self, prompts: Sequence[Prompt]) -> list[list[list[Prompt]]]:
        """Groups of prompts sharing rubric and subject, batched by rubric, sorted by subject
        length, at most ``batch_size`` subjects and ``batch_tokens`` subject tokens a batch."""
        groups: dict[tuple[tuple[int, ...], tuple[int, ...]], list[Prompt]] = {}
        for prompt in prompts:
            groups.setdefault((prompt.rubric, prompt.subject), []).append(prompt)
        ordered = sorted(groups.items(), key=lambda item: (item[0][0], len(item[0][1])))
        batches: list[list[list[Prompt]]] = []
        current: list[list[Prompt]] = []
        for (rubric, subject), members in ordered:
            fits = current and current[0][0].rubric == rubric
            longest = max([len(subject), *(len(g[0].subject) for g in current)])
            rows = sum(len(g) for g in current) + len(members)
            if fits and (
                len(current) < self.batch_size
                and (len(current) + 1) * (len(rubric) + longest) <= self.batch_tokens
                and rows <= 4 * self.batch_size
            ):
                current.append(members)
            else:
                if current:
                    batches.append(current)
                current = [members]
        if current:
            batches.append(current)
        return batches

    def _run_batch(self, groups: list[list[Prompt]]) -> dict[int, Any]:
        import torch

        rubric = groups[0][0].rubric
        cache = copy.deepcopy(self.rubric_state(rubric))
        cache.batch_select_indices(torch.zeros(len(groups), dtype=torch.long, device=self.device))
        subjects = [list(g[0].subject) for g in groups]
        mask = torch.ones((len(groups), len(rubric)), dtype=torch.long, device=self.device)
        if max(len(s) for s in subjects) > 0:
            mask = self._forward_subjects(subjects, len(rubric), cache, mask)
        starts = [len(rubric) + len(subject) for subject in subjects]
        rows = sum(len(group) for group in groups)
        if rows == len(groups) or rows * mask.shape[1] <= self.cache_tokens:
            return self._questions_together(groups, starts, cache, mask)
        return self._questions_by_slot(groups, starts, cache, mask)

    def _questions_together(
        self, groups: list[list[Prompt]], starts: list[int], cache: Any, mask: Any
    ) -> dict[int, Any]:
        """Every question in one pass, each story's cache repeated for its questions."""
        import torch

        rows = [(b, prompt) for b, group in enumerate(groups) for prompt in group]
        select = torch.tensor([b for b, _ in rows], dtype=torch.long, device=self.device)
        cache.batch_select_indices(select)
        logits = self._forward_questions(
            [list(p.question) for _, p in rows], [starts[b] for b, _ in rows], cache, mask[select]
        )
        return {prompt.index: logits[r] for r, (_, prompt) in enumerate(rows)}

    def _questions_by_slot(
        self, groups: list[list[Prompt]], starts: list[int], cache: Any, mask: Any
    ) -> dict[int, Any]:
        """The k-th question of every story in the k-th pass, after the stories' one cache (cut
        back to the stories after each pass); a story with fewer questions reads a padding
        token whose logits are dropped."""
        length = int(mask.shape[1])
        found: dict[int, Any] = {}
        for slot in range(max(len(group) for group in groups)):
            present = [group[slot] if slot < len(group) else None for group in groups]
            questions = [list(p.question) if p else [self.pad_id] for p in present]
            logits = self._forward_questions(questions, starts, cache, mask)
            cache.crop(-(cache.get_seq_length() - length))  # negative: tokens to remove
            found.update({p.index: logits[b] for b, p in enumerate(present) if p is not None})
        return found

    def _forward_subjects(
        self, subjects: list[list[int]], offset: int, cache: Any, mask: Any
    ) -> Any:
        """Extend ``cache`` by the subjects (right-padded); returns the attention mask so far."""
        import torch

        width = max(len(s) for s in subjects)
        ids = torch.full((len(subjects), width), self.pad_id, dtype=torch.long, device=self.device)
        own = torch.zeros((len(subjects), width), dtype=torch.long, device=self.device)
        for row, subject in enumerate(subjects):
            if subject:
                ids[row, : len(subject)] = torch.tensor(subject, device=self.device)
                own[row, : len(subject)] = 1
        positions = offset + torch.arange(width, device=self.device).expand(len(subjects), -1)
        mask = torch.cat([mask, own], dim=1)
        with torch.no_grad(), self.autocast():
            self.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
        self.calls += 1
        return mask

    def _forward_questions(
        self, questions: list[list[int]], starts: list[int], cache: Any, mask: Any
    ) -> Any:
        """The logits after each question (left-padded: the last position is real)."""
        import torch

        width = max(len(q) for q in questions)
        ids = torch.full((len(questions), width), self.pad_id, dtype=torch.long, device=self.device)
        own = torch.zeros((len(questions), width), dtype=torch.long, device=self.device)
        positions = torch.zeros((len(questions), width), dtype=torch.long, device=self.device)
        for row, (question, start) in enumerate(zip(questions, starts, strict=True)):
            begin = width - len(question)
            ids[row, begin:] = torch.tensor(question, device=self.device)
            own[row, begin:] = 1
            positions[row, begin:] = torch.arange(start, start + len(question), device=self.device)
        with torch.no_grad(), self.autocast():
            out = self.model(
                input_ids=ids,
                attention_mask=torch.cat([mask, own], dim=1),
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
        self.calls += 1
        return out.logits[:, -1].float().cpu()


def _text_config(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _element_bytes(precision: str) -> int:
    return 4 if precision == "float32" else 2


def kv_bytes(config: Any, precision: str) -> int:
    """The bytes of one token's keys and values in every layer of a causal LM."""
    text = _text_config(config)
    hidden, heads = int(text.hidden_size), int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or hidden // heads)
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim * _element_bytes(precision)


def token_bytes(config: Any, precision: str) -> int:
    """What one token of a batch costs a causal LM in bytes: its keys and values in every
    layer (:func:`kv_bytes`), and one layer's activations (the MLP's inner width three times,
    the hidden width four times, attention scores against :data:`ATTENTION_KEYS` keys)."""
    text = _text_config(config)
    hidden, heads = int(text.hidden_size), int(text.num_attention_heads)
    inner = int(getattr(text, "intermediate_size", None) or 4 * hidden)
    activations = (3 * inner + 4 * hidden + heads * ATTENTION_KEYS) * _element_bytes(precision)
    return kv_bytes(config, precision) + activations


def token_budget(model: Any, device: str, precision: str) -> int:
    """The tokens a batch may hold (the preamble repeated for its stories, and the stories):
    :data:`CPU_BATCH_TOKENS` off a GPU, else :data:`GPU_MEMORY_SHARE` of the GPU's free
    memory over :func:`token_bytes`."""
    return _tokens_fitting(device, GPU_MEMORY_SHARE, token_bytes(model.config, precision))


def cache_budget(model: Any, device: str, precision: str) -> int:
    """The cached tokens the stories' caches may take when repeated for their questions (one
    pass for all questions; more, and the questions go one criterion per pass):
    :data:`CPU_BATCH_TOKENS` off a GPU, else :data:`GPU_CACHE_SHARE` of the GPU's free
    memory over :func:`kv_bytes` (the pass reads few new tokens: its cost is the copies)."""
    return _tokens_fitting(device, GPU_CACHE_SHARE, kv_bytes(model.config, precision))


def _tokens_fitting(device: str, share: float, per_token: int) -> int:
    """``share`` of the GPU's free memory in tokens of ``per_token`` bytes (at least 1,024);
    :data:`CPU_BATCH_TOKENS` off a GPU."""
    from storyeval.models.devices import free_gpu_bytes

    free = free_gpu_bytes(str(device))
    if free is None:
        return CPU_BATCH_TOKENS
    return max(1024, int(share * free / per_token))
