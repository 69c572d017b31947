"""Collaborative-writing session files (YAML): Choose Your Own Adventure and machine-in-the-loop.

A session file is validated when loaded; every problem is reported as
``FILE:LINE: key.path: what is wrong``.

``kind: cyoa`` (Clark 2021, chapter 4 and appendix A)
    The writer writes a turn alone (20-260 characters; an optional image or text prompt),
    then two configured generators each propose a continuation of the whole story so far,
    shown in random order. The writer chooses one (and may switch to the other while
    editing), edits it freely and adds it; a submitted turn cannot be edited again. Five
    rounds, then the five Likert statements and two open questions of section 4.2.1.
``kind: mil`` (Clark 2021, chapter 2)
    A ten-sentence story: the writer writes the odd sentences, and after each one the
    machine's next sentence is pushed into the writer's edit box, to be edited freely (or
    replaced) before it is added. Then the 7-point questions of Table 2.2 and "Would you use
    this system again?" with the four answers of Table 2.4. With ``conditions: [solo, mil]``
    writers are assigned in turn to writing every sentence alone (asked only about their
    story, and what tools could have helped) or with the machine.
``kind: slogan`` (Clark 2021, section 2.5)
    A slogan per prompt: the writer gives keywords and a draft and, in the machine-in-the-loop
    condition, *pulls* up to three suggestions whenever they want (shown beside the draft, with
    the history of drafts and suggestions); the final slogan is followed by the slogan column
    of Table 2.2 and satisfaction, and the last slogan by the final survey. Writers are
    assigned to the solo and machine-in-the-loop conditions in turn (balanced), and each sees
    the prompts in a rotated order.

Examples
--------
>>> import pathlib
>>> config = load_writing_config(pathlib.Path(__file__).parents[3] / "examples/cyoa/cyoa.yaml")
>>> config.kind, config.rounds, [g.name for g in config.generators]
('cyoa', 5, ['nucleus', 'top-k'])
>>> [s.name for s in config.likert.statements]
['happy', 'collaborative', 'useful', 'connected', 'ideas']
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from storyeval.base.yamlfile import (
    Enrollment,
    OpenQuestion,
    YamlDocument,
    YamlFileError,
    read_yaml,
    stable_dump,
    validate,
)
from storyeval.base.yamlfile import StrictModel as _Strict
from storyeval.base.yamlfile import check_name as _check_name
from storyeval.generate.slogans import SloganSettings

IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
MAX_IMAGE_BYTES = 5_000_000

AGREEMENT_LABELS = ("Strongly Disagree", "Disagree", "Neutral", "Agree", "Strongly Agree")
"""The 5-point scale of Clark (2021), section 4.2.1."""

CYOA_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("happy", "I'm happy with my final story."),
    ("collaborative", "I felt the system and I were working collaboratively to write the story."),
    ("useful", "I thought having the suggestions was useful while writing the story."),
    ("connected", "The suggestions connected to what had happened in the story so far."),
    ("ideas", "The suggestions helped me come up with new ideas."),
)
"""The five Likert statements of Clark (2021), section 4.2.1, in the paper's order."""

CYOA_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("why_choose", "What made you choose one suggestion over another?"),
    ("looking_for", "What were you looking for in the suggestions?"),
)
"""The two open questions of Clark (2021), section 4.2.1."""

MIL_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("story_creative", "Is the final story creative?"),
    ("story_coherent", "Is the final story coherent?"),
    ("story_entertaining", "Is the final story entertaining?"),
    ("story_grammatical", "Is the final story grammatical?"),
    ("satisfied", "How satisfied are you with the final story?"),
    ("suggestions_surprising", "Were the suggested sentences surprising?"),
    ("suggestions_creative", "Were the suggested sentences creative?"),
    ("suggestions_grammatical", "Were the suggested sentences grammatical?"),
    ("liked_suggestions", "How much did you like the suggestions?"),
    ("appreciated_suggestions", "How much did you appreciate the suggestions?"),
    ("enjoyable", "How enjoyable was the writing process?"),
)
"""Seven-point questions of Clark (2021), chapter 2 (Table 2.2 "Writing Survey" and "Final
Survey", satisfaction, liking and appreciating the suggestions, enjoyment)."""

