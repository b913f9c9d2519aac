"""One API request as data, with how to read its answer: built and parsed once, sent by
either client (``Mneme`` does blocking I/O, ``AsyncMneme`` awaits)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import quote

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: Mapping[str, str] | None = None
    json: Any = None  # None: no body
    headers: Mapping[str, str] | None = None
    write: bool = False  # carries an Idempotency-Key, the same on every retry


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing and the call for the next (``None`` on the last)."""

    items: list[T]
    next: Call[Page[T]] | None


class HasId(Protocol):
    @property
    def id(self) -> str: ...


Item = TypeVar("Item", bound=HasId)


def unseen(items: Iterable[Item], seen: set[str]) -> Iterator[Item]:
    """Items whose id no earlier page gave (a listing never yields an id twice)."""
    for item in items:
        if item.id not in seen:
            seen.add(item.id)
            yield item


def seg(value: str) -> str:
    """An id or name as one path segment."""
    return quote(value, safe="")


def done(_: Any) -> None:
    """Parse for calls whose answer the SDK does not return."""
