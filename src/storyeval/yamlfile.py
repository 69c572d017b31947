"""What the YAML files people write (study files, writing-session files) share: strict models,
name rules, open enrollment, and the line of a key for ``FILE:LINE: key: reason`` messages."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class StrictModel(BaseModel):
    """A frozen model that refuses unknown keys (a misspelt key is an error, not ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
    by the external id in ``external_id_param`` (e.g. a Prolific id), up to
    ``max_participants``."""

    open: bool = False
    external_id_param: str = "pid"
    max_participants: int | None = Field(default=None, ge=1)


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
