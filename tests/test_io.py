"""Atomic writes of files and directories."""

from __future__ import annotations

import pytest

from storyeval.base.io import atomic_directory, atomic_write, write_bytes_atomic


def test_atomic_write_replaces_only_on_success(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(KeyError), atomic_write(path) as fh:
        fh.write("new partial")
        raise KeyError("boom")
    assert path.read_text() == "old"
    with atomic_write(path) as fh:
        fh.write("new")
    assert path.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.txt"]


def test_write_bytes_atomic_creates_parents(tmp_path):
    target = tmp_path / "a" / "b.bin"
    write_bytes_atomic(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"


def test_atomic_directory(tmp_path):
    target = tmp_path / "ckpt"
    with atomic_directory(target, "test output") as tmp:
        (tmp / "w.txt").write_text("1")
    assert (target / "w.txt").read_text() == "1"
    with pytest.raises(RuntimeError), atomic_directory(target, "test output") as tmp:
        (tmp / "w.txt").write_text("2")
        raise RuntimeError
    assert (target / "w.txt").read_text() == "1"
    with atomic_directory(target, "test output") as tmp:
        (tmp / "v.txt").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == [".storyeval-output", "v.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]
