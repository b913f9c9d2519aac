"""A search request, parsed and validated exactly as seed 002 says.

Out-of-range values are a 400, never clamped; unknown top-level fields and filter keys
are dropped and named in ``warnings``; what the memory model cannot serve is a 403.
"""

from __future__ import annotations

import re
from typing import Any

from service.decoding import decode_json
from service.problems import Forbidden, Invalid
from service.queries.search import SearchFilters
from service.retrieval.memory_models import MemoryModel
from service.retrieval.search_request import SearchRequest
from service.times import parse_time
from service.write.fields import is_blank, whole_number

USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_QUERY_BYTES = 8192
FILTER_KEYS = (
    "category",
    "tier",
    "fact_type",
    "scope",
    "entity",
    "created_after",
    "created_before",
    "event_after",
    "event_before",
    "min_importance",
    "include_superseded",
)
FORMS = ("memoir", "archive")
TOP_LEVEL = (
    "user_id",
    "query",
    "max_results",
    "speaker",
    "cache_control",
    "filters",
    "form",
    "tz",
    "max_images",
    "verify",
)


def _int(body: dict[str, Any], name: str, lo: int, hi: int, default: int) -> int:
    if name not in body or body[name] is None:
        return default
    return whole_number(body[name], name, lo, hi)


def _strings(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise Invalid(
        f"filters.{name} must be a string or a non-empty array of strings",
        param=f"filters.{name}",
    )


def parse_filters(raw: Any, warnings: list[str]) -> SearchFilters:
    if raw is None:
        return SearchFilters()
    if not isinstance(raw, dict):
        raise Invalid("filters must be an object", param="filters")
    unknown = sorted(set(raw) - set(FILTER_KEYS))
    if unknown:
        warnings.append(
            f"Ignored unknown filter key(s): {', '.join(unknown)}; known: {', '.join(FILTER_KEYS)}"
        )
    out: dict[str, Any] = {}
    for key, field in (
        ("category", "categories"),
        ("tier", "tiers"),
        ("fact_type", "fact_types"),
        ("scope", "scopes"),
        ("entity", "entities"),
    ):
        if raw.get(key) is not None:
            out[field] = _strings(raw[key], key)
    for key in ("created_after", "created_before", "event_after", "event_before"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], str):
                raise Invalid(f"filters.{key} must be an RFC 3339 string", param=f"filters.{key}")
            out[key] = parse_time(raw[key], f"filters.{key}")
    if raw.get("min_importance") is not None:
        value = raw["min_importance"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise Invalid(
                "filters.min_importance must be a number from 0 to 1",
                param="filters.min_importance",
            )
        out["min_importance"] = float(value)
    if raw.get("include_superseded") is not None:
        if not isinstance(raw["include_superseded"], bool):
            raise Invalid(
                "filters.include_superseded must be a boolean", param="filters.include_superseded"
            )
        out["include_superseded"] = raw["include_superseded"]
    return SearchFilters(**out)


def parse_request(raw: bytes, model: MemoryModel, form_header: str | None) -> SearchRequest:
    body = decode_json(raw, dict[str, Any])
    warnings: list[str] = []
    unknown = sorted(set(body) - set(TOP_LEVEL))
    if unknown:
        warnings.append(f"Ignored unknown field(s): {', '.join(unknown)}")
    user_id = _user_id(body)
    query = _query(body)
    max_results = _int(body, "max_results", 5, 20, model.default_max_results)
    verify = _int(body, "verify", 0, 3, 0)
    max_images = _int(body, "max_images", 0, 5, 1)
    tz = _int(body, "tz", -12, 14, 0)
    form = _form(body, form_header)
    speaker = body.get("speaker")
    if speaker is not None and (not isinstance(speaker, str) or not speaker):
        raise Invalid("speaker must be a non-empty string", param="speaker")
    cache_ttl = _cache_control(body)
    filters = parse_filters(body.get("filters"), warnings)
    # What the model cannot serve is refused (values actually sent), naming the model.
    if verify >= 1 and not model.verify:
        raise Forbidden(f"{model.name} cannot run verify passes; use Tablet 2")
    if body.get("max_images") is not None and max_images >= 1 and not model.images:
        raise Forbidden(f"{model.name} does not store images; use Tablet 2")
    if form is not None and not model.form:
        raise Forbidden(f"{model.name} cannot render a form; use Scroll 1.2 or Tablet 2")
    return SearchRequest(
        store_ref=user_id,
        query=query,
        max_results=max_results,
        speaker=speaker,
        filters=filters,
        form=form,
        tz=tz,
        max_images=max_images,
        verify=verify,
        cache_ttl=cache_ttl,
        warnings=warnings,
    )


def _user_id(body: dict[str, Any]) -> str:
    user_id = body.get("user_id")
    if not isinstance(user_id, str) or not USER_ID.fullmatch(user_id):
        raise Invalid(
            "user_id is required: 1-64 ASCII letters, digits, '.', '_' or '-', starting with a "
            "letter or digit",
            param="user_id",
        )
    return user_id


def _query(body: dict[str, Any]) -> str:
    query = body.get("query")
    if not isinstance(query, str) or is_blank(query):
        raise Invalid("query is required and must not be empty", param="query")
    if len(query.encode("utf-8", errors="replace")) > MAX_QUERY_BYTES:
        raise Invalid(f"query is longer than {MAX_QUERY_BYTES} bytes", param="query")
    if "\x00" in query:
        raise Invalid("query must not contain NUL characters", param="query")
    return query


def _form(body: dict[str, Any], form_header: str | None) -> str | None:
    """The form the body or the X-WOS-Form header asks for (they must agree)."""
    form = body.get("form")
    if form is not None and form not in FORMS:
        raise Invalid(f"form must be one of: {', '.join(FORMS)}", param="form", valid=list(FORMS))
    if form_header is not None and form_header.strip():
        header_form = form_header.strip().lower()
        if header_form not in FORMS:
            raise Invalid(f"X-WOS-Form must be one of: {', '.join(FORMS)}", valid=list(FORMS))
        if form is not None and form != header_form:
            raise Invalid("form and the X-WOS-Form header disagree")
        form = header_form
    return form


def _cache_control(body: dict[str, Any]) -> str | None:
    """The cache entry's TTL ("5m" or "1h"); ``None``: no cache_control."""
    if body.get("cache_control") is None:
        return None
    cc = body["cache_control"]
    if not isinstance(cc, dict) or cc.get("type") != "ephemeral" or set(cc) - {"type", "ttl"}:
        raise Invalid(
            'cache_control must be {"type": "ephemeral", "ttl": "5m" | "1h"}',
            param="cache_control",
        )
    cache = cc.get("ttl", "5m")
    if cache not in ("5m", "1h"):
        raise Invalid('cache_control.ttl must be "5m" or "1h"', param="cache_control")
    return str(cache)
