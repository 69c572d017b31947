"""Server-rendered pages: Jinja2 with autoescaping always on.

Every value inserted into a page is HTML-escaped, so a story containing ``<script>`` is shown
as text and never runs; on top of that, the Content-Security-Policy header forbids inline
scripts altogether (see :mod:`storyeval.server.security`).

The page of each study protocol lives in the protocol's module
(:attr:`~storyeval.human.protocols.StudyProtocol.page_template`); the loader serves it as
``protocols/<name>.html`` (and ``protocols/<name>-feedback.html``) inside the common frame.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jinja2
from fastapi.responses import HTMLResponse

_FRAMES = {
    "": ('{% extends "study/_page.html" %}', "page"),
    "-feedback": ('{% extends "study/_feedback.html" %}', "answer"),
}


def protocol_template(name: str) -> str | None:
    """The source of ``protocols/<protocol>.html`` or ``protocols/<protocol>-feedback.html``."""
    from storyeval.human.protocols import PROTOCOLS

    if not name.startswith("protocols/") or not name.endswith(".html"):
        return None
    stem = name.removeprefix("protocols/").removesuffix(".html")
    for suffix, (frame, block) in _FRAMES.items():
        if suffix and not stem.endswith(suffix):
            continue
        protocol_name = stem.removesuffix(suffix) if suffix else stem
        if protocol_name not in PROTOCOLS:
            continue
        protocol = PROTOCOLS.get(protocol_name)
        body = protocol.feedback_template if suffix else protocol.page_template
        return (
            f'{frame}{{% block {block} %}}{{% import "_macros.html" as m %}}\n'
            f"{body}{{% endblock %}}"
        )
    return None


def make_environment(
    extra_packages: Sequence[tuple[str, str]] = (),
    extra_sources: Callable[[str], str | None] | None = None,
) -> jinja2.Environment:
    """A Jinja environment over the core templates plus those of session types.

    ``extra_packages`` are ``(package, folder)`` pairs searched before the core templates;
    ``extra_sources`` maps other template names to their source.
    """
    loaders: list[jinja2.BaseLoader] = [
        jinja2.PackageLoader(pkg, folder) for pkg, folder in extra_packages
    ]
    loaders.append(jinja2.FunctionLoader(protocol_template))
    if extra_sources is not None:
        loaders.append(jinja2.FunctionLoader(extra_sources))
    loaders.append(jinja2.PackageLoader("storyeval.server", "templates"))
    return jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=True,  # for every template, whatever its extension
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # templates ship with the package: no stat() on every render
    )


def render(
    env: jinja2.Environment, name: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """Render a template into an HTML response."""
    return HTMLResponse(env.get_template(name).render(**context), status_code=status_code)
