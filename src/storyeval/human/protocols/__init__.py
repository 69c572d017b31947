"""The registry of study protocols: one module per protocol, one class per module.

>>> from storyeval.human.protocols import PROTOCOLS
>>> PROTOCOLS.names()
('likert', 'side_by_side', 'pairwise', 'detection', 'triangle', 'best_worst', 'spans')

A package adds a protocol by subclassing :class:`StudyProtocol` in a module named by an entry
point of the group ``storyeval.protocols`` and registering an instance:
``PROTOCOLS.register("my_protocol", MyProtocol())``.
"""

from __future__ import annotations

from storyeval.base.registry import Registry
from storyeval.human.protocols.base import (
    AnalysisSettings,
    JudgmentRow,
    PageView,
    ProtocolAnalysis,
    StatementPart,
    StudyProtocol,
)


def _builtins() -> None:
    from storyeval.human.protocols import (
        best_worst,
        detection,
        likert,
        pairwise,
        side_by_side,
        spans,
        triangle,
    )

    for protocol in (
        likert.Likert(),
        side_by_side.SideBySide(),
        pairwise.Pairwise(),
        detection.Detection(),
        triangle.Triangle(),
        best_worst.BestWorst(),
        spans.Spans(),
    ):
        PROTOCOLS.register(protocol.name, protocol)


PROTOCOLS: Registry[StudyProtocol] = Registry(
    "study protocol", builtins=_builtins, entry_point_group="storyeval.protocols"
)


def get_protocol(name: str) -> StudyProtocol:
    """The protocol ``name``; an unknown name raises with the list of protocols."""
    return PROTOCOLS.get(name)


__all__ = [
    "PROTOCOLS",
    "AnalysisSettings",
    "JudgmentRow",
    "PageView",
    "ProtocolAnalysis",
    "StatementPart",
    "StudyProtocol",
    "get_protocol",
]
