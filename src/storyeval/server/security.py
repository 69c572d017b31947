"""Security helpers: constant-time token comparison and protective response headers."""

from __future__ import annotations

import secrets
from typing import Any

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
#: The study server's policy: as above, and the scripts of its own /static folder (the typing
#: record of free-text answers); never an inline script or one from elsewhere
CONTENT_SECURITY_POLICY_WITH_SCRIPTS = CONTENT_SECURITY_POLICY.replace(
    "style-src 'self'", "script-src 'self'; style-src 'self'"
)


def tokens_match(given: str | None, expected: str) -> bool:
    """Compare a secret in constant time.

    >>> tokens_match("abc", "abc"), tokens_match("abd", "abc"), tokens_match(None, "abc")
    (True, False, False)
    """
    if not given:
        return False
    return secrets.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


class SecurityHeaders:
    """ASGI middleware: no inline scripts (``scripts``: the app's own static ones only), no
    framing, no referrer (links carry secret tokens), no caching of pages."""

    def __init__(self, app: Any, *, scripts: bool = False) -> None:
        self.app = app
        policy = CONTENT_SECURITY_POLICY_WITH_SCRIPTS if scripts else CONTENT_SECURITY_POLICY
        self.headers = [(b"content-security-policy", policy.encode()), *_HEADERS]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                extra = [] if static else [(b"cache-control", b"no-store")]
                for name, value in self.headers + extra:
                    if name not in present:
                        headers.append((name, value))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


_HEADERS: list[tuple[bytes, bytes]] = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]