MIL_LABELS = ("Not at all", "", "", "", "", "", "Very much")
MIL_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("interface", "What did you think of the writing interface?"),
    ("difficulty", "How difficult was the task, and why?"),
    ("improvements", "What improvements could be made to the tool?"),
)
"""Open questions after a machine-in-the-loop story (Clark 2021, §2.6.1: interface design,
difficulty of the task, improvements)."""


class WritingFileError(YamlFileError):
    """A writing-session file is invalid; ``problems`` holds one ``FILE:LINE: key: reason``
    per problem."""


class DecodingSpec(_Strict):
    """Decoding settings of one generator (see :class:`storyeval.generate.DecodingConfig`)."""

    greedy: bool = False
    temperature: float | None = Field(default=None, gt=0)
    top_k: int | None = Field(default=None, ge=1)
    top_p: float | None = Field(default=None, gt=0, le=1)
    repetition_penalty: float = Field(default=1.0, gt=0)
    max_new_tokens: int = Field(default=60, ge=1, le=1024)

    @model_validator(mode="after")
    def _consistent(self) -> DecodingSpec:
        if self.greedy and (
            self.temperature is not None or self.top_k is not None or self.top_p is not None
        ):
            raise ValueError("greedy decoding takes no temperature, top_k or top_p")
        return self

    def config(self) -> Any:
        """These settings as a :class:`storyeval.generate.DecodingConfig`."""
        from storyeval.generate import DecodingConfig

        return DecodingConfig.from_options(
            greedy=self.greedy,
            temperature=self.temperature,
            top_k=self.top_k,
            top_p=self.top_p,
            repetition_penalty=self.repetition_penalty,
            max_new_tokens=self.max_new_tokens,
        )


class GeneratorSpec(_Strict):
    """One suggestion generator: a causal LM and a decoding setting.

    ``name`` identifies the generator in the logs and the analysis (writers never see it);
    ``max_chars`` caps a suggestion at a sentence end (default: the longest turn allowed, so
    a suggestion can be added as it is); ``max_sentences`` keeps at most that many sentences.
    """

    name: str
    model: str | None = None
    decoding: DecodingSpec = Field(default_factory=DecodingSpec)
    max_chars: int | None = Field(default=None, ge=1)
    max_sentences: int | None = Field(default=None, ge=1)
    offensive_filter: bool = False
    offensive_words: str | None = None
    max_attempts: int = Field(default=5, ge=1, le=50)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "a generator name")

    def describe(self) -> dict[str, Any]:
        """The settings as a JSON-ready mapping (for exports)."""
        return self.model_dump(mode="json")


class PromptSpec(_Strict):
    """An optional prompt shown to the writer: a text, an image (a file next to the session
    file), or both. ``in_context`` puts the text before the story in the models' context."""

    id: str
    text: str | None = None
    image: str | None = None
    alt: str = "A picture to inspire your story."
    caption: str | None = None
    in_context: bool = True

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return _check_name(value, "a prompt id")

    @model_validator(mode="after")
    def _something(self) -> PromptSpec:
        if not (self.text and self.text.strip()) and not self.image:
            raise ValueError("a prompt needs a text, an image, or both")
        if self.image is not None and Path(self.image).suffix.lower() not in IMAGE_TYPES:
            raise ValueError(
                f"image must be one of {', '.join(sorted(IMAGE_TYPES))}; got {self.image!r}"
            )
        return self


class Statement(_Strict):
    """A Likert statement of the writing survey (its name and text)."""

    name: str
    statement: str = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "a statement name")


class LikertSpec(_Strict):
    """Likert statements asked after the story, on one scale with one label per point."""

    scale: int = 5
    labels: list[str] = Field(default_factory=lambda: list(AGREEMENT_LABELS))
    statements: list[Statement] = Field(
        default_factory=lambda: [Statement(name=n, statement=s) for n, s in CYOA_STATEMENTS]
    )

    @model_validator(mode="after")
    def _labels(self) -> LikertSpec:
        if self.scale not in (5, 7):
            raise ValueError(f"scale must be 5 or 7; got {self.scale}")
        if len(self.labels) != self.scale:
            raise ValueError(
                f"labels must give one label per point ({self.scale}); got {len(self.labels)}"
            )
        names = [s.name for s in self.statements]
        if len(set(names)) != len(names):
            raise ValueError(f"statement names must be unique; got {names}")
        return self


