"""``storyeval models``: show and prepare the models storyeval uses."""

from __future__ import annotations

import json

import typer

models_app = typer.Typer(help="Show and prepare the offline default models.", no_args_is_help=True)


@models_app.command("prepare")
def prepare() -> None:
    """Load every offline default once (dequantizing SmolLM2 into the cache) and print identities."""
    from storyeval.models import prepare_offline_models

    typer.echo(json.dumps(prepare_offline_models(), indent=2))


@models_app.command("defaults")
def defaults() -> None:
    """List the offline default models and the aliases that select them."""
    from storyeval.models import OFFLINE_DEFAULTS

    for kind, aliases in OFFLINE_DEFAULTS.items():
        typer.echo(f"{kind}: {aliases[0]} (aliases: {', '.join(aliases[1:]) or '-'})")


def register(app: typer.Typer) -> None:
    """Add the ``models`` commands to the application."""
    app.add_typer(models_app, name="models", rich_help_panel="Setup")
