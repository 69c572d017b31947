"""Skeleton lines from a Wikiquote dump (MediaWiki XML, plain or bz2): top-level quotes of
article pages, attributions, disputed sections and other namespaces left out, markup stripped."""

from __future__ import annotations

import bz2
from pathlib import Path
from typing import Any

import pytest

from storyeval.generate.quotes import read_wikiquote, strip_markup

DUMP = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="en">
  <siteinfo><sitename>Wikiquote</sitename></siteinfo>
  <page>
    <title>Ada Example</title>
    <ns>0</ns>
    <id>1</id>
    <revision><id>10</id><text xml:space="preserve">'''Ada Example''' (1900-1990) was a writer.
== Quotes ==
* Fortune favours the [[bold (trait)|bold]] and the patient.&lt;ref&gt;Letters, 1950&lt;/ref&gt;
** Letter to a friend (1950)
* ''Keep'' the lamp lit for those who wander.
* Short.
* This line is far too long to be a slogan because it goes on and on and on for many words.
* First sentence here. Second sentence there.
* See [https://example.org the site] for more.
* Fortune favours the bold and the patient.
== Disputed ==
* Every storm runs out of rain.
== Quotes about Ada Example ==
* She wrote like the sea breathes.
</text></revision>
  </page>
  <page>
    <title>Talk:Ada Example</title>
    <ns>1</ns>
    <id>2</id>
    <revision><id>11</id><text xml:space="preserve">* A talk page line to skip here.</text></revision>
  </page>
  <page>
    <title>Proverbs</title>
    <ns>0</ns>
    <id>3</id>
    <revision><id>12</id><text xml:space="preserve">== A ==
* A stitch in time saves nine.{{citation needed}}
</text></revision>
  </page>
</mediawiki>
"""


def test_wikiquote_dump_gives_clean_single_sentence_lines(tmp_path: Path) -> None:
    dump = tmp_path / "enwikiquote-pages-articles.xml"
    dump.write_text(DUMP)
    quotes = read_wikiquote(dump)
    assert [q.text for q in quotes] == [
        "Fortune favours the bold and the patient.",
        "Keep the lamp lit for those who wander.",
        "A stitch in time saves nine.",
    ]
    assert [q.page for q in quotes] == ["Ada Example", "Ada Example", "Proverbs"]
    packed = tmp_path / "dump.xml.bz2"
    packed.write_bytes(bz2.compress(DUMP.encode()))
    assert read_wikiquote(packed, limit=2) == quotes[:2]
    assert strip_markup("[[w:Rome|Rome]] was '''not''' built<ref name=x/> in a day") == (
        "Rome was not built in a day"
    )
    bad = tmp_path / "bad.xml"
    bad.write_text("<html><body>no</body></html>")
    with pytest.raises(ValueError, match="not a MediaWiki XML dump"):
        read_wikiquote(bad)


def test_slogan_lines_feed_the_slogan_command(tmp_path: Path, run_cli: Any) -> None:
    dump = tmp_path / "dump.xml"
    dump.write_text(DUMP)
    lines = tmp_path / "lines.txt"
    code, out, err = run_cli("slogan-lines", str(dump), "-o", str(lines))
    assert code == 0, out + err
    assert "wrote 3 lines from 2 pages" in out
    from storyeval.generate.slogans import read_lines

    assert read_lines(lines) == [
        "Fortune favours the bold and the patient.",
        "Keep the lamp lit for those who wander.",
        "A stitch in time saves nine.",
    ]