class Completion(_Strict):
    """What a writer sees at the end (an optional completion code)."""

    code: str | None = None
    message: str = "Thank you! Your story and answers have been saved."


class GenerationSettings(_Strict):
    """How suggestions are generated off the request path.

    ``workers`` threads generate at once; one writer's calls take at most
    ``max_per_writer`` of them (default: half, at least one), and waiting calls are served
    writer by writer in turn, so a writer whose calls are slow never holds up the others.
    """

    ADDED_LATER: ClassVar[tuple[str, ...]] = ("max_per_writer",)

    workers: int = Field(default=2, ge=1, le=16)
    seed: int = 0
    timeout_s: float = Field(default=300.0, gt=0)
    max_per_writer: int | None = Field(default=None, ge=1)

    @property
    def writer_share(self) -> int:
        """The most calls of one writer that run at once."""
        if self.max_per_writer is not None:
            return min(self.max_per_writer, self.workers)
        return max(1, self.workers // 2)


def _versioned(data: dict[str, Any]) -> dict[str, Any]:
    """A configuration's dump without the later options still at their default."""
    if data.get("record_typing") is True:
        data.pop("record_typing")
    if data.get("kind") == "mil":
        if data.get("conditions") == ["mil"]:
            data.pop("conditions")
        if data.get("solo_questions") == _default_solo_questions():
            data.pop("solo_questions")
    return data


def _default_solo_questions() -> list[dict[str, Any]]:
    return [stable_dump(q) for q in _solo_questions()]


def _solo_questions() -> list[OpenQuestion]:
    return [OpenQuestion(name=n, question=q) for n, q in SOLO_QUESTIONS]


def check_conditions(conditions: list[str]) -> None:
    """Solo, machine-in-the-loop or both, each once (Clark 2021, section 2.6.1)."""
    unknown = [c for c in conditions if c not in ("solo", "mil")]
    if unknown or not conditions or len(set(conditions)) != len(conditions):
        raise ValueError(f"conditions: give solo, mil or both, once each; got {conditions}")


class _Common(_Strict):
    name: str
    title: str = Field(min_length=1)
    instructions: str = ""
    content_warning: str | None = None
    prompts: list[PromptSpec] = Field(default_factory=list)
    completion: Completion = Field(default_factory=Completion)
    enrollment: Enrollment = Field(default_factory=Enrollment)
    generation: GenerationSettings = Field(default_factory=GenerationSettings)
    #: the pages record how the writer's free text was produced (counts of keys, pastes and
    #: focus losses and the composition time, never their content: storyeval.server.integrity)
    record_typing: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name(value, "the session name")

    @model_validator(mode="after")
    def _unique_prompts(self) -> _Common:
        ids = [p.id for p in self.prompts]
        if len(set(ids)) != len(ids):
            raise ValueError(f"prompt ids must be unique; got {ids}")
        return self

    def version(self) -> str:
        """A short hash of the whole configuration: a changed file is a new version (options
        added later count only when set otherwise than their default, so older files keep
        their version)."""
        text = json.dumps(_versioned(stable_dump(self)), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


class CyoaConfig(_Common):
    """A Choose Your Own Adventure session (see the module docstring)."""

    kind: Literal["cyoa"] = "cyoa"
    rounds: int = Field(default=5, ge=1, le=50)
    min_chars: int = Field(default=20, ge=1)
    max_chars: int = Field(default=260, ge=1)
    generators: list[GeneratorSpec]
    option_labels: tuple[str, str] = ("Option 1", "Option 2")
    likert: LikertSpec = Field(default_factory=LikertSpec)
    questions: list[OpenQuestion] = Field(
        default_factory=lambda: [OpenQuestion(name=n, question=q) for n, q in CYOA_QUESTIONS]
    )

    @model_validator(mode="after")
    def _generators(self) -> CyoaConfig:
        if len(self.generators) != 2:
            raise ValueError(
                f"generators: CYOA compares exactly two generators; got {len(self.generators)}"
            )
        if self.generators[0].name == self.generators[1].name:
            raise ValueError("generators: the two generators need different names")
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) exceeds max_chars ({self.max_chars})")
        return self

    @property
    def generator_names(self) -> tuple[str, ...]:
        """The two generators' names, in file order."""
        return tuple(g.name for g in self.generators)

    def suggestion_cap(self, spec: GeneratorSpec) -> int:
        """The most words a suggestion of ``spec`` may have."""
        return spec.max_chars if spec.max_chars is not None else self.max_chars


def _mil_likert() -> LikertSpec:
    return LikertSpec(
        scale=7,
        labels=list(MIL_LABELS),
        statements=[Statement(name=n, statement=s) for n, s in MIL_STATEMENTS],
    )


class MilConfig(_Common):
    """A machine-in-the-loop story (see the module docstring)."""

    kind: Literal["mil"] = "mil"
    sentences: int = Field(default=10, ge=2, le=100)
    min_chars: int = Field(default=2, ge=1)
    max_chars: int = Field(default=400, ge=1)
    generator: GeneratorSpec
    likert: LikertSpec = Field(default_factory=_mil_likert)
    questions: list[OpenQuestion] = Field(
        default_factory=lambda: [OpenQuestion(name=n, question=q) for n, q in MIL_QUESTIONS]
    )
    #: ``[solo, mil]`` assigns writers to writing alone or with the machine in turn (Clark
    #: 2021, section 2.6.1); the default is every writer with the machine.
    conditions: list[str] = Field(default_factory=lambda: ["mil"])
    solo_questions: list[OpenQuestion] = Field(default_factory=_solo_questions)

    @model_validator(mode="after")
    def _bounds(self) -> MilConfig:
        if self.min_chars > self.max_chars:
            raise ValueError(f"min_chars ({self.min_chars}) exceeds max_chars ({self.max_chars})")
        check_conditions(self.conditions)
        return self

    @property
    def generators(self) -> list[GeneratorSpec]:
        """The one generator, as a list (the shape CYOA sessions have)."""
        return [self.generator]

    @property
    def generator_names(self) -> tuple[str, ...]:
        """The generator's name."""
        return (self.generator.name,)

    @property
    def rounds(self) -> int:
        """Suggestions per story: one after each writer sentence that has a successor."""
        return self.sentences // 2

    def suggestion_cap(self, spec: GeneratorSpec) -> int:
        """The most words a machine sentence may have."""
        return spec.max_chars if spec.max_chars is not None else self.max_chars


SLOGAN_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("slogan_creative", "Is the final slogan creative?"),
    ("slogan_catchy", "Is the final slogan catchy?"),
    ("slogan_relevant", "Is the final slogan relevant?"),
    ("satisfied", "How satisfied are you with the final slogan?"),
)
"""The slogan column of Table 2.2's "Writing Survey" (Clark 2021) and satisfaction, asked after
each slogan."""

