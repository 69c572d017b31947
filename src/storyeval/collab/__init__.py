"""Collaborative writing: Choose Your Own Adventure paired suggestions (Clark 2021, ch. 4) and
machine-in-the-loop story writing (ch. 2): session files, the session state machine, the
generation worker, the sessions file and its analysis."""

from storyeval.collab.config import (
    CYOA_QUESTIONS,
    CYOA_STATEMENTS,
    CyoaConfig,
    MilConfig,
    WritingFileError,
    load_writing_config,
    parse_writing_config,
)
from storyeval.collab.records import SessionRecord, read_sessions, write_sessions
from storyeval.collab.session import (
    SuggestionRequest,
    SuggestionResult,
    TurnError,
    WritingSession,
)

__all__ = [
    "CYOA_QUESTIONS",
    "CYOA_STATEMENTS",
    "CyoaConfig",
    "MilConfig",
    "SessionRecord",
    "SuggestionRequest",
    "SuggestionResult",
    "TurnError",
    "WritingFileError",
    "WritingSession",
    "load_writing_config",
    "parse_writing_config",
    "read_sessions",
    "write_sessions",
]
