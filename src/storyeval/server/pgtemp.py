"""A private, throwaway PostgreSQL server for tests and benchmarks.

:class:`TemporaryPostgres` runs ``initdb`` and ``pg_ctl`` from the Debian (or any) PostgreSQL
installation on a free loopback port, in a temporary directory, and removes everything when
stopped. PostgreSQL refuses to run as root, so when the current user is root the server runs
as the ``postgres`` system user (``runuser``, or ``su``).

>>> find_postgres_bin() is None or (find_postgres_bin() / "initdb").exists()
True
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from storyeval.base.errors import StoryevalError


class PostgresUnavailable(StoryevalError):
    """The PostgreSQL server programs are not installed or the server cannot start."""


def find_postgres_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (newest Debian version first)."""
    explicit = os.environ.get("STORYEVAL_PG_BIN")
    candidates = [explicit] if explicit else []
    candidates += sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for candidate in candidates:
        if (
            candidate
            and (Path(candidate) / "initdb").exists()
            and (Path(candidate) / "pg_ctl").exists()
        ):
            return Path(candidate)
    return None


def free_port() -> int:
    """A TCP port free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TemporaryPostgres:
    """Start a PostgreSQL cluster in a temporary directory; :attr:`url` connects to it.

    Parameters
    ----------
    fsync : bool
        ``False`` (tests) trades durability *of the database server itself* against an OS
        crash for speed; commits are still transactional and survive a crash of the client.
    """

    def __init__(self, *, fsync: bool = True, max_connections: int = 100) -> None:
        self.bin = find_postgres_bin()
        if self.bin is None:
            raise PostgresUnavailable(
                "PostgreSQL server programs (initdb, pg_ctl) were not found: install Debian's "
                "'postgresql' package (scripts/setup.sh --test does) or set STORYEVAL_PG_BIN"
            )
        self.fsync = fsync
        self.max_connections = max_connections
        self.port = free_port()
        self.root: Path | None = None
        self.user = "postgres"
        self._started = False

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the running cluster."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_owner(self) -> list[str]:
        if os.geteuid() != 0:
            return []
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            raise PostgresUnavailable(
                "running as root, but there is no 'postgres' system user to run the server as"
            ) from None
        if shutil.which("runuser"):
            return ["runuser", "-u", "postgres", "--"]
        return ["su", "postgres", "-s", "/bin/sh", "-c"]

    def _run(self, args: list[str], *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        prefix = self._as_owner()
        if prefix and prefix[0] == "su":
            command = [*prefix, " ".join(_quote(a) for a in args)]
        else:
            command = prefix + args
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)

    def start(self) -> TemporaryPostgres:
        """Create the cluster in a temporary directory and start it on a free loopback port."""
        assert self.bin is not None
        self.root = Path(tempfile.mkdtemp(prefix="storyeval-pg-"))
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        data = self.root / "data"
        init = self._run(
            [
                str(self.bin / "initdb"),
                "-D",
                str(data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        )
        if init.returncode != 0:
            self.cleanup()
            raise PostgresUnavailable(
                f"initdb failed: {init.stderr.strip() or init.stdout.strip()}"
            )
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            f"-c max_connections={self.max_connections} -c fsync={'on' if self.fsync else 'off'} "
            f"-c full_page_writes={'on' if self.fsync else 'off'}"
        )
        start = self._run(
            [
                str(self.bin / "pg_ctl"),
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(self.root / "server.log"),
                "-w",
                "-t",
                "60",
                "start",
            ],
            timeout=90,
        )
        if start.returncode != 0:
            log = (
                (self.root / "server.log").read_text(errors="replace")
                if (self.root / "server.log").exists()
                else ""
            )
            self.cleanup()
            raise PostgresUnavailable(f"pg_ctl start failed: {start.stderr.strip()}\n{log[-2000:]}")
        self._started = True
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise PostgresUnavailable(f"PostgreSQL did not accept connections on port {self.port}")

    def create_database(self, name: str) -> str:
        """Create a database and return its URL."""
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        """Stop the cluster (fast shutdown)."""
        if self._started and self.root is not None and self.bin is not None:
            self._run(
                [
                    str(self.bin / "pg_ctl"),
                    "-D",
                    str(self.root / "data"),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ]
            )
            self._started = False
        self.cleanup()

    def cleanup(self) -> None:
        """Stop the cluster and delete its directory."""
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> TemporaryPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