SLOGAN_FINAL_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("enjoyable", "How enjoyable was the writing process?"),
)
"""The final survey's question for every writer."""

SLOGAN_SUGGESTION_STATEMENTS: tuple[tuple[str, str], ...] = (
    ("suggestions_surprising", "Were the suggested slogans surprising?"),
    ("suggestions_creative", "Were the suggested slogans creative?"),
    ("suggestions_catchy", "Were the suggested slogans catchy?"),
    ("suggestions_relevant", "Were the suggested slogans relevant?"),
    ("liked_suggestions", "How much did you like the suggestions?"),
    ("appreciated_suggestions", "How much did you appreciate the suggestions?"),
)
"""The final survey's questions for machine-in-the-loop writers (Table 2.2 "Final Survey",
slogan column, and liking and appreciating the suggestions, section 2.6.1)."""

USE_AGAIN_QUESTION = "Would you use this system again?"
USE_AGAIN_CHOICES = (
    "I'd use it, exactly as it is now.",
    "I'd use it, but only if the suggestions were better.",
    "I'd use it, but only if the writing set-up changed.",
    "I wouldn't use it.",
)
"""The four answers of "Would you use this system again?" as in Clark (2021), Table 2.4; asked
of machine-in-the-loop writers in the final survey (section 2.6.1)."""

