"""UNION's editing behaviour (Guan & Huang 2020, Appendix D).

A UNION model trained with its reconstruction head predicts, for every token of its input, the
token of the story it should be. Appendix D labels a story 1 when the model *edits* it (some
predicted token of the story differs from the input) and 0 when it outputs the same story, and
correlates that label with people's judgments (Spearman 0.199 on ROCStories' test set; 0.344,
0.165, 0.162 and 0.294 on the repetitive, incoherent, conflicting and chaotic sets of Table 7,
each mixed with reasonable stories).

:func:`union_edits` gives, per story, ``edited`` (0/1), the share of its tokens changed and the
edited text; :func:`edit_scores` turns them into score records (metrics ``union_edited`` and
``union_changed``), so that ``storyeval correlate`` and ``storyeval drift subsets --by
error_type --include-with-each reasonable`` reproduce Appendix D's numbers
(``storyeval union-edits``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from storyeval.base.errors import StoryevalError
from storyeval.corpus import Score, Story


@dataclass(frozen=True)
class UnionEdit:
    """What UNION's reconstruction head makes of one story."""

    item_id: str
    edited: bool
    changed_tokens: int
    tokens: int
    output: str

    @property
    def changed_share(self) -> float:
        """The share of the story's tokens the model changed."""
        return self.changed_tokens / self.tokens if self.tokens else math.nan


def story_positions(special: Sequence[bool], has_prompt: bool) -> list[int]:
    """The positions of the evaluated text in ``[CLS] prompt [SEP] story [SEP]`` (every
    non-special position without a prompt; those after the prompt's closing special tokens
    with one).

    >>> story_positions([True, False, False, True, False, True], True)
    [4]
    >>> story_positions([True, False, False, True], False)
    [1, 2]
    """
    positions = []
    seen_text = passed_prompt = False
    for position, is_special in enumerate(special):
        if is_special:
            if seen_text:
                passed_prompt = True
            continue
        seen_text = True
        if not has_prompt or passed_prompt:
            positions.append(position)
    return positions


def union_edits(scorer: Any, stories: Sequence[Story], *, batch_size: int = 16) -> list[UnionEdit]:
    """Run the reconstruction head of ``scorer`` (a :class:`~storyeval.learn.union_scoring.UnionScorer`)
    over each story (its model's input, prompt included when the model reads prompts; a story
    longer than the model's input is read in windows of whole sentences, and counts as edited
    when any window is).

    Raises
    ------
    StoryevalError
        If the model was trained without the reconstruction head (the "-Recon" ablation).
    """
    import torch

    from storyeval.learn.encoding import pad_batch, pad_id
    from storyeval.learn.union import UnionTask

    if scorer.model.reconstructor is None:
        raise StoryevalError(
            f"{scorer.directory}: trained without the reconstruction head (-Recon); its editing "
            "behaviour is undefined"
        )
    prepared = scorer._prepare(stories)
    task = UnionTask(scorer.model, scorer.tokenizer, scorer.config)
    pieces: list[tuple[int, Any, bool]] = []
    for index, story in enumerate(prepared):
        whole = task._encode(story.prompt, story.story)
        windows = [whole] if not whole.cut_second else scorer._windows(task, story)
        for number, encoded in enumerate(windows):
            has_prompt = bool(scorer.config.use_prompt and story.prompt.strip() and number == 0)
            pieces.append((index, encoded, has_prompt))
    changed = [0] * len(prepared)
    tokens = [0] * len(prepared)
    outputs: list[list[int]] = [[] for _ in prepared]
    with torch.no_grad():
        for start in range(0, len(pieces), batch_size):
            batch = pieces[start : start + batch_size]
            tensors = pad_batch([encoded for _, encoded, _ in batch], pad_id(scorer.tokenizer))
            rows, cols = [], []
            for row, (_, encoded, has_prompt) in enumerate(batch):
                for position in story_positions(encoded.special, has_prompt):
                    rows.append(row)
                    cols.append(position)
            if not rows:
                continue
            positions = (torch.tensor(rows), torch.tensor(cols))
            _, logits = scorer.model(
                tensors["input_ids"],
                tensors["attention_mask"],
                tensors["token_type_ids"],
                positions=positions,
            )
            predicted = logits.argmax(-1).tolist()
            for row, col, guess in zip(rows, cols, predicted, strict=True):
                index, encoded, _ = batch[row]
                tokens[index] += 1
                changed[index] += int(guess != encoded.input_ids[col])
                outputs[index].append(int(guess))
    return [
        UnionEdit(
            item_id=story.id,
            edited=changed[i] > 0,
            changed_tokens=changed[i],
            tokens=tokens[i],
            output=scorer.tokenizer.decode(outputs[i], skip_special_tokens=True).strip(),
        )
        for i, story in enumerate(stories)
    ]


def edit_scores(
    edits: Sequence[UnionEdit], stories: Sequence[Story], signature: str
) -> list[Score]:
    """Score records of the editing behaviour: ``union_edited`` (1 when the model edits the
    story) and ``union_changed`` (the share of its tokens changed), with each story's system
    and prompt id, and the edited text in ``union_edited``'s record."""
    from storyeval.corpus import prompt_id

    rows = []
    for edit, story in zip(edits, stories, strict=True):
        extra: dict[str, Any] = {"system": story.system, "prompt_id": prompt_id(story)}
        rows.append(
            Score(
                story.id,
                "union_edited",
                float(edit.edited),
                signature,
                {**extra, "output": edit.output},
            )
        )
        rows.append(Score(story.id, "union_changed", edit.changed_share, signature, extra))
    return rows
