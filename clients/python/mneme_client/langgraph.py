"""A LangGraph store on Mneme: ``MnemeStore``, a ``langgraph.store.base.BaseStore``.

``pip install "mneme-client[langgraph]"``. Each item is one path memory of one Mneme
store: namespace ``("users", "alice")`` and key ``"prefs"`` are the path
``users/alice/prefs`` (in each label and the key, ``%`` is written ``%25`` and ``/``
``%2F``, so any string round-trips), the value dict is the memory's text as JSON, and
``created_at`` / ``updated_at`` are Mneme's. Every namespace prefix of an item is one of its
``entity_refs`` (``lg:users``, ``lg:users/alice``), so a search with a query is ranked by
Mneme's search within the prefix, on the server. Exact-key get, overwrite and delete hold,
and a write is read back at once (Mneme commits before it answers).

Differences from LangGraph's ``InMemoryStore``, all of the store's own making: listings
(``search`` without a query, ``list_namespaces``) are in path order, not insertion
order; a query ranks at most 20 results (Mneme's ``max_results``), after which ``offset``
and ``filter`` apply; ``ttl`` and ``index`` are not supported (Mneme embeds every memory).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from mneme_client._errors import ConflictError, NotFoundError
from mneme_client._sync import Mneme
from mneme_client._types import StoreMemory

ENTITY = "lg:"  # the entity_refs prefix naming an item's namespaces
MAX_RANKED = 20  # Mneme's search answers at most 20 memories


def label(text: str) -> str:
    """A namespace label or key as one path segment."""
    return text.replace("%", "%25").replace("/", "%2F")


def unlabel(segment: str) -> str:
    return segment.replace("%2F", "/").replace("%2f", "/").replace("%25", "%")


def path_of(namespace: tuple[str, ...], key: str) -> str:
    return "/".join(label(s) for s in (*namespace, key))


def split(path: str) -> tuple[tuple[str, ...], str]:
    *namespace, key = (unlabel(s) for s in path.split("/"))
    return tuple(namespace), key


def entities(namespace: tuple[str, ...]) -> list[str]:
    return [
        ENTITY + "/".join(label(s) for s in namespace[:n]) for n in range(1, len(namespace) + 1)
    ]


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def item_of(memory: StoreMemory, path: str) -> Item | None:
    """The item a path memory holds; ``None`` for one whose text is not a JSON object
    (a file of the same store written some other way)."""
    namespace, key = split(path)
    try:
        value = json.loads(memory.content or "")
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return Item(
        value=value,
        key=key,
        namespace=namespace,
        created_at=_when(memory.raw["created_at"]),
        updated_at=_when(memory.raw["updated_at"]),
    )


def matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    """LangGraph's match rule: the pattern's labels against the namespace's start
    (prefix) or end (suffix), ``*`` matching any one label."""
    pattern = tuple(condition.path)
    if len(pattern) > len(namespace):
        return False
    part = (
        namespace[: len(pattern)]
        if condition.match_type == "prefix"
        else namespace[-len(pattern) :]
    )
    return all(p == "*" or p == n for p, n in zip(pattern, part, strict=True)) if pattern else True


def namespaces_of(paths: Iterable[str], op: ListNamespacesOp) -> list[tuple[str, ...]]:
    found = {split(p)[0] for p in paths}
    kept = [ns for ns in found if ns and all(matches(c, ns) for c in op.match_conditions or ())]
    if op.max_depth is not None:
        kept = list({ns[: op.max_depth] for ns in kept})
    return sorted(kept)[op.offset : op.offset + op.limit]


def passes(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """LangGraph's filter: exact values, or ``$eq``/``$ne``/``$gt``/``$gte``/``$lt``/``$lte``."""
    for name, wanted in (filter or {}).items():
        have = value.get(name)
        if isinstance(wanted, dict) and wanted and all(k.startswith("$") for k in wanted):
            if not all(_compare(have, op, arg) for op, arg in wanted.items()):
                return False
        elif have != wanted:
            return False
    return True


