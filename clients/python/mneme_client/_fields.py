"""What callers pass (snake_case keyword arguments) and how it goes on the wire."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any, TypedDict

Time = str | date  # ISO 8601 text, or a date/datetime (sent as ISO 8601)


class _Patchable(TypedDict, total=False):
    scope: str
    tier: str
    fact_type: str | None
    speaker: str | None
    category: str
    importance: float
    metadata: Mapping[str, str]
    entity_refs: Sequence[str]
    event_date: Time | None
    expires_at: Time | None
    proof_count: int | None
    transitory: bool
    status: str


class MemoryFields(_Patchable, total=False):
    """Fields of a new memory besides its text (see the README's Writing memories)."""

    store: str
    path: str
    supersedes: str
    provider: str
    provider_ref: str
    first_seen_at: Time
    last_used_at: Time


class MemoryUpdate(_Patchable, total=False):
    """What ``update`` may change (``PATCH`` cannot change store or path)."""

    text: str


class BrowseFilters(TypedDict, total=False):
    """Browse filters; a list means any of its values."""

    store: str
    tier: str | Sequence[str]
    fact_type: str | Sequence[str]
    not_fact_type: str | Sequence[str]
    status: str | Sequence[str]
    scope: str
    provider: str
    search: str


class SearchOptions(TypedDict, total=False):
    """Search options, as the API names them; ``model`` goes in ``X-WOS-Model``."""

    speaker: str
    filters: Mapping[str, Any]
    verify: int
    max_images: int
    form: str
    tz: int
    cache_control: Mapping[str, str]
    model: str


def camel(name: str) -> str:
    """``fact_type`` → ``factType``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _value(value: Any) -> Any:
    """Dates as ISO 8601; a naive datetime is this machine's local time (as Python's own
    ``astimezone`` takes it), sent with its offset, so the server does not read it as
    UTC."""
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.astimezone()
    return value.isoformat() if isinstance(value, date) else value


def wire(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A write body: camelCase keys, dates as ISO 8601."""
    return {camel(k): _value(v) for k, v in fields.items()}


def filters_wire(filters: Mapping[str, Any]) -> dict[str, Any]:
    """Search filters as given (the API's snake_case names), dates as ISO 8601."""
    return {k: _value(v) for k, v in filters.items()}


def query(fields: Mapping[str, Any]) -> dict[str, str]:
    """Query parameters: camelCase keys, lists comma-separated, ``None`` left out."""
    out = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, Sequence) and not isinstance(value, str):
            value = ",".join(value)
        out[camel(key)] = str(value)
    return out
