"""Signatures: rendering, JSON round trip, parsing, validation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storyeval import __version__
from storyeval.base.signature import Signature


def test_render_formats_every_value_type():
    sig = Signature(
        "bertscore_f",
        {
            "model": "all-MiniLM-L6-v2@cc8b698c9c1f",
            "layer": 4,
            "idf": False,
            "rescale": True,
            "seed": None,
            "p": 0.9,
        },
        version="1.2.3",
    )
    assert (
        sig.render()
        == "bertscore_f|model:all-MiniLM-L6-v2@cc8b698c9c1f|layer:4|idf:no|rescale:yes|seed:none|p:0.9|version:1.2.3"
    )
    assert str(sig) == sig.render()


def test_default_version_is_the_package_version():
    assert Signature("bleu").render() == f"bleu|version:{__version__}"


def test_pipes_in_values_are_escaped_and_parse_back():
    sig = Signature("m", {"path": "/a|b/100%", "note": "x:y"})
    rendered = sig.render()
    assert rendered.count("|") == 3
    parsed = Signature.parse(rendered)
    assert parsed.fields == {"path": "/a|b/100%", "note": "x:y"}


def test_with_fields_keeps_order_and_overrides():
    sig = Signature("m", {"a": 1, "b": 2}).with_fields(b=3, c="z")
    assert list(sig.fields.items()) == [("a", 1), ("b", 3), ("c", "z")]


@pytest.mark.parametrize(
    ("name", "fields", "error"),
    [
        ("", {}, ValueError),
        ("a|b", {}, ValueError),
        ("m", {"a:b": 1}, ValueError),
        ("m", {"version": "1"}, ValueError),
        ("m", {"a": [1, 2]}, TypeError),
    ],
)
def test_invalid_signatures_raise(name, fields, error):
    with pytest.raises(error):
        Signature(name, fields)


def test_parse_rejects_non_signatures():
    with pytest.raises(ValueError, match="not a rendered signature"):
        Signature.parse("just text")


values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
keys = st.text(min_size=1, max_size=10).filter(
    lambda k: "|" not in k and ":" not in k and k != "version"
)


@given(
    name=st.text(min_size=1, max_size=10).filter(lambda n: "|" not in n),
    fields=st.dictionaries(keys, values, max_size=6),
)
def test_json_round_trip_is_exact(name, fields):
    sig = Signature(name, fields)
    again = Signature.from_json(sig.to_json())
    assert again == sig
    assert again.render() == sig.render()
