"""Search face (seed 002, SPEC §3.3): ``POST /api/v1/memory/search``.

Validation exactly as the seed (out of range is a 400, never clamped), the memory
models and what each may serve (403 naming the model), retrieval through
``service.queries.search`` and ``service.ranking``, then rendering.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import msgspec
from aiohttp import web

from embeddings import Embedder
from embeddings.batcher import Vector
from service import ranking
from service.errors import ApiError, bad_request, forbidden, not_found
from service.inputs import body_of, decode_json
from service.jsonutil import iso, json_response, parse_time, utc
from service.middleware import phase, principal_of
from service.queries import memories as q
from service.queries import search as sq
from service.queries import usage
from service.queries.search import Candidate, SearchFilters
from service.state import MODEL, POOL
from service.validation import is_blank, whole_number

USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
MAX_QUERY_BYTES = 8192
FILTER_KEYS = (
    "category", "tier", "fact_type", "scope", "entity", "created_after", "created_before",
    "event_after", "event_before", "min_importance", "include_superseded",
)  # fmt: skip
FORMS = ("memoir", "archive")
TOP_LEVEL = (
    "user_id", "query", "max_results", "speaker", "cache_control", "filters", "form", "tz",
    "max_images", "verify",
)  # fmt: skip


@dataclass(frozen=True)
class Model:
    name: str
    fuse_text: bool  # hybrid: vector + full text
    features: bool  # importance, recency, proof count, supersession
    default_max_results: int
    form: bool
    verify: bool
    images: bool
    self_apart: bool  # self_memories kept apart from memories


MODELS = {
    "tablet-2": Model("Tablet 2", True, True, 20, True, True, True, True),
    "scroll-1.2": Model("Scroll 1.2", True, False, 15, True, False, False, False),
    "scroll-1.1": Model("Scroll 1.1", False, False, 15, False, False, False, False),
}
DEFAULT_MODEL = "tablet-2"


def pick_model(header: str | None) -> Model:
    if header is None or not header.strip():
        return MODELS[DEFAULT_MODEL]
    key = "-".join(header.strip().lower().split())
    model = MODELS.get(key)
    if model is None:
        names = [m.name for m in MODELS.values()]
        # The header's value is not repeated: header values never appear in a body.
        raise bad_request(
            f"Unknown memory model in X-WOS-Model; known models: {', '.join(names)}", valid=names
        )
    return model


@dataclass
class SearchRequest:
    store_ref: str
    query: str
    max_results: int
    speaker: str | None
    filters: SearchFilters
    form: str | None
    tz: int
    max_images: int
    verify: int
    cache: str | None  # "5m" | "1h"
    warnings: list[str]


def _int(body: dict[str, Any], name: str, lo: int, hi: int, default: int) -> int:
    if name not in body or body[name] is None:
        return default
    return whole_number(body[name], name, lo, hi)


def _strings(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise bad_request(
        f"filters.{name} must be a string or a non-empty array of strings",
        param=f"filters.{name}",
    )


def parse_filters(raw: Any, warnings: list[str]) -> SearchFilters:
    if raw is None:
        return SearchFilters()
    if not isinstance(raw, dict):
        raise bad_request("filters must be an object", param="filters")
    unknown = sorted(set(raw) - set(FILTER_KEYS))
    if unknown:
        warnings.append(
            f"Ignored unknown filter key(s): {', '.join(unknown)}; known: {', '.join(FILTER_KEYS)}"
        )
    out: dict[str, Any] = {}
    for key, field in (("category", "categories"), ("tier", "tiers"), ("fact_type", "fact_types"),
                       ("scope", "scopes"), ("entity", "entities")):  # fmt: skip
        if raw.get(key) is not None:
            out[field] = _strings(raw[key], key)
    for key in ("created_after", "created_before", "event_after", "event_before"):
        if raw.get(key) is not None:
            if not isinstance(raw[key], str):
                raise bad_request(
                    f"filters.{key} must be an RFC 3339 string", param=f"filters.{key}"
                )
            out[key] = parse_time(raw[key], f"filters.{key}")
    if raw.get("min_importance") is not None:
        value = raw["min_importance"]
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise bad_request(
                "filters.min_importance must be a number from 0 to 1",
                param="filters.min_importance",
            )
        out["min_importance"] = float(value)
    if raw.get("include_superseded") is not None:
        if not isinstance(raw["include_superseded"], bool):
            raise bad_request(
                "filters.include_superseded must be a boolean", param="filters.include_superseded"
            )
        out["include_superseded"] = raw["include_superseded"]
    return SearchFilters(**out)


def parse_request(raw: bytes, model: Model, form_header: str | None) -> SearchRequest:
    body = decode_json(raw, dict[str, Any])
    warnings: list[str] = []
    unknown = sorted(set(body) - set(TOP_LEVEL))
    if unknown:
        warnings.append(f"Ignored unknown field(s): {', '.join(unknown)}")

    user_id = body.get("user_id")
    if not isinstance(user_id, str) or not USER_ID.fullmatch(user_id):
        raise bad_request(
            "user_id is required: 1-64 ASCII letters, digits, '.', '_' or '-', starting with a "
            "letter or digit",
            param="user_id",
        )
    query = body.get("query")
    if not isinstance(query, str) or is_blank(query):
        raise bad_request("query is required and must not be empty", param="query")
    if len(query.encode("utf-8", errors="replace")) > MAX_QUERY_BYTES:
        raise bad_request(f"query is longer than {MAX_QUERY_BYTES} bytes", param="query")
    if "\x00" in query:
        raise bad_request("query must not contain NUL characters", param="query")

    max_results = _int(body, "max_results", 5, 20, model.default_max_results)
    verify = _int(body, "verify", 0, 3, 0)
    max_images = _int(body, "max_images", 0, 5, 1)
    tz = _int(body, "tz", -12, 14, 0)

    form = body.get("form")
    if form is not None and form not in FORMS:
        raise bad_request(
            f"form must be one of: {', '.join(FORMS)}", param="form", valid=list(FORMS)
        )
    if form_header is not None and form_header.strip():
        header_form = form_header.strip().lower()
        if header_form not in FORMS:
            raise bad_request(f"X-WOS-Form must be one of: {', '.join(FORMS)}", valid=list(FORMS))
        if form is not None and form != header_form:
            raise bad_request("form and the X-WOS-Form header disagree")
        form = header_form

    speaker = body.get("speaker")
    if speaker is not None and (not isinstance(speaker, str) or not speaker):
        raise bad_request("speaker must be a non-empty string", param="speaker")

    cache = None
    if body.get("cache_control") is not None:
        cc = body["cache_control"]
        if not isinstance(cc, dict) or cc.get("type") != "ephemeral" or set(cc) - {"type", "ttl"}:
            raise bad_request(
                'cache_control must be {"type": "ephemeral", "ttl": "5m" | "1h"}',
                param="cache_control",
            )
        cache = cc.get("ttl", "5m")
        if cache not in ("5m", "1h"):
            raise bad_request('cache_control.ttl must be "5m" or "1h"', param="cache_control")

    filters = parse_filters(body.get("filters"), warnings)

    # What the model cannot serve is refused (values actually sent), naming the model.
    if verify >= 1 and not model.verify:
        raise forbidden(f"{model.name} cannot run verify passes; use Tablet 2")
    if "max_images" in body and max_images >= 1 and not model.images:
        raise forbidden(f"{model.name} does not store images; use Tablet 2")
    if form is not None and not model.form:
        raise forbidden(f"{model.name} cannot render a form; use Scroll 1.2 or Tablet 2")

    return SearchRequest(
        store_ref=user_id, query=query, max_results=max_results, speaker=speaker,
        filters=filters, form=form, tz=tz, max_images=max_images, verify=verify, cache=cache,
        warnings=warnings,
    )  # fmt: skip


# --- rendering ----------------------------------------------------------------------------


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
    out["event_date"] = (
        None if c.event_date is None else render_time(c.event_date, req.form, req.tz)
    )
    if c.speaker is not None:
        out["speaker"] = c.speaker
    return out


# --- the handler --------------------------------------------------------------------------


async def search(request: web.Request) -> web.Response:
    model = pick_model(request.headers.get("X-WOS-Model"))
    req = parse_request(await body_of(request), model, request.headers.get("X-WOS-Form"))
    # The model encodes the query while the store is looked up (~1 ms saved of each
    # search). Not for a cacheable search: a cache hit needs no vector.
    queries = request.app[MODEL].queries
    early = None
    if req.cache is None and queries is not None:
        early = asyncio.ensure_future(queries.encode(req.query))
    try:
        return await _search(request, model, req, early)
    finally:
        if early is not None:
            # Not needed (a 404): stop waiting. The model still finishes the batch it is
            # in, and its cache keeps the vector. No-op once done.
            early.cancel()
            if early.done() and not early.cancelled():
                early.exception()  # retrieved: a failure here was answered already


async def _search(
    request: web.Request,
    model: Model,
    req: SearchRequest,
    early: asyncio.Future[Vector] | None,
) -> web.Response:
    principal = principal_of(request)
    pool = request.app[POOL]
    started = time.perf_counter()
    found = await sq.store_and_profile(pool, principal.workspace_id, req.store_ref)
    phase(request, "store", time.perf_counter() - started)
    if found is None:
        raise not_found(f"Store {req.store_ref!r} not found")
    store, stats = found
    if req.speaker is not None and not await q.speaker_exists(
        pool, principal.workspace_id, store.id, req.speaker
    ):
        raise not_found(f"Speaker {req.speaker!r} is not registered in store {store.name!r}")

    slot = request.app[MODEL]
    if slot.queries is None or slot.embedder is None:
        raise ApiError(503, "The embedding model is still loading; retry in a few seconds",
                       headers={"Retry-After": "5"})  # fmt: skip
    embedder = slot.embedder
    query_tokens = embedder.count_tokens(req.query)

    # The cache: one entry per (store, model, options, reader); valid while the store is
    # unchanged.
    reader = hashlib.sha256(principal.visibility.encode()).digest()
    cache_key = usage.CacheKey(
        principal.workspace_id, store.id, model.name, options_key(req), reader
    )
    entry = None
    if req.cache is not None:
        entry = await usage.cached(pool, cache_key)
        if entry is not None and entry.store_version != store.version:
            entry = None
        if entry is not None and entry.query == req.query:
            units = 0.1 * (query_tokens + entry.result_tokens)
            request.app[METER].add(principal.workspace_id, "search", units)
            request.app[TOUCHER].add(principal.workspace_id, entry.memory_ids)
            return web.Response(
                body=entry.response, content_type="application/json",
                headers={"X-Cache": "hit", "X-Usage-Units": f"{units:.4f}"},
            )  # fmt: skip

    body, delivered = await answer(request, model, req, store, stats, principal, early)
    started = time.perf_counter()
    encoded = msgspec.json.encode(body)
    returned = [c.id for c in delivered]
    result_tokens = result_tokens_of(delivered, embedder)
    phase(request, "bill", time.perf_counter() - started)
    if req.cache is None:
        units, cache_header = query_tokens + result_tokens, "miss"
    else:
        rate = WRITE_RATE[req.cache]
        cached_part = (
            entry.query_tokens if entry is not None and req.query.startswith(entry.query) else 0
        )
        units = 0.1 * cached_part + rate * (query_tokens - cached_part) + result_tokens
        cache_header = "write"
        await usage.put_cached(
            pool, cache_key,
            usage.Cached(req.query, query_tokens, result_tokens, store.version, returned, encoded,
                         datetime.now(UTC)),
            TTL_S[req.cache],
        )  # fmt: skip
    request.app[METER].add(principal.workspace_id, "search", units)
    # Both are written off the response path; the toucher's wake also flushes the meter.
    request.app[TOUCHER].add(principal.workspace_id, returned)
    return web.Response(
        body=encoded, content_type="application/json",
        headers={"X-Cache": cache_header, "X-Usage-Units": f"{units:.4f}"},
    )  # fmt: skip


def result_tokens_of(delivered: list[Candidate], embedder: Embedder) -> int:
    """Tokens of the delivered results' content: as the worker counted them when it
    embedded each memory, and counted here (one tokenizer call) for any it has not yet."""
    counted = sum(c.text_tokens for c in delivered if c.text_tokens is not None)
    uncounted = [c.text for c in delivered if c.text_tokens is None]
    return counted + sum(embedder.count_tokens_many(uncounted))


WRITE_RATE = {"5m": 2.0, "1h": 3.0}
TTL_S = {"5m": 300.0, "1h": 3600.0}


def options_key(req: SearchRequest) -> bytes:
    """Every request option except the query and cache_control."""
    options = {
        "max_results": req.max_results, "speaker": req.speaker, "filters": req.filters,
        "form": req.form, "tz": req.tz, "max_images": req.max_images, "verify": req.verify,
    }  # fmt: skip
    return hashlib.sha256(msgspec.json.encode(options, enc_hook=str)).digest()


async def answer(
    request: web.Request,
    model: Model,
    req: SearchRequest,
    store: q.Store,
    stats: sq.Profile,
    principal: Any,
    early: asyncio.Future[Vector] | None = None,
) -> tuple[dict[str, Any], list[Candidate]]:
    """Retrieve and render; returns the body and the memories it delivers. ``early``:
    the query's vector, already being computed."""
    pool = request.app[POOL]
    slot = request.app[MODEL]
    assert slot.queries is not None
    started = time.perf_counter()  # "embed": the wait for the vector
    query_vector = await (early if early is not None else slot.queries.encode(req.query))
    phase(request, "embed", time.perf_counter() - started)
    started = time.perf_counter()
    now = datetime.now(UTC)
    per_arm = max(60, 4 * req.max_results)

    async with pool.acquire() as conn:

        async def retrieve(
            *,
            subset: str,
            self_only: bool | None,
            images: bool | None,
            speaker: str | None,
            filters: SearchFilters,
            depth: int = per_arm,
        ) -> list[tuple[Candidate, float]]:
            """The subset's candidates, ranked best first with their scores."""
            if stats.size(subset) == 0:
                return []  # nothing of that kind in the store: no need to ask
            found = await sq.candidates(
                conn, principal, store.id, stats, query_vector, req.query, filters,
                per_arm=depth, subset=subset, speaker=speaker, self_only=self_only,
                images=images, use_fts=model.fuse_text,
            )  # fmt: skip
            return ranking.scored(
                found, fuse_text=model.fuse_text, use_features=model.features, now=now
            )

        self_mode = model.self_apart
        wants_self = req.speaker == "me" and self_mode
        memories: list[Candidate] = []
        verify_used = 0
        if not wants_self:
            # verify's passes draw on one retrieval, a little deeper than a plain one.
            depth = max(per_arm, VERIFY_DEPTH) if req.verify else per_arm
            ranked = await retrieve(
                subset="all", self_only=False if self_mode else None,
                images=False if model.images else None, speaker=req.speaker,
                filters=req.filters, depth=depth,
            )  # fmt: skip
            memories = [c for c, _ in ranked[: req.max_results]]
            memories, verify_used = verify_passes(memories, ranked, req.max_results, req.verify)
        self_memories: list[Candidate] = []
        if self_mode:
            ranked = await retrieve(
                subset="self", self_only=True, images=None, speaker=None, filters=SearchFilters()
            )
            self_memories = [c for c, _ in ranked[: req.max_results]]
        images: list[Candidate] = []
        if model.images and req.max_images:
            ranked = await retrieve(
                subset="images", self_only=None, images=True, speaker=None, filters=req.filters
            )
            images = [c for c, _ in ranked[: req.max_images]]

    phase(request, "retrieve", time.perf_counter() - started)
    started = time.perf_counter()
    strip = store.strip_temporal
    body: dict[str, Any] = {"memories": [render(c, req, strip) for c in memories]}
    if model.images:
        body["images"] = [
            {**render(c, req, strip), "media_url": f"/api/v1/memories/{c.id}/media"} for c in images
        ]
    if self_mode:
        body["self_memories"] = [render(c, req, strip) for c in self_memories]
    if req.verify > 0:
        body["verify_used"] = verify_used
    if req.warnings:
        body["warnings"] = req.warnings
    phase(request, "render", time.perf_counter() - started)
    return body, memories + self_memories + images


