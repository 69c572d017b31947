"""Persistence: one SQLAlchemy engine, one metadata shared by every session type, transactions
that never lose an acknowledged write.

SQLite (the default) runs in WAL mode with ``synchronous=FULL``; write transactions start with
``BEGIN IMMEDIATE`` (they take the database write lock at once, so two writers never both read
a slot as free) and are serialised inside the process by a lock, with ``busy_timeout`` covering
other processes. PostgreSQL (``postgresql://...``) runs write transactions at READ COMMITTED
and the session code takes row locks (``SELECT ... FOR UPDATE``) where quotas are decided.
Transient failures (deadlock, serialisation failure, "database is locked") are retried.

A handler acknowledges a participant's submission only after :meth:`Database.write` has
committed, so an acknowledged judgment survives a crash of the server process.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, MetaData, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from storyeval.errors import StoryevalError

metadata = MetaData()
"""The metadata of every storyeval server table (core and session types)."""

T = TypeVar("T")

_TRANSIENT_PG_CODES = {"40001", "40P01", "55P03"}


class DatabaseError(StoryevalError):
    """The database URL is unusable or the database cannot be reached."""


def normalise_url(url: str) -> URL:
    """Turn what a user types into a SQLAlchemy URL.

    A plain path becomes a SQLite file; ``postgresql://`` and ``postgres://`` use psycopg 3.

    >>> normalise_url("study.sqlite3").render_as_string()
    'sqlite:///study.sqlite3'
    >>> normalise_url("postgresql://u@localhost/db").drivername
    'postgresql+psycopg'
    """
    text = str(url).strip()
    if not text:
        raise DatabaseError("the database URL is empty")
    if "://" not in text:
        return make_url(f"sqlite:///{text}")
    if text.startswith("postgres://"):
        text = "postgresql://" + text[len("postgres://") :]
    try:
        parsed = make_url(text)
    except Exception as exc:  # sqlalchemy raises ArgumentError with a long message
        raise DatabaseError(f"cannot parse the database URL {text!r}: {exc}") from None
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("sqlite", "postgresql"):
        raise DatabaseError(
            f"unsupported database {parsed.get_backend_name()!r}: use sqlite:///FILE or postgresql://..."
        )
    return parsed


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, DBAPIError):
        orig = exc.orig
        code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
        if code in _TRANSIENT_PG_CODES:
            return True
        if isinstance(exc, OperationalError) and "database is locked" in str(orig):
            return True
    return False


class Database:
    """An engine plus the transaction discipline described in the module docstring.

    Parameters
    ----------
    url : str
        ``sqlite:///path``, a plain path (SQLite), or ``postgresql://user@host:port/db``.
    pool_size : int
        Connections kept open to PostgreSQL.
    """

    def __init__(self, url: str, *, pool_size: int = 10) -> None:
        self.url = normalise_url(url)
        self.backend = self.url.get_backend_name()
        self._write_lock = threading.Lock()
        if self.backend == "sqlite":
            database = self.url.database or ""
            if database in ("", ":memory:"):
                raise DatabaseError(
                    "an in-memory SQLite database cannot be shared by the server's threads; "
                    "give a file, e.g. sqlite:///study.sqlite3"
                )
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.engine: Engine = create_engine(
                self.url,
                connect_args={"check_same_thread": False, "timeout": 30},
                pool_size=pool_size,
                max_overflow=2 * pool_size,
                hide_parameters=True,
            )
            event.listen(self.engine, "connect", _sqlite_on_connect)
            event.listen(self.engine, "begin", _sqlite_on_begin)
        else:
            try:
                import psycopg  # noqa: F401
            except ImportError:
                raise DatabaseError(
                    "PostgreSQL needs the psycopg driver: pip install 'storyeval[postgres]'"
                ) from None
            self.engine = create_engine(
                self.url,
                pool_size=pool_size,
                max_overflow=2 * pool_size,
                pool_pre_ping=True,
                isolation_level="READ COMMITTED",
                hide_parameters=True,
            )

    @property
    def is_sqlite(self) -> bool:
        return self.backend == "sqlite"

    def describe(self) -> str:
        """The URL without its password."""
        return self.url.render_as_string(hide_password=True)

    def create_all(self) -> None:
        """Create every table defined on :data:`metadata` that does not exist yet (the modules
        defining them are imported by the caller, e.g. the app factory), and add the nullable
        columns that later versions of storyeval defined to tables made by earlier ones."""
        try:
            metadata.create_all(self.engine)
            self._add_missing_columns()
        except OperationalError as exc:
            raise DatabaseError(f"cannot open the database {self.describe()}: {exc.orig}") from None

    def _add_missing_columns(self) -> None:
        from sqlalchemy import inspect
        from sqlalchemy.schema import CreateColumn

        inspector = inspect(self.engine)
        with self.write() as conn:
            for table in metadata.sorted_tables:
                present = {c["name"] for c in inspector.get_columns(table.name)}
                for column in table.columns:
                    if column.name in present:
                        continue
                    if not column.nullable:
                        raise DatabaseError(
                            f"the table {table.name} of {self.describe()} lacks the column "
                            f"{column.name}, which cannot be added to existing rows"
                        )
                    definition = CreateColumn(column).compile(dialect=self.engine.dialect)
                    conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {definition}")

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction (a consistent snapshot on SQLite WAL and PostgreSQL)."""
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction, committed when the block ends (rolled back on error)."""
        if self.is_sqlite:
            with self._write_lock, self.engine.connect() as conn:
                conn.execution_options(storyeval_begin="IMMEDIATE")
                with conn.begin():
                    yield conn
        else:
            with self.engine.connect() as conn, conn.begin():
                yield conn

    def run(self, work: Callable[[Connection], T], *, retries: int = 8) -> T:
        """Run ``work(conn)`` in a write transaction, retrying transient failures."""
        delay = 0.01
        for attempt in range(retries + 1):
            try:
                with self.write() as conn:
                    return work(conn)
            except DBAPIError as exc:
                if attempt == retries or not _is_transient(exc):
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)
        raise AssertionError("unreachable")  # pragma: no cover

    def dispose(self) -> None:
        self.engine.dispose()


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # let the "begin" event issue BEGIN itself
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_on_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get("storyeval_begin", "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")
