"""An SQLite index of the joined files, so a large corpus opens in a second or two.

The first ``storyeval view`` of a set of files reads and joins them as usual
(:func:`storyeval.view.data.load_view_data`) and writes the result to one SQLite file: the
stories (texts stay on disk; the views ask for a page, a prompt or a search), the table of one
row per story, the scores, ratings, judgments and comparisons. Later opens of the same files
read the index instead, while every input keeps its size and modification time (one index
file per set of input paths, in ``$XDG_CACHE_HOME/storyeval/view`` by default); a changed
input rebuilds it in place. The index is written to a
temporary file and renamed, so an interrupted build leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd

from storyeval.corpus import Story
from storyeval.view.data import ViewData, input_paths, load_view_data

#: Bumped when the index layout changes (old indexes are then rebuilt).
INDEX_VERSION = 2
_FRAMES = ("scores", "people", "judges", "comparisons", "rankings")


def default_index_dir() -> Path:
    """``$XDG_CACHE_HOME/storyeval/view`` (``~/.cache/storyeval/view``)."""
    import os

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "storyeval" / "view"


def _stamp(inputs: Sequence[str | Path]) -> list[tuple[str, int, int]]:
    """Every input file's resolved path, size and modification time."""
    return [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in input_paths(inputs)]


def index_path(inputs: Sequence[str | Path], index_dir: str | Path | None = None) -> Path:
    """Where the index of these inputs lives: one file per set of input paths (an index of
    changed files replaces the old one)."""
    folder = Path(index_dir) if index_dir is not None else default_index_dir()
    names = json.dumps(sorted(path for path, _, _ in _stamp(inputs)))
    return folder / f"view-{hashlib.sha256(names.encode('utf-8')).hexdigest()[:20]}.sqlite3"


def _stored_stamp(path: Path) -> Any:
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            return json.loads(conn.execute("SELECT body FROM meta").fetchone()[0]).get("stamp")
    except (sqlite3.Error, TypeError, ValueError):
        return None  # a damaged or foreign file: rebuilt


def open_view_data(
    inputs: Sequence[str | Path], *, index_dir: str | Path | None = None
) -> tuple[ViewData, bool]:
    """The joined files from their index in ``index_dir`` (built first when missing, or when
    an input's size or modification time changed); returns the data and whether the index
    was built now."""
    path = index_path(inputs, index_dir)
    stamp = json.loads(json.dumps({"version": INDEX_VERSION, "files": _stamp(inputs)}))
    built = False
    if _stored_stamp(path) != stamp:
        write_index(load_view_data(inputs), path, stamp=stamp)
        built = True
    return read_index(path), built


def write_index(data: ViewData, path: Path, *, stamp: Any = None) -> None:
    """Write ``data`` to the SQLite file ``path`` (atomically), with the inputs' ``stamp``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    temporary.unlink(missing_ok=True)
    with closing(sqlite3.connect(temporary)) as conn, conn:
        rows = [
            (
                s.id,
                s.system or "",
                str(s.extra.get("prompt_id") or s.id),
                s.prompt,
                s.story,
                json.dumps(s.reference),
                json.dumps(s.extra, ensure_ascii=False, default=str),
                str(s.extra.get("source_id") or ""),
            )
            for s in data.stories.values()
        ]
        conn.execute(
            "CREATE TABLE stories (id TEXT PRIMARY KEY, system TEXT, prompt_id TEXT, prompt TEXT, "
            "story TEXT, refs TEXT, extra TEXT, source_id TEXT)"
        )
        conn.executemany("INSERT INTO stories VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.execute("CREATE INDEX ix_prompt ON stories (prompt_id)")
        conn.execute("CREATE INDEX ix_source ON stories (source_id)")
        data.table().to_sql("story_table", conn, index=False)
        for name in _FRAMES:
            frame = getattr(data, name)
            if len(frame.columns):  # a frame without columns (no such file) has no table
                frame.to_sql(name, conn, index=False)
        meta = {
            "unjoined": data.unjoined,
            "files": data.files,
            "sessions": data.sessions,
            "columns": {name: list(getattr(data, name).columns) for name in _FRAMES},
            "stamp": stamp,
        }
        conn.execute("CREATE TABLE meta (body TEXT)")
        conn.execute("INSERT INTO meta VALUES (?)", (json.dumps(meta, default=str),))
    temporary.replace(path)


def read_index(path: Path) -> ViewData:
    """The :class:`ViewData` of an index (stories answered from the file)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    meta = json.loads(conn.execute("SELECT body FROM meta").fetchone()[0])
    frames = {
        name: pd.read_sql(f"SELECT * FROM {name}", conn).reindex(columns=meta["columns"][name])
        if meta["columns"][name]
        else pd.DataFrame()
        for name in _FRAMES
    }
    table = pd.read_sql("SELECT * FROM story_table", conn)
    return ViewData(
        IndexedStories(conn),
        frames["scores"],
        frames["people"],
        frames["judges"],
        frames["comparisons"],
        [tuple(u) for u in meta["unjoined"]],
        [tuple(f) for f in meta["files"]],
        meta["sessions"],
        stored_table=table,
        rankings=frames["rankings"],
    )


