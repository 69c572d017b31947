"""``storyeval serve``: run the study server for one or more study files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from storyeval.cli._common import exit_with, user_errors


def _default_db(path: Path) -> str:
    return f"sqlite:///{path.with_suffix('.sqlite3').name}"


SERVE_DB = typer.Option(
    None,
    "--db",
    help="Database URL: sqlite:///FILE (default: <study>.sqlite3 here) or postgresql://...",
)
SERVE_HOST = typer.Option(
    "127.0.0.1", "--host", help="Address to listen on (0.0.0.0 for every interface)."
)
SERVE_ADMIN_TOKEN = typer.Option(
    None,
    "--admin-token",
    envvar="STORYEVAL_ADMIN_TOKEN",
    help="Secret of the admin pages (default: the one stored in the database, or a new one).",
)
SERVE_LINKS = typer.Option(0, "--links", help="Create this many participant links before starting.")
SERVE_LINKS_FILE = typer.Option(
    None, "--links-file", help="Write the created links here (one per line)."
)
SERVE_ACCESS_LOG = typer.Option(
    False, "--access-log", help="Log every request (URLs contain secret tokens)."
)
SERVE_WORKERS = typer.Option(
    1,
    "--workers",
    min=1,
    help="Server processes (quotas and every other guarantee hold across them: they are "
    "database transactions). With writing sessions each process runs its own generators.",
)
SERVE_ENROLL_RATE = typer.Option(
    20.0,
    "--enroll-rate",
    min=0,
    help="Open-enrollment joins and consents per minute per client address (0: no limit).",
)
SERVE_SQLITE_SYNC = typer.Option(
    "full",
    "--sqlite-sync",
    help="SQLite durability: full (an acknowledged judgment survives a power cut) or normal "
    "(survives a crash of the server, not a power cut; faster).",
)
SERVE_TRUST_PROXY = typer.Option(
    False,
    "--trust-proxy",
    help="Behind a reverse proxy: take client addresses from X-Forwarded-For.",
)


SERVE_JUDGE = typer.Option(
    None,
    "--judge",
    help="An LLM judge's judgments of the studies' stories (storyeval judge output), for the "
    "judge-calibration queue of the admin pages (repeat for several).",
)


def serve(
    files: list[Path] = typer.Argument(..., help="Study files (YAML)."),
    db: str = SERVE_DB,
    host: str = SERVE_HOST,
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    admin_token: str = SERVE_ADMIN_TOKEN,
    base_url: str = typer.Option(None, "--base-url", help="Public address used in printed links."),
    links: int = SERVE_LINKS,
    links_file: Path = SERVE_LINKS_FILE,
    access_log: bool = SERVE_ACCESS_LOG,
    workers: int = SERVE_WORKERS,
    threads: int = typer.Option(8, "--threads", min=1, help="Threads per server process."),
    enroll_rate: float = SERVE_ENROLL_RATE,
    sqlite_sync: str = SERVE_SQLITE_SYNC,
    trust_proxy: bool = SERVE_TRUST_PROXY,
    judge: list[Path] = SERVE_JUDGE,
) -> None:
    """Serve human evaluation studies: participant pages, admin view, exports."""
    from pydantic import ValidationError

    from storyeval.server.app import create_app
    from storyeval.server.kinds import load_session
    from storyeval.server.settings import Settings

    sessions = [load_session(path) for path in files]
    _check_judge_files(judge or [])
    try:
        settings = Settings(
            database_url=db or _default_db(files[0]),
            admin_token=admin_token,
            base_url=base_url,
            threads=threads,
            enroll_rate_per_minute=enroll_rate,
            trust_proxy=trust_proxy,
            sqlite_sync=sqlite_sync,  # type: ignore[arg-type]  # validated by Settings
            judge_files=tuple(str(p.resolve()) for p in judge or []),
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise exit_with(
            f"error: {'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
        ) from None
    app = create_app(settings, sessions)
    state = app.state.storyeval
    root = (
        settings.base_url or f"http://{'localhost' if host in ('0.0.0.0', '::') else host}:{port}"
    )
    typer.echo(f"database: {state.db.describe()}")
    for session in sessions:
        _announce(session, state, root, links, links_file)
    typer.echo(f"admin: {root}/admin/{state.admin_token}/")
    typer.echo(f"listening on http://{host}:{port} with {workers} process(es) (Ctrl+C to stop)")
    _run(app, files, settings, sessions, host, port, workers, access_log)


def _check_judge_files(paths: list[Path]) -> None:
    """Read each judge file once before serving, so a bad one stops the start (FILE:LINE)."""
    from storyeval.corpus import read_judgments

    for path in paths:
        with user_errors():
            records = read_judgments(path)
        typer.echo(f"judge file {path}: {len(records)} judgments (for the calibration queue)")


def _announce(session: Any, state: Any, root: str, links: int, links_file: Path | None) -> None:
    """Print a session's design and enrollment link; make its participant links."""
    from storyeval.base.io import write_text_atomic
    from storyeval.server.participants import create_participants

    typer.echo(f"{session.kind} {session.name!r}: {session.title}")
    study = getattr(session, "study", None)
    if study is not None:
        typer.echo(
            f"  version {study.version}, protocol {study.protocol}, {len(study.items)} items x "
            f"{study.raters_per_item} raters, {study.items_per_participant} per participant"
        )
    policy = session.enrollment()
    if policy.open:
        typer.echo(
            f"  open enrollment: {root}/join/{session.kind}/{session.name}?{policy.external_id_param}=ID"
        )
    if links <= 0:
        return
    now = state.clock()
    created = state.db.run(
        lambda conn: create_participants(conn, session.kind, session.name, links, now=now)
    )
    urls = [f"{root}/p/{p.token}" for p in created]
    if links_file is not None:
        write_text_atomic(links_file, "".join(u + "\n" for u in urls))
        typer.echo(f"  {len(urls)} participant links written to {links_file}")
    else:
        for url in urls:
            typer.echo(f"  participant link: {url}")


def _run(
    app: Any,
    files: list[Path],
    settings: Any,
    sessions: list[Any],
    host: str,
    port: int,
    workers: int,
    access_log: bool,
) -> None:
    """Serve ``app`` in this process, or in ``workers`` processes that each build it from the
    files and settings (passed in the environment)."""
    import uvicorn

    if workers == 1:
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=access_log)
        return
    import json
    import os

    from storyeval.server.app import SERVE_ENVIRONMENT

    state = app.state.storyeval
    for session in sessions:
        session.shutdown()
    state.db.dispose()
    os.environ[SERVE_ENVIRONMENT] = json.dumps(
        {
            "files": [str(Path(f).resolve()) for f in files],
            "settings": settings.model_copy(update={"admin_token": state.admin_token}).model_dump(),
        }
    )
    uvicorn.run(
        "storyeval.server.app:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        access_log=access_log,
    )


def register(app: typer.Typer) -> None:
    """Add the ``serve`` command to the application."""
    app.command(rich_help_panel="Human studies")(serve)
