"""Human evaluation studies described in one YAML file: loading, validation, items.

A study file names a story file, a protocol and everything a participant sees. It is validated
when loaded; every problem is reported as ``FILE:LINE: key.path: what is wrong``. What differs
between protocols (``likert``, ``side_by_side``, ``pairwise``, ``detection``, ``triangle``,
``best_worst``) lives in :mod:`storyeval.human.protocols`, one module each.

Example
-------
>>> import pathlib
>>> study = load_study(pathlib.Path(__file__).parents[3] / "examples/studies/likert.yaml")
>>> study.protocol, [c.name for c in study.config.criteria]
('likert', ['grammar', 'coherence', 'likability', 'relevance'])
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError, create_model, field_validator

from storyeval.base.errors import DataFileError
from storyeval.base.yamlfile import (
    Loc,
    YamlDocument,
    YamlFileError,
    loc_text,
    read_yaml,
    stable_dump,
    validate,
    validation_messages,
)
from storyeval.corpus import Story, prompt_group, read_stories
from storyeval.human.model import (
    ORDERS,
    SCALE_SIZES,
    AttentionCheck,
    Criterion,
    Item,
    Question,
    ResolvedCheck,
    ResolvedTraining,
    Study,
    StudyConfig,
    StudyFileError,
    Text,
    TrainingExample,
)
from storyeval.human.protocols import PROTOCOLS, get_protocol
from storyeval.human.protocols.base import Problem, StudyProtocol, text_of

#: Sections added to the study file after storyeval 0.1; left out of the canonical form (and
#: so of the study version) while they hold their defaults.
_LATER_SECTIONS = ("comprehension", "platform", *("best_worst", "spans"))


# ----------------------------------------------------------------------------- the model


@functools.cache
def _config_model(protocols: tuple[str, ...]) -> type[StudyConfig]:
    fields: dict[str, Any] = {}
    for name in protocols:
        model = get_protocol(name).options_model
        if model is not None:
            fields[name] = (model | None, None)

    def _protocol(cls: Any, value: str) -> str:
        if value not in protocols:
            raise ValueError(f"must be one of {', '.join(protocols)}; got {value!r}")
        return value

    created: type[StudyConfig] = create_model(
        "StudyConfig",
        __base__=StudyConfig,
        __validators__={"_protocol": field_validator("protocol")(_protocol)},
        **fields,
    )
    return created


def config_model() -> type[StudyConfig]:
    """The study-file model: the common sections plus each registered protocol's section."""
    return _config_model(PROTOCOLS.names())


def answer_keys(config: StudyConfig) -> dict[str, tuple[int, ...]]:
    """Answer keys and accepted values for one page of the study's protocol.

    ``likert``: one key per criterion (``1..scale``); ``side_by_side``: ``criterion@1`` and
    ``criterion@2`` for the left and right text; ``pairwise``: one key per criterion, 1 or 2
    for the left or right text (0 for a tie when allowed); ``detection``: ``source`` (1-4);
    ``triangle``: ``odd`` (1-3); ``best_worst``: ``criterion:best`` and ``criterion:worst``
    (positions in the tuple); ``spans``: ``u1``, ``u2``... (0 = no problem, else the taxonomy
    label's number) and ``confirm`` (1).
    """
    return get_protocol(config.protocol).answer_keys(config)


# ----------------------------------------------------------------------------- loading


def load_study(path: str | Path) -> Study:
    """Read, validate and resolve a study file.

    Raises
    ------
    StudyFileError
        Listing every problem as ``FILE:LINE: key.path: reason``.
    FileNotFoundError
        If the study file does not exist.
    """
    try:
        document = read_yaml(path, what="a study file")
    except YamlFileError as exc:
        raise StudyFileError(exc.problems) from None
    config = validate(document, config_model().model_validate, error=StudyFileError)
    return resolve_study(
        config, base_dir=document.path.parent, path=document.path, where=document.where
    )


def study_from_dict(data: Mapping[str, Any], *, base_dir: str | Path = ".") -> Study:
    """Validate and resolve a study given as a mapping (paths relative to ``base_dir``)."""
    try:
        config = config_model().model_validate(dict(data))
    except ValidationError as exc:
        raise StudyFileError(
            [f"{loc_text(loc)}: {msg}" for loc, msg in validation_messages(exc)]
        ) from None
    return resolve_study(config, base_dir=Path(base_dir), path=None, where=loc_text)


