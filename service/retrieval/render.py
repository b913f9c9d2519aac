"""How a search result looks on the wire: seed 002's memory object, times in a form."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from service.queries.search import Candidate
from service.retrieval import ranking
from service.retrieval.search_request import SearchRequest
from service.times import iso, utc


def render_time(ts: datetime, form: str | None, tz: int) -> str:
    if form is None:
        return iso(ts)
    try:
        local = ts.astimezone(timezone(timedelta(hours=tz)))
    except (OverflowError, ValueError):  # past the calendar's end in that zone: shown in UTC
        local, tz = ts, 0
    if form == "memoir":
        return f"{local:%A}, {local.day} {local:%B %Y, %H:%M}"
    return f"{local.year:04d}-{local:%m-%d %H:%M} UTC{tz:+03d}:00"


def render(c: Candidate, req: SearchRequest, strip_temporal: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": c.id,
        "content": c.text,
        "category": c.category,
        "similarity": round(ranking.similarity(c), 6),
        "importance": c.importance,
    }
    if not strip_temporal:
        bucket = utc(c.event_date or c.created_at)
        out["time_bucket"] = f"{bucket.year:04d}-{bucket.month:02d}"
    out["is_superseded"] = c.superseded_by is not None
    out["superseded_by"] = c.superseded_by
    if not strip_temporal:
        out["created_at"] = render_time(c.created_at, req.form, req.tz)
    if c.event_date is not None:  # seed 002: a string, "if known"
        out["event_date"] = render_time(c.event_date, req.form, req.tz)
    if c.speaker is not None:
        out["speaker"] = c.speaker
    return out
