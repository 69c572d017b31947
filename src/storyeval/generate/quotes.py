"""Quotation lines from a Wikiquote dump, for slogan skeletons (Clark 2021, section 2.5.2 takes
its skeletons from short, memorable lines; a dump gives thousands).

A Wikiquote dump (``enwikiquote-latest-pages-articles.xml``, plain or ``.bz2``) is MediaWiki
XML: ``<page>`` elements with a ``<title>``, a namespace ``<ns>`` and the wikitext of the latest
``<revision>``. On a quotation page every quote is a top-level bullet (``* ...``); the lines
below it (``** ...``) are its source or attribution, and the sections ``Disputed``,
``Misattributed`` and ``Quotes about ...`` hold lines the person did not say. The reader keeps
top-level bullets of article pages (namespace 0) outside those sections, strips the wiki
markup (links, bold and italics, templates, references, HTML tags) and keeps one-sentence
lines of ``min_words`` to ``max_words`` words, each once.
"""

from __future__ import annotations

import bz2
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

_SKIPPED_SECTIONS = re.compile(r"^=+\s*(disputed|misattributed|quotes about|about|see also)", re.I)
_HEADING = re.compile(r"^(=+)\s*(.*?)\s*\1\s*$")
_LINK = re.compile(r"\[\[(?:[^\]|]*\|)?([^\]]*)\]\]")
_EXTERNAL = re.compile(r"\[https?://\S+\s*([^\]]*)\]")
_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_REF = re.compile(r"<ref[^>]*/>|<ref[^>]*>.*?</ref>", re.S)
_TAG = re.compile(r"<[^>]+>")


@dataclass(frozen=True)
class Quote:
    """A quotation line and the page it is on."""

    text: str
    page: str


def strip_markup(wikitext: str) -> str:
    """A line of wikitext as plain text.

    >>> strip_markup("'''Be''' the [[change (word)|change]] you wish{{citation needed}}.<ref>x</ref>")
    'Be the change you wish.'
    """
    text = _REF.sub("", wikitext)
    for _ in range(3):  # nested templates
        text = _TEMPLATE.sub("", text)
    text = _LINK.sub(r"\1", text)
    text = _EXTERNAL.sub(r"\1", text)
    text = _TAG.sub("", text).replace("'''", "").replace("''", "")
    text = text.replace("&nbsp;", " ").replace("&quot;", '"').replace("&amp;", "&")
    return " ".join(text.split())


def page_quotes(title: str, wikitext: str, *, min_words: int, max_words: int) -> Iterator[Quote]:
    """The usable quotes of one page (see the module docstring)."""
    skipping = False
    for line in wikitext.splitlines():
        heading = _HEADING.match(line.strip())
        if heading:
            skipping = bool(_SKIPPED_SECTIONS.match(line.strip()))
            continue
        top_level = line.startswith("*") and not line.startswith("**")
        if skipping or not top_level or "http" in line:  # a linked line cites, not quotes
            continue
        text = strip_markup(line.lstrip("*").strip()).strip('"“” ')
        words = len(text.split())
        if not min_words <= words <= max_words or "|" in text:
            continue
        if len(re.findall(r"[.!?](?:\s|$)", text)) > 1:  # one sentence only
            continue
        yield Quote(text, title)


def _open(path: Path) -> IO[bytes]:
    return bz2.open(path, "rb") if path.suffix == ".bz2" else path.open("rb")


def read_wikiquote(
    path: str | Path, *, min_words: int = 3, max_words: int = 14, limit: int | None = None
) -> list[Quote]:
    """Quotes from a Wikiquote dump, streamed (a whole English dump is fine), in page order,
    each text once; ``limit`` stops after that many.

    Raises
    ------
    ValueError
        For word bounds out of order, or a file that is not a MediaWiki dump.
    """
    import xml.etree.ElementTree as ET

    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words; got {min_words}, {max_words}")
    quotes: list[Quote] = []
    seen: set[str] = set()
    pages = 0
    with _open(Path(path)) as handle:
        try:
            for _, element in ET.iterparse(handle, events=("end",)):
                if element.tag.rsplit("}", 1)[-1] != "page":
                    continue
                pages += 1
                fields = {child.tag.rsplit("}", 1)[-1]: child for child in element.iter()}
                title = (fields["title"].text or "") if "title" in fields else ""
                namespace = (fields["ns"].text or "0") if "ns" in fields else "0"
                text = (fields["text"].text or "") if "text" in fields else ""
                element.clear()
                if namespace.strip() != "0":
                    continue
                for quote in page_quotes(title, text, min_words=min_words, max_words=max_words):
                    if quote.text.lower() not in seen:
                        seen.add(quote.text.lower())
                        quotes.append(quote)
                if limit is not None and len(quotes) >= limit:
                    return quotes[:limit]
        except ET.ParseError as exc:
            raise ValueError(f"{path}: not a MediaWiki XML dump ({exc})") from None
    if not pages:
        raise ValueError(f"{path}: no <page> element: not a MediaWiki XML dump")
    return quotes