def _compare(have: Any, op: str, arg: Any) -> bool:
    try:
        return bool(
            {
                "$eq": lambda: have == arg,
                "$ne": lambda: have != arg,
                "$gt": lambda: have > arg,
                "$gte": lambda: have >= arg,
                "$lt": lambda: have < arg,
                "$lte": lambda: have <= arg,
            }[op]()
        )
    except (KeyError, TypeError):
        return False


class MnemeStore(BaseStore):
    """LangGraph's store interface over one Mneme store. ``api_key`` and ``base_url``
    default to ``MNEME_API_KEY`` and ``MNEME_URL``; ``scope`` is given to every write
    (``workspace`` unless set: ``pair:<human>:<agent>`` keeps items between those two)."""

    supports_ttl = False

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        store: str = "default",
        *,
        scope: str | None = None,
    ) -> None:
        self.store = store
        self.scope = scope
        self.client = Mneme(api_key, base_url)

    # --- the blocking side ----------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return [self._one(op) for op in ops]

    def _one(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op.namespace, op.key)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            paths = [m.path for m in self.client.stores.list_memories(self.store, limit=100)]
            return namespaces_of(paths, op)
        raise ValueError(f"Unknown operation type: {type(op)}")

    def _find(self, path: str) -> StoreMemory | None:
        # Listings are in path order, and ``path`` is the least path it prefixes.
        first = next(iter(self.client.stores.list_memories(self.store, path, limit=1)), None)
        return first if first is not None and first.path == path else None

    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        path = path_of(namespace, key)
        found = self._find(path)
        return (
            None if found is None else item_of(self.client.stores.read(self.store, found.id), path)
        )

    def _put(self, op: PutOp) -> None:
        path = path_of(op.namespace, op.key)
        found = self._find(path)
        if op.value is None:
            if found is not None:
                self.client.delete(found.id)
            return
        text = json.dumps(op.value, ensure_ascii=False)
        if found is not None:
            self.client.update(found.id, text=text)
            return
        fields: dict[str, Any] = {
            "store": self.store,
            "path": path,
            "entity_refs": entities(op.namespace),
            "tier": "core",
        }
        if self.scope is not None:
            fields["scope"] = self.scope
        try:
            self.client.add(text, **fields)
        except ConflictError:  # written meanwhile by another writer: overwrite it
            again = self._find(path)
            if again is None:
                raise
            self.client.update(again.id, text=text)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        prefix = "/".join(label(s) for s in op.namespace_prefix)
        if op.query:
            return self._ranked(op, prefix)
        under = prefix + "/" if prefix else None
        out: list[SearchItem] = []
        skipped = 0
        for memory in self.client.stores.list_memories(self.store, under, limit=100):
            item = item_of(self.client.stores.read(self.store, memory.id), memory.path)
            if item is None or not passes(item.value, op.filter):
                continue
            if skipped < op.offset:
                skipped += 1
                continue
            out.append(_search_item(item, None))
            if len(out) == op.limit:
                break
        return out

    def _ranked(self, op: SearchOp, prefix: str) -> list[SearchItem]:
        assert op.query is not None
        options: dict[str, Any] = {"filters": {"entity": ENTITY + prefix}} if prefix else {}
        hits = self.client.search(self.store, op.query, MAX_RANKED, **options)
        ranked: list[SearchItem] = []
        for hit in hits:
            if hit.kind != "memory":
                continue
            try:
                memory = self.client.stores.read(self.store, hit.id)
            except NotFoundError:  # a memory of the store that is not a path memory
                continue
            path = memory.path
            if prefix and not path.startswith(prefix + "/"):
                continue
            item = item_of(memory, path)
            if item is not None and passes(item.value, op.filter):
                ranked.append(_search_item(item, hit.similarity))
        return ranked[op.offset : op.offset + op.limit]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread, off the event loop: one code path, so the ``a…``
        methods answer exactly as the blocking ones."""
        return await asyncio.to_thread(self.batch, list(ops))


def _search_item(item: Item, score: float | None) -> SearchItem:
    return SearchItem(
        namespace=item.namespace,
        key=item.key,
        value=item.value,
        created_at=item.created_at,
        updated_at=item.updated_at,
        score=score,
    )
