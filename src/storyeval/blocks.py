"""Blocks of work: every engine (this process, a Dask cluster) cuts a run into the same
consecutive blocks, so it gives the same numbers whatever runs the blocks."""

from __future__ import annotations


def block_plan(n_stories: int, block_size: int) -> list[tuple[int, int]]:
    """Consecutive ``(start, end)`` index ranges of at most ``block_size`` stories.

    >>> block_plan(5, 2)
    [(0, 2), (2, 4), (4, 5)]
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1; got {block_size}")
    return [
        (start, min(start + block_size, n_stories)) for start in range(0, n_stories, block_size)
    ]