class IndexedStories:
    """The stories of an index, read on demand (a read-only mapping by id, with the queries
    of :class:`storyeval.view.data.MemoryStories`)."""

    _COLUMNS = "id, system, prompt_id, prompt, story, refs, extra"

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()  # one connection, shared by the app's threads
        # Python's lower() (Unicode-aware) for the search, as the in-memory store uses
        conn.create_function("py_lower", 1, lambda v: (v or "").lower(), deterministic=True)
        self._count = int(self._rows("SELECT count(*) FROM stories")[0][0])

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._conn.execute(sql, params).fetchall())

    @staticmethod
    def _story(row: tuple[Any, ...]) -> Story:
        story_id, system, _prompt_id, prompt, text, refs, extra = row
        return Story(story_id, prompt, text, json.loads(refs), system or None, json.loads(extra))

    def __getitem__(self, key: str) -> Story:
        rows = self._rows(f"SELECT {self._COLUMNS} FROM stories WHERE id = ?", (key,))
        if not rows:
            raise KeyError(key)
        return self._story(rows[0])

    def __contains__(self, key: object) -> bool:
        return bool(self._rows("SELECT 1 FROM stories WHERE id = ?", (str(key),)))

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        return iter([str(r[0]) for r in self._rows("SELECT id FROM stories ORDER BY rowid")])

    def values(self) -> list[Story]:
        """Every story (reads them all: the views use the queries below)."""
        rows = self._rows(f"SELECT {self._COLUMNS} FROM stories ORDER BY rowid")
        return [self._story(r) for r in rows]

    def systems(self) -> list[str]:
        """Every system, sorted."""
        return sorted(str(r[0]) for r in self._rows("SELECT DISTINCT system FROM stories"))

    def by_prompt(self, prompt_id: str) -> list[Story]:
        """The stories continuing a prompt."""
        sql = f"SELECT {self._COLUMNS} FROM stories WHERE prompt_id = ? ORDER BY rowid"
        return [self._story(r) for r in self._rows(sql, (prompt_id,))]

    def matching(self, text: str) -> set[str]:
        """The ids of the stories whose text or prompt contains ``text`` (any case)."""
        needle = text.lower()
        rows = self._rows(
            "SELECT id FROM stories WHERE instr(py_lower(story), ?) > 0 "
            "OR instr(py_lower(prompt), ?) > 0",
            (needle, needle),
        )
        return {str(r[0]) for r in rows}

    def derived(self) -> list[Story]:
        """The stories made from another story (a ``source_id``)."""
        sql = f"SELECT {self._COLUMNS} FROM stories WHERE source_id != '' ORDER BY rowid"
        return [self._story(r) for r in self._rows(sql)]
