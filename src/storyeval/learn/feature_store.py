"""Story features saved as they are computed: an interrupted training resumes where it
stopped, and a retraining with other head settings encodes nothing again.

The features of a model (its identity and precision) live in one directory, in chunks of
:data:`FEATURE_CHUNK` texts, each a ``.npz`` file with the texts' SHA-256 keys and their
feature rows, written atomically: a run killed while encoding loses at most the chunk it was
on. A text is found by its content, so a story file that grew, shrank or was reordered reuses
every text it still holds.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from storyeval.base.errors import StoryevalError

#: Texts encoded between two saves.
FEATURE_CHUNK = 512


def text_key(text: str) -> str:
    """The key of a text in a store (SHA-256 of its UTF-8 bytes, 32 hex digits)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class FeatureStore:
    """The stored features of one model, in ``directory``.

    Examples
    --------
    >>> import tempfile
    >>> store = FeatureStore(Path(tempfile.mkdtemp()))
    >>> def encode(texts):
    ...     return np.array([[len(t), 1.0] for t in texts])
    >>> store.features(["ab", "abc", "ab"], encode)[1]  # two distinct texts encoded
    2
    >>> FeatureStore(store.directory).features(["abc"], encode)  # a new run encodes nothing
    (array([[3., 1.]]), 0)
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._rows: dict[str, np.ndarray] = {}
        for chunk in sorted(self.directory.glob("chunk-*.npz")):
            try:
                with np.load(chunk, allow_pickle=False) as saved:
                    keys, rows = saved["keys"], saved["features"]
            except (OSError, ValueError, KeyError) as exc:
                raise StoryevalError(f"{chunk}: not a feature chunk ({exc}); delete it") from exc
            self._rows.update(zip((str(k) for k in keys), rows, strict=True))

    @classmethod
    def for_model(cls, root: str | Path, identity: str, precision: str) -> FeatureStore:
        """The store of a model's features under ``root`` (one directory per identity and
        precision, named by their hash; ``model.txt`` there says which)."""
        name = hashlib.sha256(f"{identity}|{precision}".encode()).hexdigest()[:16]
        store = cls(Path(root) / name)
        store.directory.mkdir(parents=True, exist_ok=True)
        (store.directory / "model.txt").write_text(f"{identity}\n{precision}\n", encoding="utf-8")
        return store

    def __len__(self) -> int:
        return len(self._rows)

    def features(
        self,
        texts: Sequence[str],
        encode: Callable[[list[str]], np.ndarray],
        *,
        chunk: int | None = None,
    ) -> tuple[np.ndarray, int]:
        """The feature rows of ``texts`` (in order) and how many texts were encoded now; the
        texts the store lacks are encoded ``chunk`` at a time (default
        :data:`FEATURE_CHUNK`), each chunk saved before the next starts."""
        size = chunk or FEATURE_CHUNK
        keys = [text_key(t) for t in texts]
        todo: dict[str, str] = {}  # the texts to encode, each once, in first-seen order
        for key, text in zip(keys, texts, strict=True):
            if key not in self._rows:
                todo.setdefault(key, text)
        order = list(todo)
        for start in range(0, len(order), size):
            part = order[start : start + size]
            rows = np.asarray(encode([todo[k] for k in part]))
            if rows.ndim != 2 or len(rows) != len(part):
                raise StoryevalError(f"the encoder gave {rows.shape} for {len(part)} texts")
            self._save(part, rows)
            self._rows.update(zip(part, rows, strict=True))
        if not keys:
            return np.zeros((0, 0)), 0
        return np.stack([self._rows[k] for k in keys]), len(order)

    def _save(self, keys: list[str], rows: np.ndarray) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        name = f"chunk-{time.time_ns():020d}-{os.getpid()}"
        temporary = self.directory / f".{name}.tmp"
        with temporary.open("wb") as sink:
            np.savez(sink, keys=np.array(keys), features=rows)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temporary, self.directory / f"{name}.npz")
