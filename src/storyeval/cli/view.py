"""``storyeval view``: read the stories behind the numbers in a browser."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from storyeval.cli._common import check_choice, exit_with, user_errors

if TYPE_CHECKING:
    from storyeval.view.data import ViewData

VIEW_INPUTS = typer.Argument(
    ...,
    help="Story, score, judgment and comparison files (JSONL or CSV), or directories of them.",
)


VIEW_INDEX = typer.Option(
    "auto",
    "--index",
    help="Read the files through an SQLite index built on first open and reused while they "
    "are unchanged: auto (when the inputs exceed 20 MB), always or never.",
)
VIEW_INDEX_DIR = typer.Option(
    None, "--index-dir", help="Where indexes are kept (default: $XDG_CACHE_HOME/storyeval/view)."
)
INDEX_FROM_BYTES = 20_000_000


def _load(inputs: list[Path], index: str, index_dir: Path | None) -> ViewData:
    """The joined inputs, through the index when asked (or when they are large)."""
    from storyeval.view import load_view_data
    from storyeval.view.data import input_paths
    from storyeval.view.index import index_path, open_view_data

    size = sum(p.stat().st_size for p in input_paths(inputs))
    if index == "never" or (index == "auto" and size < INDEX_FROM_BYTES):
        return load_view_data(inputs)
    data, built = open_view_data(inputs, index_dir=index_dir)
    typer.echo(f"index {'built' if built else 'reused'}: {index_path(inputs, index_dir)}")
    return data


def view(
    inputs: list[Path] = VIEW_INPUTS,
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="Port on 127.0.0.1."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (loopback)."),
    export: Path | None = typer.Option(
        None,
        "--export",
        help="Write the app as a static site to this directory (opens from a file system or "
        "any static host) instead of serving it.",
    ),
    max_pages: int = typer.Option(
        5000, "--max-pages", min=1, help="--export: the most pages written."
    ),
    index: str = VIEW_INDEX,
    index_dir: Path | None = VIEW_INDEX_DIR,
    allow_host: list[str] = typer.Option(
        None,
        "--allow-host",
        help="A Host header name to answer besides the loopback names (repeat), e.g. the name "
        "of an SSH tunnel's end; others get 400 (against DNS rebinding).",
    ),
) -> None:
    """Serve a local read-only web app over storyeval's files, joined by story id and prompt:
    a sortable, filterable table of every story with its scores and ratings; every system's
    story for one prompt side by side with its scores, people's ratings and the judges'
    rationales; the stories where a metric and people disagree most; the pairwise comparisons;
    and what could not be joined. Every view's state is in its URL (shareable links).
    --export DIR writes the same pages as a static site instead. Large inputs are read through
    an SQLite index (built on first open, reused while the files are unchanged)."""
    from storyeval.view import create_view_app

    if host not in ("127.0.0.1", "localhost", "::1"):
        raise exit_with("error: storyeval view listens on the loopback address only (127.0.0.1)")
    check_choice(index, ("auto", "always", "never"), "--index")
    with user_errors():
        data = _load(inputs, index, index_dir)
    if export is not None:
        from storyeval.view.export import export_site

        with user_errors():
            result = export_site(data, export, max_pages=max_pages)
        left = f"; {result.skipped} linked pages left out (--max-pages)" if result.skipped else ""
        typer.echo(
            f"{len(data.stories)} stories from {len(data.files)} file(s): {result.pages} pages "
            f"-> {export / 'index.html'}{left}"
        )
        return
    import uvicorn

    typer.echo(
        f"{len(data.stories)} stories from {len(data.files)} file(s); open http://{host}:{port}/"
    )
    from storyeval.view.app import LOOPBACK_HOSTS

    hosts = [*LOOPBACK_HOSTS, *(allow_host or [])]
    app = create_view_app(data, allowed_hosts=hosts)
    uvicorn.run(app, host=host, port=port, log_level="warning")  # type: ignore[arg-type]


def register(app: typer.Typer) -> None:
    """Add the ``view`` command to the application."""
    app.command(rich_help_panel="Meta-evaluation")(view)
