"""Signatures: every setting that can change a number, recorded beside the number.

A signature renders as ``name|key:value|...|version:x`` (after sacrebleu's signatures) and
round-trips through JSON, so a score printed today can be reproduced tomorrow.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from storyeval import __version__

SignatureValue = str | int | float | bool | None

_ESCAPES = (("%", "%25"), ("|", "%7C"), ("\n", "%0A"))


def _escape(text: str) -> str:
    for raw, escaped in _ESCAPES:
        text = text.replace(raw, escaped)
    return text


def _unescape(text: str) -> str:
    for raw, escaped in reversed(_ESCAPES):
        text = text.replace(escaped, raw)
    return text


def _render_value(value: SignatureValue) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return _escape(str(value))


@dataclass(frozen=True)
class Signature:
    """The identity of a computed number.

    Parameters
    ----------
    name : str
        What was computed (a metric, a statistic, a generator).
    fields : mapping of str to str, int, float, bool or None
        Every setting that changes the number, in display order: model identity, layer,
        options, seed, number of items... Keys may not contain ``|`` or ``:``.
    version : str
        The storyeval version that computed it (defaults to the running version).

    Examples
    --------
    >>> sig = Signature("bertscore_f", {"model": "all-MiniLM-L6-v2@3f2a", "layer": 4, "idf": False})
    >>> sig.render().rsplit("|", 1)[0]
    'bertscore_f|model:all-MiniLM-L6-v2@3f2a|layer:4|idf:no'
    >>> Signature.from_json(sig.to_json()) == sig
    True
    """

    name: str
    fields: Mapping[str, SignatureValue] = field(default_factory=dict)
    version: str = __version__

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "|" in self.name:
            raise ValueError(
                f"signature name must be a non-empty string without '|'; got {self.name!r}"
            )
        clean: dict[str, SignatureValue] = {}
        for key, value in dict(self.fields).items():
            if not isinstance(key, str) or not key or "|" in key or ":" in key:
                raise ValueError(
                    f"signature keys must be non-empty strings without '|' or ':'; got {key!r}"
                )
            if key == "version":
                raise ValueError(
                    "'version' is recorded by the signature itself; do not pass it as a field"
                )
            if not isinstance(value, str | int | float | bool) and value is not None:
                raise TypeError(
                    f"signature field {key!r} must be str, int, float, bool or None; got {type(value).__name__}"
                )
            clean[key] = value
        object.__setattr__(self, "fields", clean)

    def render(self) -> str:
        """The one-line form ``name|key:value|...|version:x``."""
        parts = [_escape(self.name)]
        parts += [f"{key}:{_render_value(value)}" for key, value in self.fields.items()]
        parts.append(f"version:{_escape(self.version)}")
        return "|".join(parts)

    __str__ = render

    def with_fields(self, **updates: SignatureValue) -> Signature:
        """A copy with some fields added or replaced (order kept, new keys appended)."""
        merged = dict(self.fields)
        merged.update(updates)
        return Signature(self.name, merged, self.version)

    def without(self, *keys: str) -> Signature:
        """A copy without the fields ``keys`` (absent ones are ignored)."""
        kept = {key: value for key, value in self.fields.items() if key not in keys}
        return Signature(self.name, kept, self.version)

    def to_dict(self) -> dict[str, Any]:
        """The signature as a JSON-ready mapping."""
        return {"name": self.name, "fields": dict(self.fields), "version": self.version}

    def to_json(self) -> str:
        """The signature as JSON text."""
        return json.dumps(self.to_dict(), sort_keys=False, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signature:
        """A signature from :meth:`to_dict`'s mapping."""
        missing = {"name", "fields", "version"} - set(data)
        if missing:
            raise ValueError(f"signature dict lacks {sorted(missing)}; got keys {sorted(data)}")
        return cls(str(data["name"]), dict(data["fields"]), str(data["version"]))

    @classmethod
    def from_json(cls, text: str) -> Signature:
        """A signature from :meth:`to_json`'s text."""
        return cls.from_dict(json.loads(text))

    @classmethod
    def parse(cls, rendered: str) -> Signature:
        """Parse the one-line form back. Values come back as strings (the text form is lossy
        about types: use JSON to round-trip exactly).

        >>> Signature.parse("bleu|tokenize:13a|version:0.1.0").fields
        {'tokenize': '13a'}
        """
        parts = rendered.split("|")
        if len(parts) < 2 or not parts[-1].startswith("version:"):
            raise ValueError(
                f"not a rendered signature (expected 'name|...|version:x'): {rendered!r}"
            )
        fields: dict[str, SignatureValue] = {}
        for part in parts[1:-1]:
            key, sep, value = part.partition(":")
            if not sep:
                raise ValueError(f"signature part {part!r} lacks ':' in {rendered!r}")
            fields[key] = _unescape(value)
        return cls(_unescape(parts[0]), fields, _unescape(parts[-1][len("version:") :]))
