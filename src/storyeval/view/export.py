"""``storyeval view --export DIR``: the view app written out as a static site.

The app's pages are rendered by the app itself (through an in-process client, so the export
shows exactly what the server shows) and crawled from the start pages: every page linked
from another is written once, its links rewritten to relative file names, so the site opens
from a file system or any static host. Filters and sorting need the server: their forms are
replaced by a note, and the views they choose are exported ready-made instead (each system's
stories, each disagreement of a metric or judge with each people's criterion, raters'
disagreement, each perturbation technique), listed on ``views.html``. The crawl stops at ``max_pages``; a link
beyond it leads to a page that says so. The joined data are written as JSON beside the pages
(``data/table.json``, ``data/files.json``). Every page keeps the app's safety: story text is
escaped, and a Content-Security-Policy in each page forbids scripts.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from storyeval.view.data import ViewData

CSP = (
    "default-src 'none'; script-src 'none'; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; style-src 'self' file: http: https:; img-src 'self' data: file:"
)
_LINK = re.compile(r'(href|src)="(/[^"]*)"')
_FORM = re.compile(r"<form\b.*?</form>", re.DOTALL)
NOT_EXPORTED = "not-exported.html"
_NOTE = (
    '<p class="note">Filters and sorting need the server (<code>storyeval view</code>); this '
    "static export has the default views and the ready-made ones listed on "
    '<a href="views.html">Views</a>.</p>'
)


@dataclass
class ExportResult:
    """What :func:`export_site` wrote: the pages, and how many linked pages were left out
    (beyond ``max_pages``)."""

    directory: Path
    pages: int
    skipped: int


def page_file(url: str) -> str:
    """The file a site URL is written to: ``index.html`` for ``/``, else a readable stem
    and a hash of the whole URL (queries included)."""
    if url == "/":
        return "index.html"
    parts = urlsplit(url)
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", parts.path.strip("/"))[:40] or "page"
    return f"{stem}-{hashlib.sha1(url.encode()).hexdigest()[:10]}.html"


def _seeds(data: ViewData) -> list[tuple[str, str]]:
    """The start pages and the views forms would choose: ``(url, title)``."""
    table = data.table()
    from storyeval.view.app import FIXED, _perturbation_pairs

    seeds = [
        ("/", "Stories"),
        ("/disagree", "Disagreements"),
        ("/pairs", "Pairs"),
        ("/perturbations", "Perturbations"),
        ("/files", "Files"),
    ]
    for system in sorted({str(s) for s in table["system"] if str(s)}):
        seeds.append((system_url(system), f"the stories of {system}"))
    metrics = [c for c in table.columns if c not in FIXED and not c.startswith("people:")]
    criteria = sorted(set(data.people["criterion"])) if not data.people.empty else []
    for metric in metrics:
        for criterion in criteria:
            seeds.append(
                (disagreement_url(metric, criterion), f"{metric} against people's {criterion}")
            )
    if criteria:
        seeds.append(("/disagree?by=raters", "people's disagreement with each other"))
    for technique in _perturbation_pairs(data, "")[1]:
        seeds.append((f"/perturbations?{urlencode({'technique': technique})}", technique))
    return seeds


def _rewrite(
    body: str, queue: deque[str], known: dict[str, str], limit: int, skipped: set[str]
) -> str:
    """Links to site URLs become relative file names (new ones queued while room is left,
    the others pointed at the not-exported page and added to ``skipped``); forms become a
    note; a CSP meta element goes into the head."""

    def link(match: re.Match[str]) -> str:
        attribute, url = match.group(1), html.unescape(match.group(2))
        if url.startswith("/static/"):
            return f'{attribute}="static/{url.removeprefix("/static/")}"'
        path, _, fragment = url.partition("#")
        if path not in known:
            if len(known) >= limit:
                skipped.add(path)
                return f'{attribute}="{NOT_EXPORTED}"'
            known[path] = page_file(path)
            queue.append(path)
        target = known[path] + (f"#{fragment}" if fragment else "")
        return f'{attribute}="{html.escape(target, quote=True)}"'

    body = _FORM.sub(_NOTE, body)
    body = _LINK.sub(link, body)
    meta = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
    body = body.replace("<head>", f"<head>\n{meta}", 1)
    return body.replace("<nav>", '<nav><a href="views.html">Views</a> ', 1)


def export_site(data: ViewData, directory: str | Path, *, max_pages: int = 5000) -> ExportResult:
    """Write the view app over ``data`` as a static site in ``directory`` (replaced
    atomically). Returns the number of pages written and of links left unexported."""
    from storyeval.base.io import atomic_directory
    from storyeval.view.app import create_view_app

    if max_pages < 1:
        raise ValueError(f"max_pages must be >= 1; got {max_pages}")
    app = create_view_app(data, allowed_hosts=["testserver"])
    seeds = _seeds(data)
    known: dict[str, str] = {}
    queue: deque[str] = deque()
    for url, _ in seeds:
        if url not in known and len(known) < max_pages:
            known[url] = page_file(url)
            queue.append(url)
    skipped: set[str] = set()
    inputs = [file for file, _, _ in data.files]
    with atomic_directory(directory, "view export", inputs=inputs) as tmp:
        _run_in_own_loop(_crawl(app, tmp, queue, known, max_pages, skipped))
        _write_extras(tmp, data, seeds, known)
    return ExportResult(Path(directory), len(known), len(skipped))


async def _crawl(
    app: Any,
    tmp: Path,
    queue: deque[str],
    known: dict[str, str],
    max_pages: int,
    skipped: set[str],
) -> None:
    """Fetch each queued page from the app and write it with its links rewritten (which
    queues the pages it links to). httpx's ASGI transport calls the app in this thread's
    event loop (a test client's hop to another thread for every request made exporting the
    example corpus with 42 metrics take 6.8 s rather than 4.6)."""
    import httpx

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://testserver", follow_redirects=True
    ) as client:
        while queue:
            url = queue.popleft()
            response = await client.get(url)
            body = _rewrite(response.text, queue, known, max_pages, skipped)
            (tmp / known[url]).write_text(body, encoding="utf-8")


def _run_in_own_loop(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to the end in a new event loop: in this thread, or in a helper thread
    when this one already runs a loop (a notebook, an async server)."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(work)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, work).result()


def _write_extras(
    tmp: Path, data: ViewData, seeds: list[tuple[str, str]], known: dict[str, str]
) -> None:
    """The style sheet, the list of views, the not-exported page and the data as JSON."""
    from storyeval.server import __file__ as server_file

    shutil.copytree(Path(server_file).parent / "static", tmp / "static")
    items = "".join(
        f'<li><a href="{html.escape(known[url], quote=True)}">{html.escape(title)}</a></li>'
        for url, title in seeds
        if url in known
    )
    head = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<link rel="stylesheet" href="static/view.css"><title>{title}</title></head><body>'
        '<nav><a href="index.html">Stories</a> <a href="views.html">Views</a></nav><main>'
    )
    (tmp / "views.html").write_text(
        head.replace("{title}", "Views: storyeval view")
        + f"<h1>Exported views</h1><ul>{items}</ul></main></body></html>",
        encoding="utf-8",
    )
    (tmp / NOT_EXPORTED).write_text(
        head.replace("{title}", "Not exported: storyeval view")
        + "<h1>Not in this export</h1><p>The export stopped at its page limit "
        "(<code>--max-pages</code>); run <code>storyeval view</code> on the same files to see "
        "this page.</p></main></body></html>",
        encoding="utf-8",
    )
    (tmp / "data").mkdir()
    table = data.table()
    (tmp / "data" / "table.json").write_text(
        table.to_json(orient="records", force_ascii=False), encoding="utf-8"
    )
    files = [{"file": f, "kind": k, "records": n} for f, k, n in data.files]
    unjoined = [{"file": f, "records": n, "reason": r} for f, n, r in data.unjoined]
    (tmp / "data" / "files.json").write_text(
        json.dumps({"files": files, "unjoined": unjoined}, indent=1), encoding="utf-8"
    )


def disagreement_url(metric: str, criterion: str) -> str:
    """The app's URL of the stories where ``metric`` and people's ``criterion`` disagree most
    (exported ready-made for every metric and criterion)."""
    return f"/disagree?{urlencode({'metric': metric, 'criterion': criterion, 'by': 'metric'})}"


def system_url(system: str) -> str:
    """The app's URL of one system's stories (exported ready-made for every system)."""
    return f"/?{urlencode({'system': system})}"