SUGGESTION_QUESTIONS = frozenset(
    {
        "suggestions_surprising",
        "suggestions_creative",
        "suggestions_grammatical",
        "suggestions_catchy",
        "suggestions_relevant",
        "liked_suggestions",
        "appreciated_suggestions",
    }
)
"""Questions about the machine's suggestions: not asked of solo writers."""

EXPERIENCE_CHOICES: tuple[tuple[str, str], ...] = (
    ("none", "None: I have not done creative writing since school"),
    ("some", "Some: I write now and then, or studied creative writing"),
    ("a lot", "A lot: I write creatively often, as a hobby or professionally"),
)
"""The writing-experience question and its three levels (Clark's thesis, section 2.5 and
Table 2.3: none, some or a lot)."""

SLOGAN_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("interface", "What did you think of the writing interface?"),
    ("difficulty", "How difficult was the task, and why?"),
    ("improvements", "What improvements could be made to the tool?"),
)
SOLO_QUESTIONS: tuple[tuple[str, str], ...] = (
    ("tools", "Describe any tools that could have helped your creative process."),
)


def _likert7(statements: tuple[tuple[str, str], ...]) -> LikertSpec:
    return LikertSpec(
        scale=7,
        labels=list(MIL_LABELS),
        statements=[Statement(name=n, statement=s) for n, s in statements],
    )


_SUGGESTER = SloganSettings()


class SkeletonSettings(_Strict):
    """How suggestions are made (:mod:`storyeval.generate.slogans`, whose
    :class:`~storyeval.generate.slogans.SloganSettings` gives the defaults; every value in the
    suggestions' signature)."""

    skeletons: str | None = None
    model: str | None = None
    beam: int = Field(default=_SUGGESTER.beam, ge=1, le=32)
    vocabulary: int = Field(default=_SUGGESTER.vocabulary, ge=1, le=100)
    coverage: float = _SUGGESTER.coverage
    lm: float = _SUGGESTER.lm
    diversity: float = _SUGGESTER.diversity
    targets: int = Field(default=_SUGGESTER.targets, ge=1, le=10)
    suggestions: int = Field(default=_SUGGESTER.suggestions, ge=1, le=3)
    neighbours: int = Field(default=_SUGGESTER.neighbours, ge=0, le=20)

    def settings(self) -> SloganSettings:
        """The suggester's settings (without the skeleton file and the model)."""
        return SloganSettings(**self.model_dump(exclude={"skeletons", "model"}))


