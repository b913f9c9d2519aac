"""What the API answers, as small typed records; ``raw`` keeps the whole JSON object."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Json = dict[str, Any]


@dataclass(frozen=True)
class Memory:
    """A memory of the write API or browse (browse items carry no store, speaker or
    embedding status: those are ``None``)."""

    id: str
    text: str
    store: str | None
    scope: str
    fact_type: str | None
    speaker: str | None
    embedding_status: str | None
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, raw: Json) -> Memory:
        return cls(
            raw["id"], raw["text"], raw.get("store"), raw["scope"], raw.get("factType"),
            raw.get("speaker"), raw.get("embeddingStatus"), raw,
        )  # fmt: skip


@dataclass(frozen=True)
class Version:
    """One entry of a memory's audit trail."""

    id: str
    operation: str
    actor: str | None
    content_sha256: str | None
    path: str | None
    status: str
    created_at: str
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, raw: Json) -> Version:
        return cls(
            raw["id"], raw["operation"], raw.get("actor"), raw.get("content_sha256"),
            raw.get("path"), raw["status"], raw["created_at"], raw,
        )  # fmt: skip


HitKind = Literal["memory", "self", "image"]


@dataclass(frozen=True)
class Hit:
    """A search result: a memory, the agent's own words (``self``) or an image memory.
    Hits come best first; ``similarity`` is not the ranking key."""

    id: str
    content: str
    kind: HitKind
    similarity: float
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, raw: Json, kind: HitKind) -> Hit:
        return cls(raw["id"], raw["content"], kind, float(raw["similarity"]), raw)


@dataclass(frozen=True)
class SearchResult:
    """A whole search answer; ``verify_used`` is ``None`` unless ``verify`` > 0 was sent."""

    memories: list[Hit]
    self_memories: list[Hit]
    images: list[Hit]
    verify_used: int | None
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, raw: Json) -> SearchResult:
        def hits(key: str, kind: HitKind) -> list[Hit]:
            return [Hit.from_json(h, kind) for h in raw.get(key) or []]

        return cls(
            hits("memories", "memory"), hits("self_memories", "self"), hits("images", "image"),
            raw.get("verify_used"), raw,
        )  # fmt: skip


@dataclass(frozen=True)
class Store:
    """A memory store."""

    id: str
    name: str
    description: str
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, raw: Json) -> Store:
        return cls(raw["id"], raw["name"], raw.get("description") or "", raw)


@dataclass(frozen=True)
class StoreMemory:
    """A path-addressed memory of a store; ``content`` is ``None`` in listings."""

    id: str
    path: str
    content: str | None
    content_sha256: str
    metadata: dict[str, str]
    raw: Json = field(repr=False)

    @classmethod
    def from_json(cls, raw: Json) -> StoreMemory:
        return cls(raw["id"], raw["path"], raw.get("content"), raw["content_sha256"],
                   dict(raw.get("metadata") or {}), raw)  # fmt: skip