def resolve_study(
    config: StudyConfig,
    *,
    base_dir: Path,
    path: Path | None,
    where: Any = loc_text,
) -> Study:
    """Check what the schema cannot (cross-field rules, story ids) and build the items."""
    problems: list[str] = []

    def problem(loc: Loc, message: str) -> None:
        problems.append(f"{where(loc)}: {message}")

    protocol = get_protocol(config.protocol)
    stories_path = (base_dir / config.stories).resolve()
    stories: list[Story] = []
    try:
        stories = read_stories(stories_path)
    except FileNotFoundError:
        problem(("stories",), f"story file {stories_path} does not exist")
    except DataFileError as exc:
        problem(("stories",), f"story file is invalid:\n{exc}")
    _check_common(config, protocol, problem)
    protocol.check(config, problem)
    if problems:
        raise StudyFileError(problems)
    by_id = {s.id: s for s in stories}
    training = _resolve_training(config, protocol, by_id, problem)
    checks = _resolve_checks(config, protocol, by_id, problem)
    # training texts, and every story sharing a prompt with one, never become items
    training_ids = {t.id for example in training for t in example.texts}
    training_prompts = {prompt_group(by_id[i]) for i in training_ids if i in by_id}
    excluded = training_ids | {s.id for s in stories if prompt_group(s) in training_prompts}
    items = protocol.build_items(config, stories, excluded, problem)
    if not items and not problems and not protocol.one_slot_per_item():
        problem(("select",), "the selection yields no items")
    if problems:
        raise StudyFileError(problems)
    digest = hashlib.sha256(stories_path.read_bytes()).hexdigest()
    return Study(
        config,
        path,
        stories_path,
        tuple(items),
        training,
        checks,
        _version(_canonical_config(config), items, training, checks),
        digest,
        raters_per_item=protocol.raters_per_item(config),
        keys=protocol.answer_keys(config),
        legacy_version=_legacy_version(config, items, training, checks),
    )


def _canonical_config(config: StudyConfig) -> dict[str, Any]:
    data: dict[str, Any] = stable_dump(config)
    data.pop("reporting", None)
    for key in _LATER_SECTIONS:  # keep the versions of files written for 0.1 unchanged
        fields = type(config).model_fields
        default = fields[key].get_default(call_default_factory=True) if key in fields else None
        if key in data and (data[key] is None or data[key] == _dumped(default)):
            data.pop(key)
    for key in [k for k, v in data.items() if v is None and k in PROTOCOLS]:
        data.pop(key)  # absent protocol sections
    for key in ("reservation_minutes", "adaptive"):  # later options, absent while unset
        if data.get("assignment", {}).get(key) is None:
            data.get("assignment", {}).pop(key, None)
    if data.get("quality", {}).get("record_typing") is True:
        data["quality"].pop("record_typing")  # a later option: its default keeps the version
    adaptive = data.get("assignment", {}).get("adaptive")
    if isinstance(adaptive, dict) and adaptive.get("variance_floor") == 0.25:
        adaptive.pop("variance_floor")  # a later option: its default keeps a file's version
    pairwise = data.get("pairwise")
    if isinstance(pairwise, dict) and pairwise.get("pairs") is None:
        pairwise.pop("pairs", None)  # a later option: files with systems keep their version
    if isinstance(pairwise, dict) and pairwise.get("why_question") is None:
        pairwise.pop("why_question", None)  # later options, absent while unset
        if pairwise.get("why_required") is True:
            pairwise.pop("why_required")
    return data


