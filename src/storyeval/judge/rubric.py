"""Rubrics: what a judge is asked, one criterion at a time, with a description of every point
of its scale. Built-ins live in ``judge/rubrics/*.yaml``; a user's rubric is a YAML file of the
same shape (``storyeval judge --rubric FILE``).

>>> rubric = load_rubric("karpinska")
>>> [c.name for c in rubric.criteria], rubric.criteria[0].labels
(['grammar', 'coherence', 'likability', 'relevance'], ['1', '2', '3', '4', '5'])
>>> load_rubric("checklist").criteria[0].labels
['yes', 'no']
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from storyeval.base.registry import Registry, UnknownNameError
from storyeval.base.yamlfile import StrictModel, YamlFileError, check_name, load_model

_CHECKLIST_SCALE = [
    {"value": 1, "description": "yes", "label": "yes"},
    {"value": 0, "description": "no", "label": "no"},
]


class ScalePoint(StrictModel):
    """One answer a judge may give: its value, what it means, and the text the judge answers
    with (the value itself by default; ``yes``/``no`` for checklists)."""

    value: int
    description: str = Field(min_length=1)
    label: str | None = None

    @property
    def answer(self) -> str:
        """The text the judge is asked to answer with."""
        return self.label if self.label is not None else str(self.value)


class Criterion(StrictModel):
    """A question of a rubric and its scale. A ``negative`` criterion asks about a flaw (purple
    prose, an unearned ending): a higher value means more of it, and less is better."""

    name: str
    question: str = Field(min_length=1)
    scale: list[ScalePoint] = Field(default_factory=list)
    negative: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "a criterion name")

    @property
    def labels(self) -> list[str]:
        """The answers, in scale order."""
        return [point.answer for point in self.scale]

    @property
    def values(self) -> list[int]:
        """The values, in scale order."""
        return [point.value for point in self.scale]


class Rubric(StrictModel):
    """A named set of criteria, and what the judge is shown.

    Attributes
    ----------
    kind : {"scale", "checklist", "spans"}
        A checklist's criteria are yes/no questions (yes = 1, no = 0) and need no scale. A
        spans rubric's criteria are the labels of an error taxonomy (``question``: the
        definition): the judge marks each sentence of a story with one label or none
        (:func:`storyeval.judge.judge_stories`).
    show_prompt, show_reference : bool
        Show the story's prompt / its reference to the judge.
    analyse_first : bool
        Ask for a short analysis before the score (the answer is then generated and parsed,
        not read from probabilities).
    """

    name: str
    description: str = ""
    kind: Literal["scale", "checklist", "spans"] = "scale"
    show_prompt: bool = True
    show_reference: bool = False
    analyse_first: bool = False
    criteria: list[Criterion] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _checklist_scale(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("kind") in ("checklist", "spans"):
            for criterion in data.get("criteria") or []:
                if isinstance(criterion, dict):
                    criterion.setdefault("scale", _CHECKLIST_SCALE)
        return data

    @model_validator(mode="after")
    def _scales(self) -> Rubric:
        names = [c.name for c in self.criteria]
        for criterion in self.criteria:
            if names.count(criterion.name) > 1:
                raise ValueError(f"criterion name {criterion.name!r} is used twice")
            if len(criterion.scale) < 2:
                raise ValueError(f"criterion {criterion.name!r} needs a scale of 2 or more points")
            labels = criterion.labels
            if len(set(labels)) != len(labels) or len(set(criterion.values)) != len(labels):
                raise ValueError(
                    f"criterion {criterion.name!r}: scale values and answers must differ"
                )
        return self

    @property
    def identity(self) -> str:
        """``name@hash`` of everything in the rubric that can change a judgment (for signatures
        and the cache): its content without the human-readable ``description``."""
        content = self.model_dump(exclude={"description"})
        for criterion in content["criteria"]:  # rubrics written before the field keep their hash
            if not criterion["negative"]:
                del criterion["negative"]
        text = json.dumps(content, sort_keys=True)
        return f"{self.name}@{hashlib.sha256(text.encode()).hexdigest()[:10]}"

    def criterion(self, name: str) -> Criterion:
        """The criterion ``name``; an unknown name raises ``KeyError``."""
        for criterion in self.criteria:
            if criterion.name == name:
                return criterion
        raise KeyError(f"rubric {self.name} has no criterion {name!r}")


class UnknownRubricError(UnknownNameError):
    """A rubric name that is neither built in nor a file."""


def _builtin_rubrics() -> None:
    for entry in sorted(resources.files("storyeval.judge").joinpath("rubrics").iterdir(), key=str):
        if entry.name.endswith(".yaml"):
            RUBRICS.register(entry.name.removesuffix(".yaml"), str(entry))


#: Built-in rubrics by name (path of their file): hanna, karpinska, callan_foster, checklist,
#: negative, spans, ttcw, writing_quality.
RUBRICS: Registry[str] = Registry(
    "rubric",
    builtins=_builtin_rubrics,
    entry_point_group="storyeval.rubrics",
    error=UnknownRubricError,
)


def load_rubric(name_or_path: str | Path) -> Rubric:
    """A built-in rubric by name, or a rubric file.

    Raises
    ------
    UnknownRubricError
        A name that is neither built in nor an existing file.
    YamlFileError
        ``FILE:LINE: key: reason`` for an invalid file.
    """
    path = Path(name_or_path)
    if not path.is_file():
        path = Path(RUBRICS.get(str(name_or_path)))
    try:
        return load_model(path, Rubric, what="a rubric")
    except YamlFileError:
        raise
