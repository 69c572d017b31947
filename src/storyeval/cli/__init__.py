"""The ``storyeval`` command: a thin layer over the library.

Each module in this package defines ``register(app)`` and adds its commands; modules are
discovered at start-up, so a new command family is one new file. Modules import torch,
transformers and spaCy only inside command bodies, which keeps ``storyeval --help`` fast.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys
from typing import Any

import typer

# typer (0.2x) vendors click: its usage errors are these classes, not the click package's.

try:  # typer >= 0.24 vendors click as typer._click; older releases use click itself
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError  # type: ignore[assignment]

from storyeval import __version__
from storyeval.base.errors import StoryevalError

app = typer.Typer(
    name="storyeval",
    help="Evaluate open-ended story generation: generate, score, meta-evaluate, run human studies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"storyeval {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_version_callback,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """Evaluate open-ended story generation: generate, score, meta-evaluate, run human studies."""


def _register_commands() -> None:
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name.startswith("_"):
            continue
        importlib.import_module(f"{__name__}.{module.name}").register(app)


_register_commands()


@functools.cache
def click_command() -> Any:
    """The click command of :data:`app`, built once per process: typer builds it afresh on
    every call (0.1 s for ours), which a program running several commands pays each time."""
    return typer.main.get_command(app)


def _usage_message(exc: UsageError) -> str:
    """A bad option or argument in one line, with where to read about it."""
    where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
    return f"error: {exc.format_message()}{where}"


def main() -> None:
    """Entry point: user errors become one line on stderr and exit status 2, not a traceback.

    That covers a bad option value or a missing option (click's usage errors, which would
    otherwise print a usage panel), the library's own errors and a missing or unreadable file.
    """
    from storyeval.models.devices import passive_openmp

    passive_openmp()  # before torch starts OpenMP: idle threads sleep instead of spinning
    try:
        # typer's own call adds only its exception hook, off here (pretty_exceptions_enable)
        code = click_command()(standalone_mode=False)
    except NoArgsIsHelpError as exc:  # a bare group: its help, as before
        exc.show()
        sys.exit(exc.exit_code)
    except UsageError as exc:
        typer.echo(_usage_message(exc), err=True)
        sys.exit(exc.exit_code)
    except ClickException as exc:
        typer.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except StoryevalError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except ModuleNotFoundError as exc:
        from storyeval.base.extras import missing_extra

        extra = missing_extra(exc)
        if extra is None:
            raise
        typer.echo(f"error: {extra}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