def _dumped(value: Any) -> Any:
    from pydantic import BaseModel

    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _version(
    config: Mapping[str, Any],
    items: Sequence[Item],
    training: Sequence[ResolvedTraining],
    checks: Sequence[ResolvedCheck],
) -> str:
    canonical = json.dumps(
        {
            "config": config,
            "items": [i.to_dict() for i in items],
            "training": [[t.to_dict() for t in ex.texts] for ex in training],
            "checks": [[t.to_dict() for t in c.texts] for c in checks],
        },
        sort_keys=True,
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _legacy_version(
    config: StudyConfig,
    items: Sequence[Item],
    training: Sequence[ResolvedTraining],
    checks: Sequence[ResolvedCheck],
) -> str | None:
    """The version storyeval 0.1 gave this file (it wrote every protocol section, 60-minute
    reservations, and questions as ``text``), so a database made by 0.1 keeps serving it."""
    if config.protocol not in ("likert", "side_by_side", "pairwise", "detection", "triangle"):
        return None
    if any(key in _canonical_config(config) for key in _LATER_SECTIONS):
        return None
    data = _canonical_config(config)
    for name in ("side_by_side", "pairwise", "detection", "triangle"):
        data.setdefault(name, None)
    assignment = data.setdefault("assignment", {})
    if config.assignment.reservation_minutes is None:
        assignment["reservation_minutes"] = 60.0
    data["questions"] = [
        {"name": q["name"], "text": q["question"], "required": q["required"]}
        for q in data.get("questions", [])
    ]
    return _version(data, items, training, checks)


def _check_common(config: StudyConfig, protocol: StudyProtocol, problem: Problem) -> None:
    """The rules every protocol shares: sections, criteria, caps, checks, questions."""
    _check_sections(config, protocol, problem)
    _check_criteria(config, protocol, problem)
    assignment = config.assignment
    cap = assignment.max_items_per_participant
    if cap is not None and cap < assignment.items_per_participant:
        problem(
            ("assignment", "max_items_per_participant"),
            f"must be >= items_per_participant ({assignment.items_per_participant}); got {cap}",
        )
    if not (protocol.options_required and getattr(config, protocol.name, None) is None):
        _check_attention_answers(config, protocol, problem)  # the answer keys need the section
    _check_attention_ids(config, problem)
    _check_unique([q.name for q in config.questions], ("questions",), "question name", problem)
    _check_comprehension(config, problem)
    _check_adaptive(config, protocol, problem)
    if config.completion.url is not None and not config.completion.url.startswith(
        ("https://", "http://")
    ):
        problem(("completion", "url"), "must be an http(s) URL")


def _check_adaptive(config: StudyConfig, protocol: StudyProtocol, problem: Problem) -> None:
    adaptive = config.assignment.adaptive
    if adaptive is None:
        return
    loc: Loc = ("assignment", "adaptive")
    if protocol.one_slot_per_item():
        problem(loc, f"the {protocol.name} protocol gives each item one rater; nothing to route")
        return
    most = protocol.raters_per_item(config)
    if adaptive.min_raters > most:
        problem(
            (*loc, "min_raters"), f"must be <= raters_per_item ({most}); got {adaptive.min_raters}"
        )
    known = {c.name for c in config.criteria}
    for i, name in enumerate(adaptive.criteria or []):
        if known and name not in known:
            problem(
                (*loc, "criteria", i), f"unknown criterion {name!r}; the study asks {sorted(known)}"
            )


def _check_unique(names: Sequence[str], loc: Loc, what: str, problem: Problem) -> None:
    for i, name in enumerate(names):
        if names.count(name) > 1:
            problem((*loc, i, "name"), f"{what} {name!r} is used twice")


def _check_sections(config: StudyConfig, protocol: StudyProtocol, problem: Problem) -> None:
    for name in PROTOCOLS.names():
        if name != protocol.name and getattr(config, name, None) is not None:
            problem((name,), f"this section belongs to protocol {name!r}, not {protocol.name!r}")
    if protocol.options_required and getattr(config, protocol.name, None) is None:
        problem(
            (protocol.name,),
            f"required for protocol {protocol.name!r} (it names what is compared)",
        )


def _check_criteria(config: StudyConfig, protocol: StudyProtocol, problem: Problem) -> None:
    if protocol.criteria == "none":
        if config.criteria:
            problem(
                ("criteria",),
                f"protocol {protocol.name!r} asks a fixed question; remove 'criteria'",
            )
    elif not config.criteria:
        problem(("criteria",), f"protocol {protocol.name!r} needs at least one criterion")
    _check_unique([c.name for c in config.criteria], ("criteria",), "criterion name", problem)
    for i, criterion in enumerate(config.criteria):
        if protocol.criteria == "choice" and (
            criterion.scale is not None or criterion.labels is not None
        ):
            problem(
                ("criteria", i),
                f"a {protocol.name} criterion is a choice between texts: remove 'scale' and 'labels'",
            )


def _check_attention_answers(
    config: StudyConfig, protocol: StudyProtocol, problem: Problem
) -> None:
    keys = protocol.answer_keys(config)
    for i, check in enumerate(config.attention_checks):
        for key, values in check.expect.items():
            loc = ("attention_checks", i, "expect", key)
            if key not in keys:
                problem(
                    loc, f"unknown answer {key!r}; this protocol's answers are {', '.join(keys)}"
                )
            elif not values or any(v not in keys[key] for v in values):
                problem(loc, f"accepted values must be among {list(keys[key])}; got {values}")


def _check_attention_ids(config: StudyConfig, problem: Problem) -> None:
    ids = [c.id for c in config.attention_checks]
    last = config.assignment.items_per_participant + len(ids)
    for i, check in enumerate(config.attention_checks):
        if ids.count(check.id) > 1:
            problem(("attention_checks", i, "id"), f"attention-check id {check.id!r} is used twice")
        if check.position is not None and check.position > last:
            problem(
                ("attention_checks", i, "position"), "is after the end of a participant's batch"
            )


def _check_comprehension(config: StudyConfig, problem: Problem) -> None:
    if config.comprehension is None:
        return
    names = [q.name for q in config.comprehension.questions]
    _check_unique(names, ("comprehension", "questions"), "question name", problem)
    if config.platform.name == "prolific" and config.platform.screen_out_code is None:
        problem(
            ("platform", "screen_out_code"),
            "required with a comprehension check on Prolific: participants who fail it are "
            "screened out with this code (and paid)",
        )


def _texts_from(
    spec: TrainingExample | AttentionCheck,
    by_id: Mapping[str, Story],
    loc: Loc,
    problem: Problem,
) -> tuple[Text, ...]:
    texts: list[Text] = []
    given = [k for k in ("story", "stories", "text", "texts") if getattr(spec, k) is not None]
    if len(given) != 1:
        problem(
            loc,
            "give exactly one of 'story' / 'stories' (ids in the story file) or 'text' / 'texts' (inline)",
        )
        return ()
    ids: list[str] = []
    if spec.story is not None:
        ids = [spec.story]
    elif spec.stories is not None:
        ids = list(spec.stories)
    for j, story_id in enumerate(ids):
        if story_id not in by_id:
            key = (*loc, "story") if spec.story is not None else (*loc, "stories", j)
            problem(key, f"no story with id {story_id!r} in the story file")
        else:
            texts.append(text_of(by_id[story_id]))
    inline = [spec.text] if spec.text is not None else list(spec.texts or [])
    for j, t in enumerate(inline):
        texts.append(Text(t.id or f"{loc_text(loc)}-{j + 1}", t.system, t.prompt, t.story))
    return tuple(texts)


def _check_page_size(
    config: StudyConfig,
    protocol: StudyProtocol,
    texts: Sequence[Text],
    loc: Loc,
    problem: Problem,
    *,
    training: bool = False,
) -> None:
    expected = protocol.page_size(config)
    allowed = protocol.training_page_sizes(config) if training else (expected,)
    if texts and len(texts) not in allowed:
        problem(
            loc, f"protocol {protocol.name!r} shows {expected} text(s) per page; got {len(texts)}"
        )


def _resolve_training(
    config: StudyConfig, protocol: StudyProtocol, by_id: Mapping[str, Story], problem: Problem
) -> tuple[ResolvedTraining, ...]:
    resolved = []
    for i, example in enumerate(config.training):
        loc: Loc = ("training", i)
        texts = _texts_from(example, by_id, loc, problem)
        texts = protocol.training_texts(config, texts, by_id, loc, problem)
        _check_page_size(config, protocol, texts, loc, problem, training=True)
        protocol.check_training(config, example, loc, problem)
        resolved.append(
            ResolvedTraining(texts, example.answer, example.answers, example.explanation)
        )
    return tuple(resolved)


def _resolve_checks(
    config: StudyConfig, protocol: StudyProtocol, by_id: Mapping[str, Story], problem: Problem
) -> tuple[ResolvedCheck, ...]:
    resolved = []
    for i, check in enumerate(config.attention_checks):
        loc: Loc = ("attention_checks", i)
        texts = _texts_from(check, by_id, loc, problem)
        _check_page_size(config, protocol, texts, loc, problem)
        expect = {key: tuple(values) for key, values in check.expect.items()}
        resolved.append(ResolvedCheck(check.id, texts, expect, check.position))
    return tuple(resolved)


def iter_study_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand directories into the ``*.yaml`` / ``*.yml`` files they contain."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml")))
        else:
            found.append(path)
    return found


__all__ = [
    "ORDERS",
    "PROTOCOLS",
    "SCALE_SIZES",
    "AttentionCheck",
    "Criterion",
    "Item",
    "Question",
    "ResolvedCheck",
    "ResolvedTraining",
    "Study",
    "StudyConfig",
    "StudyFileError",
    "Text",
    "TrainingExample",
    "YamlDocument",
    "answer_keys",
    "config_model",
    "iter_study_files",
    "load_study",
    "resolve_study",
    "study_from_dict",
]
