"""Server-rendered pages: Jinja2 with autoescaping always on.

Every value inserted into a page is HTML-escaped, so a story containing ``<script>`` is shown
as text and never runs; on top of that, the Content-Security-Policy header forbids inline
scripts altogether (see :mod:`storyeval.server.security`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jinja2
from fastapi.responses import HTMLResponse


def make_environment(extra_packages: Sequence[tuple[str, str]] = ()) -> jinja2.Environment:
    """A Jinja environment over the core templates plus those of session types.

    ``extra_packages`` are ``(package, folder)`` pairs searched before the core templates.
    """
    loaders: list[jinja2.BaseLoader] = [
        jinja2.PackageLoader(pkg, folder) for pkg, folder in extra_packages
    ]
    loaders.append(jinja2.PackageLoader("storyeval.server", "templates"))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=True,  # for every template, whatever its extension
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


def render(
    env: jinja2.Environment, name: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """Render a template into an HTML response."""
    return HTMLResponse(env.get_template(name).render(**context), status_code=status_code)
