"""One small registry for every plug-in family (metrics, perturbation techniques, study
protocols, session kinds, judge rubrics...).

A :class:`Registry` maps names to plug-ins of one family. Built-in plug-ins live in modules
that register themselves when imported; the registry imports them on first lookup (so
importing storyeval stays light), then the modules named by an entry-point group, so other
packages add plug-ins without touching storyeval. Unknown names raise an error that lists the
valid ones ("must be one of ...").

>>> shapes: Registry[int] = Registry("shape")
>>> shapes.register("triangle", 3)
3
>>> @shapes.decorate("square")
... def four() -> int:
...     return 4
>>> shapes.names(), shapes.get("triangle")
(('triangle', 'square'), 3)
>>> shapes.get("circle")
Traceback (most recent call last):
...
storyeval.base.registry.UnknownNameError: unknown shape 'circle'; must be one of triangle, square
>>> shapes.get("Square")
Traceback (most recent call last):
...
storyeval.base.registry.UnknownNameError: unknown shape 'Square' (did you mean square?); must be one of triangle, square
"""

from __future__ import annotations

import importlib
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, TypeVar

from storyeval.base.errors import StoryevalError, StoryevalWarning

T = TypeVar("T")
F = TypeVar("F")


def did_you_mean(name: object, known: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the known names closest to ``name`` (case, ``_`` and ``-``
    ignored first, then spelling), or ``""``.

    >>> did_you_mean("rouge_l", ["rouge1", "rougeL", "bleu"]), did_you_mean("zzz", ["bleu"])
    (' (did you mean rougeL?)', '')
    """
    import difflib

    if not isinstance(name, str):
        return ""
    names = list(known)

    def folded(text: str) -> str:
        return text.lower().replace("_", "").replace("-", "")

    same = [n for n in names if folded(n) == folded(name)]
    close = same or difflib.get_close_matches(name, names, n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


class UnknownNameError(StoryevalError, KeyError):
    """A name that a registry does not know (the message lists the valid names)."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class PluginLoadWarning(StoryevalWarning):
    """A plug-in named by an entry point failed to import (storyeval goes on without it)."""


class Registry(Generic[T]):
    """Named plug-ins of one family.

    Parameters
    ----------
    family : str
        What the plug-ins are, for messages (``"metric"``, ``"study protocol"``).
    builtins : sequence of str or callable
        Modules imported on the first lookup (they register the built-in plug-ins), or a
        function that imports them.
    entry_point_group : str, optional
        Entry-point group whose modules are imported after the built-ins.
    error : type
        The exception raised for an unknown name (a subclass of :class:`UnknownNameError`
        or any ``StoryevalError`` taking one message).
    """

    def __init__(
        self,
        family: str,
        *,
        builtins: Sequence[str] | Callable[[], None] = (),
        entry_point_group: str | None = None,
        error: type[Exception] = UnknownNameError,
    ) -> None:
        self.family = family
        self._builtins = builtins
        self._group = entry_point_group
        self._error = error
        self._items: dict[str, T] = {}
        self._lock = threading.RLock()
        self._loaded = False

    # ------------------------------------------------------------------ registering

    def register(self, name: str, value: T, *, replace: bool = False) -> T:
        """Add ``value`` under ``name``; a taken name is an error unless ``replace``."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.family} name must be a non-empty string; got {name!r}")
        with self._lock:
            if name in self._items and not replace and self._items[name] is not value:
                raise ValueError(f"{self.family} {name!r} is already registered")
            self._items[name] = value
        return value

    def decorate(self, name: str, *, replace: bool = False) -> Callable[[F], F]:
        """``@registry.decorate(name)``: register the decorated object as is."""

        def decorator(value: F) -> F:
            self.register(name, value, replace=replace)  # type: ignore[arg-type]
            return value

        return decorator

    def unregister(self, name: str) -> None:
        """Remove ``name`` if registered (tests and interactive experiments)."""
        with self._lock:
            self._items.pop(name, None)

    def registered(self, name: str) -> T | None:
        """The plug-in registered under ``name`` so far (no loading), or None."""
        return self._items.get(name)

    # ------------------------------------------------------------------ looking up

    def load(self, *, force: bool = False) -> None:
        """Import the built-in plug-in modules and the entry points (once)."""
        if self._loaded and not force:
            return
        with self._lock:
            if self._loaded and not force:
                return
            self._loaded = True
            if callable(self._builtins):
                self._builtins()
            else:
                for module in self._builtins:
                    importlib.import_module(module)
            if self._group is not None:
                self._load_entry_points(self._group)

    def _load_entry_points(self, group: str) -> None:
        from importlib.metadata import entry_points

        for entry in entry_points(group=group):
            try:
                entry.load()
            except Exception as exc:  # a broken plug-in must not break storyeval
                warnings.warn(
                    f"{self.family} plug-in {entry.name} ({entry.value}) failed to load: {exc}",
                    PluginLoadWarning,
                    stacklevel=3,
                )

    def get(self, name: str) -> T:
        """The plug-in ``name``; an unknown name raises with the list of valid names."""
        self.load()
        try:
            return self._items[name]
        except (KeyError, TypeError):
            raise self._error(
                f"unknown {self.family} {name!r}{did_you_mean(name, self._items)}; must be one "
                f"of {', '.join(self._items)}"
            ) from None

    def names(self) -> tuple[str, ...]:
        """Registered names in registration order."""
        self.load()
        return tuple(self._items)

    def items(self) -> list[tuple[str, T]]:
        """``(name, plug-in)`` pairs in registration order."""
        self.load()
        return list(self._items.items())

    def values(self) -> list[T]:
        """The plug-ins in registration order."""
        self.load()
        return list(self._items.values())

    def __getitem__(self, name: str) -> T:
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        self.load()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.family!r}, {len(self._items)} registered)"
