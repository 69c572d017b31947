"""A persistent cache of judge answers (SQLite), keyed by the judge's identity, the full
prompt and the decoding settings: re-running a judged corpus makes no model call, and an
interrupted run resumes where it stopped."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from storyeval.judge.backends import JudgeAnswer
from storyeval.judge.prompts import JudgeRequest


def default_cache_path() -> Path:
    """``~/.cache/storyeval/judge-cache.sqlite`` (under ``$STORYEVAL_CACHE`` when set)."""
    from storyeval.models import cache_dir

    return cache_dir() / "judge-cache.sqlite"


def cache_key(identity: str, request: JudgeRequest, settings: Mapping[str, Any]) -> str:
    """The SHA-256 of everything that determines an answer."""
    payload = {
        "judge": identity,
        "messages": list(request.messages),
        "labels": list(request.labels),
        "generate": request.generate,
        "analysed": request.analysed,
        "settings": dict(settings),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


class JudgeCache:
    """Answers by key, in one SQLite file (written as each batch finishes).

    >>> import tempfile, pathlib
    >>> cache = JudgeCache(pathlib.Path(tempfile.mkdtemp()) / "c.sqlite")
    >>> cache.put("k", JudgeAnswer((0.25, 0.75), None)); cache.get("k")
    JudgeAnswer(probabilities=(0.25, 0.75), text=None)
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # several worker processes may share the file: wait for a writer rather than fail
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=120)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, probabilities TEXT, text TEXT)"
        )
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> JudgeAnswer | None:
        """The stored answer, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT probabilities, text FROM answers WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        probabilities = tuple(json.loads(row[0])) if row[0] is not None else None
        return JudgeAnswer(probabilities, row[1])

    def put(self, key: str, answer: JudgeAnswer) -> None:
        """Store an answer (committed at once)."""
        probabilities = json.dumps(list(answer.probabilities)) if answer.probabilities else None
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO answers VALUES (?, ?, ?)", (key, probabilities, answer.text)
            )

    def close(self) -> None:
        """Close the file."""
        self._db.close()