# verify (tuned on LoCoMo multi-hop, bench/results/quality.md): a candidate from a day the
# answer already draws on counts this much more; candidates per arm (at least).
VERIFY_SAME_DAY = 1.6
VERIFY_DEPTH = 80


def day_of(c: Candidate) -> Hashable:
    return utc(c.event_date or c.created_at).date()


def verify_passes(
    first: list[Candidate], ranked: list[tuple[Candidate, float]], per_pass: int, passes: int
) -> tuple[list[Candidate], int]:
    """verify: up to ``passes`` more passes of ``per_pass`` memories each.

    A pass never repeats a memory already returned, and it reaches past plain rank
    order into the context of what was found: a memory from a day (a session, for a
    conversation) that the answer already draws on weighs ``VERIFY_SAME_DAY`` times its
    score. Multi-hop questions are answered by several statements about one topic, and
    they tend to sit in the same sessions as the first evidence found. The order of the
    fused ranking is kept otherwise: what was returned is dropped after ranking, not
    excluded before it (that would promote whatever followed it in one arm). Stops early
    when a pass adds nothing; returns the memories and the passes that added some.
    """
    returned = {c.id for c in first}
    covered: dict[Hashable, int] = {}
    for c in first:
        covered[day_of(c)] = covered.get(day_of(c), 0) + 1
    out, used = list(first), 0
    for _ in range(passes):
        fresh = [(c, score) for c, score in ranked if c.id not in returned]
        extra = ranking.spread(fresh, covered, day_of, per_pass, VERIFY_SAME_DAY, cap=1)
        if not extra:
            break
        used += 1
        out += extra
        returned.update(c.id for c in extra)
    return out, used


