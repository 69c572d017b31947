"""The UNION round trip shared by the session fixture (tests/conftest.py) and its test."""

from __future__ import annotations

from typing import Any


def union_round_trip_stories(human: Any) -> list[Any]:
    """Five held-out first sentences (within UNION's 48-token input in the tests)."""
    from storyeval.corpus import Story

    return [Story(s.id, "", s.story.split(". ")[0] + ".") for s in human[50:55]]


def union_in_memory_scores(result: Any, human: Any) -> list[float]:
    """The trained model's scores of :func:`union_round_trip_stories`, computed in memory
    right after training (the saved model must reproduce them)."""
    import torch

    from storyeval.learn.union import UnionExample, UnionTask
    from storyeval.learn.union_scoring import UnionScorer

    reloaded = UnionScorer(result.directory)
    task = UnionTask(result.model, reloaded.tokenizer, reloaded.config)
    stories = union_round_trip_stories(human)
    examples = [UnionExample(s.id, s.prompt, s.story, s.story, 1) for s in stories]
    with torch.no_grad():
        _, _, logits, _ = task._losses(examples)
        in_memory = torch.sigmoid(logits)
    return [float(v) for v in in_memory.tolist()]
