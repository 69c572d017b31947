"""Blocks of work and the executors that run them.

Every operation over a story file (scoring, judging, generating, perturbing) is written once,
as functions over blocks of stories, and run by an :class:`Executor`: :class:`LocalExecutor`
in this process, or the Dask executor (:class:`storyeval.engine.dask.DaskExecutor`) on a
cluster. Both cut a run into the same consecutive blocks, so an operation gives the same
numbers whatever runs it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from storyeval.corpus import Story

R = TypeVar("R")
#: The run indices of a block's stories, in order (a ``range`` for consecutive stories).
Block = Sequence[int]


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


def consecutive_blocks(n_stories: int, block_size: int) -> list[Block]:
    """:func:`block_plan` as blocks of run indices."""
    return [range(start, end) for start, end in block_plan(n_stories, block_size)]


class Executor(Protocol):
    """Runs the functions of an operation on the stories of a run.

    ``map_parts`` runs a function on each part of the stories as the executor holds them (one
    part in this process; a file's partitions on a cluster), for the statistics an operation
    needs before it cuts blocks; ``map_blocks`` runs a function on each block and returns the
    results in block order. Functions given to an executor that is not ``in_process`` must
    be importable module-level functions, and their arguments picklable.
    """

    @property
    def in_process(self) -> bool:
        """Whether functions run in this process (and may share live objects: loaded
        models, caches) or elsewhere (they get picklable settings and load what they need
        there)."""
        ...

    @property
    def where(self) -> str:
        """The file (or ``<stories>``) that error messages name."""
        ...

    @property
    def n_stories(self) -> int:
        """How many stories the run holds."""
        ...

    def stubs(self) -> list[Story]:
        """Every story of the run, in order; an executor may leave the texts out (id,
        system and prompt id are kept)."""
        ...

    def locate(self, index: int) -> tuple[str, int]:
        """A story's id and line in its file."""
        ...

    def map_parts(self, function: Callable[..., R], *shared: Any) -> list[R]:
        """``function(stories, offset, *shared)`` on each part (``offset``: the run index of
        its first story)."""
        ...

    def map_blocks(
        self,
        function: Callable[..., R],
        blocks: Sequence[Block],
        *shared: Any,
        items: Sequence[Any] | None = None,
        resources: Mapping[str, float] | None = None,
        label: str = "blocks",
    ) -> list[R]:
        """``function(stories, item, *shared)`` on each block (``item``: ``items[k]``, by
        default the block's number ``k``); ``resources``: what a task needs (e.g.
        ``{"GPU": 1}`` on a cluster)."""
        ...


@dataclass
class LocalExecutor:
    """The executor of this process: stories in memory, blocks run one after another.

    Parameters
    ----------
    stories : sequence of Story
        The run's stories.
    lines : mapping, optional
        Each story id's line in its file, for error messages (default: its position).
    where : str
        The file error messages name.
    progress : bool
        Show a progress bar over blocks (when there is more than one).
    """

    stories: Sequence[Story]
    lines: Mapping[str, int] = field(default_factory=dict)
    where: str = "<stories>"
    progress: bool = False

    @property
    def in_process(self) -> bool:
        """Functions run in this process."""
        return True

    @property
    def n_stories(self) -> int:
        """How many stories the run holds."""
        return len(self.stories)

    def stubs(self) -> list[Story]:
        """The stories themselves (they are in memory already)."""
        return list(self.stories)

    def locate(self, index: int) -> tuple[str, int]:
        """A story's id and line (its position when its line is unknown)."""
        story_id = self.stories[index].id
        return story_id, self.lines.get(story_id, index + 1)

    def map_parts(self, function: Callable[..., R], *shared: Any) -> list[R]:
        """``function`` on all stories at once (one part)."""
        return [function(list(self.stories), 0, *shared)]

    def map_blocks(
        self,
        function: Callable[..., R],
        blocks: Sequence[Block],
        *shared: Any,
        items: Sequence[Any] | None = None,
        resources: Mapping[str, float] | None = None,
        label: str = "blocks",
    ) -> list[R]:
        """``function`` on each block in turn."""
        bar = _bar(len(blocks), label, self.progress and len(blocks) > 1)
        results = []
        for k, block in enumerate(blocks):
            item = items[k] if items is not None else k
            results.append(function(self.select(block), item, *shared))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
        return results

    def select(self, block: Block) -> list[Story]:
        """The stories of a block."""
        if isinstance(block, range) and block.step == 1:
            return list(self.stories[block.start : block.stop])
        return [self.stories[i] for i in block]


def _bar(total: int, label: str, enabled: bool) -> Any:
    """A progress bar on stderr, or None."""
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=label, unit="block", file=sys.stderr)
