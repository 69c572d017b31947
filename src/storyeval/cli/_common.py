"""Helpers shared by the command modules (not a command module itself)."""

from __future__ import annotations

import typer

from storyeval.errors import StoryevalError


def exit_with(message: str, code: int = 2) -> typer.Exit:
    """Print ``message`` to stderr and return an :class:`typer.Exit` to raise."""
    typer.echo(message, err=True)
    return typer.Exit(code)


def user_error(exc: Exception) -> typer.Exit:
    """Turn an expected error into a one-line message and exit status 2."""
    prefix = "" if isinstance(exc, StoryevalError) else "error: "
    return exit_with(f"{prefix}{exc}")
