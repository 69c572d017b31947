"""The one way storyeval reads the YAML files people write (study files, writing-session files,
rubrics): strict models, name rules, open enrollment, and every problem reported as
``FILE:LINE: key.path: reason``.

>>> import tempfile, pathlib
>>> class Example(StrictModel):
...     name: str
...     scale: int = 5
>>> path = pathlib.Path(tempfile.mkdtemp()) / "example.yaml"
>>> _ = path.write_text("name: a\\nscael: 7\\n")
>>> load_model(path, Example)
Traceback (most recent call last):
...
storyeval.base.yamlfile.YamlFileError: .../example.yaml:2: scael: unknown key 'scael' (check the spelling)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from storyeval.base.errors import StoryevalError

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]


class YamlFileError(StoryevalError, ValueError):
    """A YAML file is invalid; ``problems`` holds one ``FILE:LINE: key.path: reason`` each."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class StrictModel(BaseModel):
    """A frozen model that refuses unknown keys (a misspelt key is an error, not ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def check_name(value: str, what: str) -> str:
    """``value`` if it is a valid name (a URL and file-name safe id), else ``ValueError``.

    >>> check_name("likert-1", "the study name")
    'likert-1'
    """
    if not NAME_PATTERN.match(value):
        raise ValueError(
            f"{what} must start with a letter or digit and use only letters, digits, '_', '-', "
            f"'.' (at most 64 characters); got {value!r}"
        )
    return value


class Enrollment(StrictModel):
    """Open enrollment: anyone with the session's public link gets a participant link, keyed
    by the external id in ``external_id_param`` (e.g. a Prolific id).

    ``max_participants`` caps the participants who hold a place: those who consented and were
    neither screened out nor returned (opening the link holds no place; the cap is checked
    again, in the database, at consent). ``require_id``: whether a join must carry the
    external id; by default it must when the study names a crowd platform (a participant
    without a platform id could not be paid and could bypass a screen-out), and need not
    otherwise; ``require_id: false`` allows anonymous joins on a platform study explicitly.
    ``max_per_address``: at most this many participants who consented from one network
    address in the last ``address_window_minutes`` may be unfinished at once (so one client
    cannot reserve a study's items; behind a reverse proxy, serve with ``--trust-proxy``);
    ``null`` lifts the limit (a lab where everyone shares one address).
    """

    ADDED_LATER: ClassVar[tuple[str, ...]] = (
        "require_id",
        "max_per_address",
        "address_window_minutes",
    )

    open: bool = False
    external_id_param: str = "pid"
    max_participants: int | None = Field(default=None, ge=1)
    require_id: bool | None = None
    max_per_address: int | None = Field(default=3, ge=1)
    address_window_minutes: float = Field(default=60.0, gt=0)


def stable_dump(model: BaseModel) -> dict[str, Any]:
    """``model.model_dump(mode="json")`` without the fields a later version added (named in a
    model's ``ADDED_LATER``) while they keep their defaults, at any depth: a file written before
    those fields existed keeps its version hash.

    >>> stable_dump(Enrollment(open=True))
    {'open': True, 'external_id_param': 'pid', 'max_participants': None}
    """
    data: dict[str, Any] = model.model_dump(mode="json")
    _drop_later_defaults(model, data)
    return data


def _drop_later_defaults(model: BaseModel, data: dict[str, Any]) -> None:
    fields = type(model).model_fields
    for name in getattr(model, "ADDED_LATER", ()):
        default = fields[name].get_default(call_default_factory=True)
        value = getattr(model, name)
        dumped = default.model_dump(mode="json") if isinstance(default, BaseModel) else default
        if name in data and (value == default or data[name] == dumped):
            data.pop(name)
    for name in list(data):
        value = getattr(model, name, None)
        if isinstance(value, BaseModel) and isinstance(data[name], dict):
            _drop_later_defaults(value, data[name])
        elif isinstance(value, list) and isinstance(data[name], list):
            for item, dumped_item in zip(value, data[name], strict=False):
                if isinstance(item, BaseModel) and isinstance(dumped_item, dict):
                    _drop_later_defaults(item, dumped_item)


class OpenQuestion(StrictModel):
    """A free-text question (end of a study, end of a writing session). ``text`` is accepted
    as another spelling of ``question``."""

    name: str
    question: str = Field(min_length=1, validation_alias=AliasChoices("question", "text"))
    required: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_name(value, "a question name")


# ----------------------------------------------------------------------------- locations


def loc_text(loc: Sequence[str | int]) -> str:
    """A key path as people read it: ``criteria[0].scale``.

    >>> loc_text(("criteria", 0, "scale")), loc_text(())
    ('criteria[0].scale', '(top level)')
    """
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


def yaml_line(root: Any, loc: Sequence[str | int]) -> int | None:
    """The 1-based line of the YAML key (or sequence item) at ``loc``, or of its deepest
    existing ancestor; ``root`` is the node tree of ``yaml.compose``.

    >>> import yaml
    >>> yaml_line(yaml.compose("a: 1\\nb:\\n  - x\\n  - y\\n"), ("b", 1))
    4
    """
    import yaml

    node = root
    line = None if node is None else node.start_mark.line + 1
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            match = None
            for key_node, value_node in node.value:
                if str(key_node.value) == str(key):
                    match = (key_node, value_node)
                    break
            if match is None:
                return line
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int):
            if not 0 <= key < len(node.value):
                return line
            node = node.value[key]
            line = node.start_mark.line + 1
        else:
            return line
    return line


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def validation_messages(exc: ValidationError, *, skip: Sequence[str] = ()) -> list[tuple[Loc, str]]:
    """Pydantic's errors as ``(location, message)``, one per location, in a uniform wording:
    unknown keys name the key, missing keys say so, bad values show what was given. ``skip``
    drops wrapper names from locations."""
    problems: list[tuple[Loc, str]] = []
    for error in exc.errors():
        loc = tuple(
            part
            for part in error["loc"]
            if not (isinstance(part, str) and ("[" in part or part in skip))
        )  # drops pydantic's union-branch tags such as 'list[str]'
        kind = error["type"]
        message = str(error["msg"]).removeprefix("Value error, ")
        if kind == "extra_forbidden":
            message = f"unknown key {str(loc[-1])!r} (check the spelling)"
        elif kind == "missing":
            message = "required key is missing"
        elif "input" in error and kind not in ("value_error",):
            message = f"{message}; got {_short(error['input'])}"
        problems.append((loc, message))
    unique: dict[Loc, str] = {}
    for loc, message in problems:  # union errors repeat a problem per branch
        unique.setdefault(loc, message)
    return list(unique.items())


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file: its data, its node tree (for line numbers) and where it is."""

    path: Path
    data: Any
    root: Any

    def where(self, loc: Sequence[str | int]) -> str:
        """``FILE:LINE: key.path`` of a location."""
        return f"{self.path}:{self.line(loc)}: {loc_text(loc)}"

    def line(self, loc: Sequence[str | int]) -> int:
        """The 1-based line of the key at ``loc`` (or of its deepest existing ancestor)."""
        return yaml_line(self.root, loc) or 1

    def problems(self, found: Sequence[tuple[Loc, str]]) -> list[str]:
        """``FILE:LINE: key.path: message`` for each problem, in file order."""
        ordered = sorted(found, key=lambda item: self.line(item[0]))
        return [f"{self.where(loc)}: {message}" for loc, message in ordered]


def read_yaml(path: str | Path, *, what: str = "a YAML file") -> YamlDocument:
    """Read a YAML mapping; malformed YAML or another top-level type raises
    :class:`YamlFileError` with the line.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    """
    import yaml

    file_path = Path(path)
    if not file_path.exists():
        raise FileNotFoundError(f"{file_path}: no such file")
    try:
        text = file_path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise YamlFileError([f"{file_path}:1: not UTF-8 text ({exc.reason})"]) from None
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlFileError([f"{file_path}:{line}: malformed YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise YamlFileError([f"{file_path}:1: {what} must be a YAML mapping of keys"])
    return YamlDocument(file_path, data, root)


def validate(
    document: YamlDocument,
    model: Callable[[Any], M],
    *,
    error: type[YamlFileError] = YamlFileError,
    skip: Sequence[str] = (),
) -> M:
    """Validate a document's data with ``model`` (a pydantic model's ``model_validate``, or
    any function that validates with pydantic), every problem reported as
    ``FILE:LINE: key.path: reason``."""
    try:
        return model(document.data)
    except ValidationError as exc:
        raise error(document.problems(validation_messages(exc, skip=skip))) from None


def load_model(
    path: str | Path,
    model: type[M],
    *,
    what: str = "a YAML file",
    error: type[YamlFileError] = YamlFileError,
) -> M:
    """Read and validate a YAML file in one step."""
    try:
        document = read_yaml(path, what=what)
    except YamlFileError as exc:
        raise error(exc.problems) from None
    return validate(document, model.model_validate, error=error)