class SloganConfig(_Common):
    """A slogan-writing session (see the module docstring)."""

    kind: Literal["slogan"] = "slogan"
    completion: Completion = Field(
        default_factory=lambda: Completion(
            message="Thank you! Your slogans and answers have been saved."
        )
    )
    conditions: list[str] = Field(default_factory=lambda: ["solo", "mil"])
    max_chars: int = Field(default=200, ge=10, le=2000)
    max_keywords_chars: int = Field(default=200, ge=10, le=2000)
    max_pulls: int = Field(default=30, ge=1, le=500)
    suggester: SkeletonSettings = Field(default_factory=SkeletonSettings)
    likert: LikertSpec = Field(default_factory=lambda: _likert7(SLOGAN_STATEMENTS))
    final_likert: LikertSpec = Field(default_factory=lambda: _likert7(SLOGAN_FINAL_STATEMENTS))
    suggestion_likert: LikertSpec = Field(
        default_factory=lambda: _likert7(SLOGAN_SUGGESTION_STATEMENTS)
    )
    questions: list[OpenQuestion] = Field(
        default_factory=lambda: [OpenQuestion(name=n, question=q) for n, q in SLOGAN_QUESTIONS]
    )
    solo_questions: list[OpenQuestion] = Field(default_factory=_solo_questions)
    ask_experience: bool = True

    def version(self) -> str:
        """As :meth:`_Common.version`; ``ask_experience`` counts only when switched off, so
        files written before the question keep their version."""
        data = _versioned(stable_dump(self))
        if data.get("ask_experience") is True:
            data.pop("ask_experience")
        text = json.dumps(data, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @model_validator(mode="after")
    def _slogan(self) -> SloganConfig:
        if not self.prompts:
            raise ValueError("prompts: a slogan session needs at least one prompt")
        check_conditions(self.conditions)
        return self

    @property
    def generators(self) -> list[GeneratorSpec]:
        """None: suggestions come from the skeleton suggester, not a generator."""
        return []

    @property
    def generator_names(self) -> tuple[str, ...]:
        """The one source of suggestions."""
        return ("skeletons",)


WritingConfig = Annotated[CyoaConfig | MilConfig | SloganConfig, Field(discriminator="kind")]
KINDS = ("cyoa", "mil", "slogan")


class _Wrapper(BaseModel):
    config: WritingConfig


# ----------------------------------------------------------------------------- YAML loading

_WRAPPERS = ("config", "cyoa", "mil", "slogan")


def _document(data: Any, where: str, root: Any) -> YamlDocument:
    return YamlDocument(Path(where), data, root)


def parse_writing_config(
    data: Any, *, where: str = "<config>", root: Any = None
) -> CyoaConfig | MilConfig | SloganConfig:
    """Validate a mapping as a CYOA, MIL or slogan configuration.

    Raises
    ------
    WritingFileError
        Listing every problem as ``WHERE:LINE: key.path: reason``.
    """
    document = _document(data, where, root)
    if not isinstance(data, dict):
        raise WritingFileError([f"{where}:1: a writing-session file must be a YAML mapping"])
    kind = data.get("kind")
    if kind not in KINDS:
        raise WritingFileError(
            [f"{document.where(('kind',))}: must be one of {', '.join(KINDS)}; got {kind!r}"]
        )
    wrapped = YamlDocument(document.path, {"config": data}, root)
    config = validate(
        wrapped, _Wrapper.model_validate, error=WritingFileError, skip=_WRAPPERS
    ).config
    return config


def _missing_files(
    config: CyoaConfig | MilConfig | SloganConfig, document: YamlDocument
) -> list[str]:
    """Image prompts and word lists must exist next to the file."""
    problems = []
    for index, prompt in enumerate(config.prompts):
        if prompt.image is None:
            continue
        image = resolve_path(document.path, prompt.image)
        loc: tuple[str | int, ...] = ("prompts", index, "image")
        if not image.is_file():
            problems.append(f"{document.where(loc)}: no such file {image}")
        elif image.stat().st_size > MAX_IMAGE_BYTES:
            problems.append(f"{document.where(loc)}: larger than 5 MB")
    for index, spec in enumerate(config.generators):
        if spec.offensive_words is None:
            continue
        if not resolve_path(document.path, spec.offensive_words).is_file():
            key: tuple[str | int, ...] = (
                ("generators", index, "offensive_words")
                if config.kind == "cyoa"
                else ("generator", "offensive_words")
            )
            problems.append(f"{document.where(key)}: no such file")
    skeletons = config.suggester.skeletons if isinstance(config, SloganConfig) else None
    if skeletons is not None and not resolve_path(document.path, skeletons).is_file():
        problems.append(f"{document.where(('suggester', 'skeletons'))}: no such file")
    return problems


def load_writing_config(path: str | Path) -> CyoaConfig | MilConfig | SloganConfig:
    """Read and validate a ``kind: cyoa``, ``mil`` or ``slogan`` file; image prompts and word lists
    must exist next to it.

    Raises
    ------
    WritingFileError
        Listing every problem as ``FILE:LINE: key.path: reason``.
    FileNotFoundError
        If the file does not exist.
    """
    try:
        document = read_yaml(path, what="a writing-session file")
    except YamlFileError as exc:
        raise WritingFileError(exc.problems) from None
    config = parse_writing_config(document.data, where=str(document.path), root=document.root)
    problems = _missing_files(config, document)
    if problems:
        raise WritingFileError(problems)
    return config


def resolve_path(config_path: str | Path, relative: str) -> Path:
    """A path from a session file, relative to the file's folder."""
    return (Path(config_path).parent / relative).resolve()
