"""How memories look on the wire (camelCase faces: write API, browse)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from service.queries.memories import Memory
from service.times import iso, iso_or_none


class Browsed(Protocol):
    """What the browse object shows: a stored memory, or a row of a browse window
    (``service.queries.browse.Row``, whose text is absent for a hidden observation)."""

    @property
    def id(self) -> str: ...
    @property
    def text(self) -> str | None: ...
    @property
    def scope(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def fact_type(self) -> str | None: ...
    @property
    def status(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def provider_ref(self) -> str: ...
    @property
    def entity_refs(self) -> list[str]: ...
    @property
    def proof_count(self) -> int | None: ...
    @property
    def first_seen_at(self) -> datetime: ...
    @property
    def last_used_at(self) -> datetime: ...


def browse_object(m: Browsed) -> dict[str, Any]:
    """The seed's Memory Object, field for field."""
    return {
        "id": m.id,
        "text": m.text,
        "scope": m.scope,
        "tier": m.tier,
        "factType": m.fact_type,
        "status": m.status,
        "provider": m.provider,
        "providerRef": m.provider_ref,
        "entityRefs": m.entity_refs,
        "proofCount": m.proof_count,
        "firstSeenAt": iso(m.first_seen_at),
        "lastUsedAt": iso(m.last_used_at),
    }


def memory_object(m: Memory) -> dict[str, Any]:
    """The write API's memory: the browse object plus what a writer set (SPEC §8)."""
    return {
        **browse_object(m),
        "store": m.store_id,
        "speaker": m.speaker,
        "eventDate": iso_or_none(m.event_date),
        "importance": m.importance,
        "category": m.category,
        "supersededBy": m.superseded_by,
        "path": m.path,
        "metadata": m.metadata,
        "contentSha256": m.content_sha256,
        "embeddingStatus": m.embedding_status,
    }


# The wire fields each column a write sets shows (the write API's names).
WIRE_FIELDS = {
    "text": ("text", "contentSha256"),
    "scope": ("scope",),
    "tier": ("tier",),
    "fact_type": ("factType",),
    "status": ("status",),
    "provider": ("provider",),
    "provider_ref": ("providerRef",),
    "entity_refs": ("entityRefs",),
    "proof_count": ("proofCount",),
    "first_seen_at": ("firstSeenAt",),
    "last_used_at": ("lastUsedAt",),
    "speaker": ("speaker",),
    "event_date": ("eventDate",),
    "importance": ("importance",),
    "category": ("category",),
    "path": ("path",),
    "metadata": ("metadata",),
    "store": ("store",),  # the store a write named (``DEDUPED`` and ``written_answer``)
}
# What every answer to a write carries, whoever asks: which memory, and what it is now.
RECEIPT_FIELDS = ("id", "status", "deduplicated", "upserted")


def receipt(full: dict[str, Any], wrote: Iterable[str]) -> dict[str, Any]:
    """``full`` cut down to what a key that may write but not read may see: the memory's
    id and status, and the fields of the columns it ``wrote`` (their value is then
    what it sent). Nothing else that was stored: not the text, not a field, not a count."""
    shown = set(RECEIPT_FIELDS)
    for column in wrote:
        shown.update(WIRE_FIELDS.get(column, ()))
    return {k: v for k, v in full.items() if k in shown}
