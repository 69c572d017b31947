"""Persistence: one SQLAlchemy engine, one metadata shared by every session type, transactions
that never lose an acknowledged write.

SQLite (the default) runs in WAL mode with ``synchronous=FULL`` (``normal`` on request, see
:data:`SQLITE_SYNC`); write transactions start with
``BEGIN IMMEDIATE`` (they take the database write lock at once, so two writers never both read
a slot as free) and are serialised by a lock inside the process and by an ``flock`` on a file
beside the database between processes (``storyeval serve --workers N``): a waiting writer wakes
the moment the other commits, where SQLite's own busy handler would sleep for up to 100 ms.
``busy_timeout`` still covers other programs. PostgreSQL (``postgresql://...``) runs write transactions at READ COMMITTED
and the session code takes row locks (``SELECT ... FOR UPDATE``) where quotas are decided.
Transient failures (deadlock, serialisation failure, "database is locked") are retried.

A handler acknowledges a participant's submission only after :meth:`Database.write` has
committed, so an acknowledged judgment survives a crash of the server process.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, MetaData, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from storyeval.base.errors import StoryevalError
from storyeval.base.validation import check_choice

metadata = MetaData()
"""The metadata of every storyeval server table (core and session types)."""

T = TypeVar("T")

_TRANSIENT_PG_CODES = {"40001", "40P01", "55P03"}
CHECKPOINT_WAL_BYTES = 4 * 1024 * 1024
SQLITE_SYNC = ("full", "normal")
"""SQLite's ``synchronous`` settings storyeval accepts: ``full`` (the default) flushes every
commit to the disk, so an acknowledged judgment survives a power cut; ``normal`` (in WAL mode)
survives a crash or kill of the server process, not a power cut, and is faster."""


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


class HotQuery:
    """A hand-written SQL statement of the server's hot path (item pages), run on the DBAPI
    cursor of a SQLAlchemy connection, inside its transaction.

    SQLAlchemy's execution pipeline costs about 70 µs per statement where SQLite itself takes
    about 10: on the handful of statements every page runs, that is most of the database time.
    Write ``:name`` parameters; they become ``%(name)s`` for PostgreSQL. Rows are plain tuples
    in the order of the ``SELECT`` list.
    """

    def __init__(self, sql: str, *, postgresql_suffix: str = "") -> None:
        postgresql = re.sub(r"(?<!:):(\w+)", r"%(\1)s", sql) + postgresql_suffix
        self.sql = {"sqlite": sql, "postgresql": postgresql}

    def _execute(
        self, conn: Connection, params: Mapping[str, Any] | Sequence[Mapping[str, Any]], many: bool
    ) -> Any:
        """Run on the raw cursor; DBAPI errors become SQLAlchemy's (so retries and error
        pages treat them like any other), without their parameters."""
        sql = self.sql[conn.dialect.name]
        cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        dbapi = conn.dialect.loaded_dbapi
        try:
            if many:
                cursor.executemany(sql, list(params))  # type: ignore[arg-type]
            else:
                cursor.execute(sql, params)
        except dbapi.Error as exc:
            raise DBAPIError.instance(sql, None, exc, dbapi.Error, hide_parameters=True) from exc
        return cursor

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """Run the statement and return every row."""
        return [tuple(row) for row in self._execute(conn, params, False).fetchall()]

    def one(self, conn: Connection, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Run the statement and return its first row (None when there is none)."""
        row = self._execute(conn, params, False).fetchone()
        return None if row is None else tuple(row)

    def run(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Execute a statement that returns no rows; returns the rows it changed."""
        return int(self._execute(conn, params, False).rowcount)

    def run_many(self, conn: Connection, params: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per parameter set, in one round trip."""
        if params:
            self._execute(conn, params, True)


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

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 10,
        background_checkpoints: bool = False,
        sqlite_sync: str = "full",
    ) -> None:
        self.url = normalise_url(url)
        self._checkpointer: threading.Thread | None = None
        self._stop = threading.Event()
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
            lock_path = (
                Path(database).expanduser().with_name(Path(database).name + ".storyeval-lock")
            )
            self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            self.engine: Engine = create_engine(
                self.url,
                connect_args={"check_same_thread": False, "timeout": 30},
                pool_size=pool_size,
                max_overflow=2 * pool_size,
                hide_parameters=True,
                pool_reset_on_return=None,  # every transaction is committed or rolled back
            )
            check_choice(sqlite_sync, SQLITE_SYNC, "sqlite_sync", error=DatabaseError)
            self.sqlite_sync = sqlite_sync
            event.listen(self.engine, "connect", _sqlite_on_connect)
            event.listen(self.engine, "connect", self._set_sync)
            event.listen(self.engine, "begin", _sqlite_on_begin)
            if background_checkpoints:
                self._start_checkpointer(Path(database).expanduser())
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
        """Whether the database is SQLite (else PostgreSQL)."""
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
        """Reads: a transaction on SQLite (one consistent WAL snapshot); autocommit statements
        on PostgreSQL, where READ COMMITTED gives each statement its own snapshot anyway and a
        BEGIN and a COMMIT would only add two round trips."""
        if self.is_sqlite:
            with self.engine.connect() as conn, conn.begin():
                yield conn
        else:
            with self.engine.connect() as conn:
                yield conn.execution_options(isolation_level="AUTOCOMMIT")

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction, committed when the block ends (rolled back on error)."""
        if self.is_sqlite:
            with self._write_lock, _file_lock(self._lock_fd), self.engine.connect() as conn:
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

    def _set_sync(self, dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.execute(f"PRAGMA synchronous={self.sqlite_sync.upper()}")

    def _start_checkpointer(self, path: Path) -> None:
        """Move SQLite's WAL checkpoints off the request path: requests' connections never
        checkpoint (``wal_autocheckpoint=0``); a thread copies the WAL into the database
        (``PASSIVE``: it never blocks a reader or writer) whenever the WAL passes 4 MB."""
        import sqlite3

        event.listen(self.engine, "connect", _no_autocheckpoint)
        wal = path.with_name(path.name + "-wal")

        def loop() -> None:
            connection = sqlite3.connect(str(path), timeout=30, check_same_thread=False)
            try:
                while not self._stop.wait(0.5):
                    if wal.exists() and wal.stat().st_size > CHECKPOINT_WAL_BYTES:
                        connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                connection.close()

        self._checkpointer = threading.Thread(target=loop, name="storyeval-checkpoint", daemon=True)
        self._checkpointer.start()

    def dispose(self) -> None:
        """Stop the background checkpointer and close every connection."""
        self._stop.set()
        if self._checkpointer is not None:
            self._checkpointer.join(timeout=5)
            self._checkpointer = None
        self.engine.dispose()
        if self.is_sqlite and self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


@contextlib.contextmanager
def _file_lock(fd: int) -> Iterator[None]:
    """An exclusive ``flock`` on the open file ``fd`` for the block (between processes; the
    caller serialises its own threads)."""
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # let the "begin" event issue BEGIN itself
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _no_autocheckpoint(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.execute("PRAGMA wal_autocheckpoint=0")


def _sqlite_on_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get("storyeval_begin", "DEFERRED")
    # on the DBAPI connection: SQLAlchemy's statement pipeline would cost ten times more
    conn.connection.dbapi_connection.execute(f"BEGIN {mode}")  # type: ignore[union-attr]
