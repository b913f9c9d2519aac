"""A memory as a client writes it (camelCase JSON: the write API, ``mneme import`` lines,
the Memory Store face and the MCP door build one), and its values checked, once, into a
``NewMemory``: the one form the write engine (``service.write.engine``) takes.

``decode_items`` reads a write's body: one memory or ``{"memories": [...]}``. Each item is
decoded and checked in turn; the first that is refused ends the batch there (``Batch``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from service.decoding import check_strings, decode_json
from service.problems import Invalid, Problem
from service.times import parse_time
from service.write import fields
from service.write.rules import DEFAULT_STORE, NewMemory

MAX_BATCH = 500


class ImageIn(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    data: str
    mime_type: str


class MemoryIn(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    """A memory as written: camelCase, every field optional so an upsert can omit it."""

    text: str | UnsetType = UNSET
    store: str | UnsetType = UNSET
    scope: str | UnsetType = UNSET
    tier: str | UnsetType = UNSET
    fact_type: str | UnsetType | None = UNSET
    status: str | UnsetType = UNSET
    provider: str | UnsetType = UNSET
    provider_ref: str | UnsetType | None = UNSET
    entity_refs: list[str] | UnsetType = UNSET
    proof_count: int | float | UnsetType | None = UNSET  # whole numbers: fields.whole_number
    category: str | UnsetType = UNSET
    importance: float | UnsetType = UNSET
    speaker: str | UnsetType | None = UNSET
    event_date: str | UnsetType | None = UNSET
    first_seen_at: str | UnsetType = UNSET
    last_used_at: str | UnsetType = UNSET
    supersedes: str | UnsetType | None = UNSET
    path: str | UnsetType | None = UNSET
    metadata: dict[str, str] | UnsetType = UNSET
    expires_at: str | UnsetType | None = UNSET
    transitory: bool | UnsetType = UNSET
    image: ImageIn | UnsetType | None = UNSET


class MemoryPatch(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    text: str | UnsetType = UNSET
    status: str | UnsetType = UNSET
    scope: str | UnsetType = UNSET
    tier: str | UnsetType = UNSET
    fact_type: str | UnsetType | None = UNSET
    importance: float | UnsetType = UNSET
    category: str | UnsetType = UNSET
    metadata: dict[str, str] | UnsetType = UNSET
    expires_at: str | UnsetType | None = UNSET
    transitory: bool | UnsetType = UNSET
    entity_refs: list[str] | UnsetType = UNSET
    proof_count: int | float | UnsetType | None = UNSET  # whole numbers: fields.whole_number
    event_date: str | UnsetType | None = UNSET
    speaker: str | UnsetType | None = UNSET


def new_memory(item: MemoryIn) -> NewMemory:
    """The checked values of a memory to write: 400 for the first that is wrong."""
    supersedes = item.supersedes if isinstance(item.supersedes, str) else None
    store_ref = item.store if item.store is not UNSET else DEFAULT_STORE
    return NewMemory(columns_of_new(item), store_ref, supersedes)


@dataclass
class Batch:
    """Memories to write, checked: ``items`` in order, up to the first that is refused
    (``refused``, labelled with its place). That refusal is the answer only if every item
    before it is written: the first failing item decides, and whether an earlier one
    names an unknown store or speaker is known only once it is written."""

    items: list[NewMemory]
    batch: bool = False  # a body of ``{"memories": [...]}``, answered as a list
    labels: list[str] = field(default_factory=list)  # each item's place, for its errors
    refused: Problem | None = None

    def __post_init__(self) -> None:
        self.labels = self.labels or [""] * len(self.items)

    def add(self, item: MemoryIn, label: str) -> bool:
        """Check ``item`` and add it; ``False`` (and ``refused`` set) if it is refused."""
        try:
            self.items.append(new_memory(item))
        except Problem as exc:
            self.refused = exc.labelled(label)
            return False
        self.labels.append(label)
        return True

    def raise_refused(self) -> None:
        if self.refused is not None:
            raise self.refused


def decode_items(raw: bytes) -> Batch:
    """One memory object or ``{"memories": [...]}``, decoded and checked."""
    # NUL in strings is checked item by item (``new_memory``): the first failing item decides.
    top = decode_json(raw, dict[str, msgspec.Raw], strings=False)
    if "memories" not in top:
        return Batch([new_memory(decode_json(raw, MemoryIn, what="Memory", strings=False))])
    extra = sorted(set(top) - {"memories"})
    if extra:
        raise Invalid(f"A batch body has only 'memories'; unexpected: {', '.join(extra)}")
    parts = decode_json(top["memories"], list[msgspec.Raw], what="memories", strings=False)
    if not 1 <= len(parts) <= MAX_BATCH:
        raise Invalid(f"A batch holds 1 to {MAX_BATCH} memories, got {len(parts)}")
    batch = Batch([], batch=True)
    for i, part in enumerate(parts):
        try:
            item = decode_json(part, MemoryIn, what=f"memories[{i}]", strings=False)
        except Problem as exc:
            batch.refused = exc
            break
        if not batch.add(item, f"memories[{i}]"):
            break
    if not batch.items:
        batch.raise_refused()
    return batch


def _time(value: str | None, name: str) -> datetime | None:
    return None if value is None else parse_time(value, name)


def columns_of(item: MemoryIn | MemoryPatch) -> dict[str, Any]:
    """The validated columns an item sets (omitted fields are absent, not null)."""
    c: dict[str, Any] = {}
    if item.text is not UNSET:
        raw = fields.check_text(item.text)
        c.update(text=item.text, content_sha256=fields.sha256_hex(raw), content_size_bytes=len(raw))
    if item.scope is not UNSET:
        c["scope"] = fields.check_scope(item.scope)
    if item.tier is not UNSET:
        c["tier"] = fields.check_choice(item.tier, fields.TIERS, "tier")
    if item.status is not UNSET:
        c["status"] = fields.check_choice(item.status, fields.STATUSES, "status")
    if item.fact_type is not UNSET:
        c["fact_type"] = item.fact_type
    if item.importance is not UNSET:
        c["importance"] = fields.check_importance(item.importance)
    if item.category is not UNSET:
        if fields.is_blank(item.category):
            raise Invalid("category must not be empty", param="category")
        c["category"] = item.category
    if item.metadata is not UNSET:
        c["metadata"] = fields.check_metadata(item.metadata)
    if item.expires_at is not UNSET:
        c["expires_at"] = _time(item.expires_at, "expiresAt")
    if item.transitory is not UNSET:
        c["transitory"] = item.transitory
    if item.entity_refs is not UNSET:
        c["entity_refs"] = item.entity_refs
    if item.proof_count is not UNSET:
        c["proof_count"] = (
            None
            if item.proof_count is None
            else fields.whole_number(item.proof_count, "proofCount", 0, fields.INT4_MAX)
        )
    if item.event_date is not UNSET:
        c["event_date"] = _time(item.event_date, "eventDate")
    if item.speaker is not UNSET:
        c["speaker"] = item.speaker
    if isinstance(item, MemoryIn):
        c.update(_columns_of_new_only(item))
    return c


def _columns_of_new_only(item: MemoryIn) -> dict[str, Any]:
    """The columns only a write (not a patch) may set: identity, path, times, image."""
    c: dict[str, Any] = {}
    if item.provider is not UNSET:
        if fields.is_blank(item.provider):
            raise Invalid("provider must not be empty", param="provider")
        c["provider"] = fields.check_length(item.provider, "provider", fields.MAX_PROVIDER_CHARS)
    if item.provider_ref not in (UNSET, None):
        assert isinstance(item.provider_ref, str)
        c["provider_ref"] = fields.check_length(
            item.provider_ref, "providerRef", fields.MAX_PROVIDER_REF_CHARS
        )
    if item.path not in (UNSET, None):
        assert isinstance(item.path, str)
        c["path"] = fields.check_path(item.path)
    if item.first_seen_at is not UNSET:
        c["first_seen_at"] = parse_time(item.first_seen_at, "firstSeenAt")
    if item.last_used_at is not UNSET:
        c["last_used_at"] = parse_time(item.last_used_at, "lastUsedAt")
    if isinstance(item.image, ImageIn):
        c.update(
            kind="image",
            media=fields.decode_image(item.image.data, item.image.mime_type),
            media_type=item.image.mime_type,
        )
    return c


def columns_of_new(item: MemoryIn) -> dict[str, Any]:
    """A new memory's checked columns (strings first: no NUL or lone surrogate)."""
    check_strings(item)
    return columns_of(item)
