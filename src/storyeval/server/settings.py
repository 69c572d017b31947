"""Server settings, validated when the server starts."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Settings(BaseModel):
    """What a study server needs to start.

    Parameters
    ----------
    database_url : str
        ``sqlite:///FILE`` (default: a file in the working directory), a plain path, or
        ``postgresql://user:password@host:port/database``.
    admin_token : str or None
        The secret in the admin URL ``/admin/<token>/``. ``None`` reuses the token stored in
        the database, or creates one the first time (printed by ``storyeval serve``).
    base_url : str or None
        The public address participants use (for the links the admin view lists), e.g.
        ``https://study.example.org``; defaults to the address of the request.
    enroll_rate_per_minute, enroll_burst : float, int
        Per-client limit on open-enrollment joins and consents (a token bucket: ``burst``
        at once, then ``enroll_rate_per_minute``); 0 disables it.
    trust_proxy : bool
        Take the client address from ``X-Forwarded-For`` (only behind a reverse proxy that
        sets it).
    threads : int
        Threads per server process running the handlers' database work.
    sqlite_sync : {"full", "normal"}
        SQLite durability: ``full`` survives a power cut, ``normal`` a crash of the server
        (see :data:`storyeval.server.db.SQLITE_SYNC`).
    judge_files : tuple of str
        LLM judges' judgment files (``storyeval judge`` output) of the studies' stories, for
        the judge-calibration queue of each study's admin pages.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = "sqlite:///storyeval-study.sqlite3"
    admin_token: str | None = Field(default=None, min_length=16, max_length=128)
    base_url: str | None = None
    enroll_rate_per_minute: float = Field(default=20.0, ge=0)
    enroll_burst: int = Field(default=10, ge=1)
    trust_proxy: bool = False
    threads: int = Field(default=8, ge=1, le=256)
    sqlite_sync: Literal["full", "normal"] = "full"
    judge_files: tuple[str, ...] = ()

    @field_validator("admin_token")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not all(c.isalnum() or c in "-_" for c in value):
            raise ValueError("the admin token may use only letters, digits, '-' and '_'")
        return value

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://; got {value!r}")
        return value.rstrip("/")
