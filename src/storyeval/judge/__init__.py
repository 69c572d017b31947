"""LLM judges of stories: rubrics, prompts, backends (a local causal LM or any
OpenAI-compatible endpoint), a persistent cache, and judgments in the long format that the
meta-evaluation reads (:func:`judge_stories`)."""

from storyeval.judge.core import JudgeRun, judge_stories
from storyeval.judge.rubric import RUBRICS, Criterion, Rubric, ScalePoint, load_rubric

__all__ = [
    "RUBRICS",
    "Criterion",
    "JudgeRun",
    "Rubric",
    "ScalePoint",
    "judge_stories",
    "load_rubric",
]
