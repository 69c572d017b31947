"""HTTP routers, one module per resource: the core (links, joining, admin dashboard) and the
study pages for participants and administrators."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi.responses import Response


def attachment(body: str, filename: str, media_type: str) -> Response:
    """A download: ``body`` served as the file ``filename``."""
    return Response(
        body,
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


def jsonl_attachment(records: Iterable[Mapping[str, Any]], filename: str) -> Response:
    """Records served as a JSONL file (one JSON object per line)."""
    body = "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records)
    return attachment(body, filename, "application/x-ndjson; charset=utf-8")