class Toucher:
    """Batches ``last_used_at = now()`` for returned memories, off the response path."""

    def __init__(self) -> None:
        self.pending: dict[str, set[str]] = {}
        self.wake = asyncio.Event()

    def add(self, workspace_id: str, ids: list[str]) -> None:
        self.pending.setdefault(workspace_id, set()).update(ids)
        self.wake.set()

    async def flush(self, pool: Any) -> None:
        batch, self.pending = self.pending, {}
        for workspace_id, ids in batch.items():
            if ids:
                await sq.touch(pool, workspace_id, sorted(ids))


TOUCHER = web.AppKey("toucher", Toucher)
METER = web.AppKey("meter", usage.Meter)


async def get_usage(request: web.Request) -> web.Response:
    """``GET /api/v1/usage?from=YYYY-MM-DD&to=YYYY-MM-DD``: billed units per day and endpoint."""
    today = datetime.now(UTC).date()

    def day(name: str, default: date) -> date:
        raw = request.query.get(name)
        if not raw:
            return default
        try:
            if not DAY.fullmatch(raw):  # date.fromisoformat also takes 20260814, 2026-W33-5
                raise ValueError(raw)
            return date.fromisoformat(raw)
        except ValueError:
            raise bad_request(
                f"{name} must be a date like 2026-08-14, got {raw!r}", param=name
            ) from None

    # Defaults: to is today, from 30 days before to; only a range given backwards is refused.
    end = day("to", today)
    start = day("from", end - timedelta(days=30) if end.toordinal() > 30 else date.min)
    if start > end:
        if request.query.get("to"):
            raise bad_request("from must not be after to")
        end = start  # only from, in the future: an empty range
    pool = request.app[POOL]
    await request.app[METER].flush(pool)  # this instance's pending units count too
    found = await usage.days(pool, principal_of(request).workspace_id, start, end)
    return json_response(
        {
            "data": [
                {
                    "day": d.day.isoformat(),
                    "endpoint": d.endpoint,
                    "requests": d.requests,
                    "units": round(d.units, 4),
                }
                for d in found
            ]
        }
    )
