"""Set-based batch writes (service.write.bulk) give what writing item by item gives.

Each case writes one batch twice into two stores that start alike — once by
``engine.apply_in`` (set-based when it can be), once item by item (``rules.write``, the
path the single write has always taken) — and compares what each item answered and what
each store then holds, memory ids aside.
"""

from __future__ import annotations

import random
from typing import Any

import asyncpg
import msgspec
import pytest

from service.http.errors import api_error_of
from service.problems import Problem
from service.queries import keys
from service.write import engine, rules
from service.write.items import Batch, MemoryIn
from tests.helpers import ADMIN, BOOTSTRAP_KEY, Client

TEXTS = ["Alice drinks oat milk.", "Bob moved to Lisbon.", "The cat is called Miso.",
         "Carol runs on Sundays.", "Dan is allergic to peanuts.", "Eve studies Greek."]  # fmt: skip
REFS = ["r1", "r2", "r3", "r4"]

# What an answer or a stored memory is, without its ids and times.
FIELDS = ("text", "scope", "speaker", "proof_count", "category", "importance", "provider",
          "status", "tier", "fact_type", "entity_refs", "metadata", "event_date")  # fmt: skip


def shape(memory: Any, ids: dict[str, int]) -> tuple[Any, ...]:
    ref = memory.provider_ref if memory.provider_ref != memory.id else "<own id>"
    return (ids.setdefault(memory.id, len(ids)), ref, *(getattr(memory, f) for f in FIELDS))


async def new_store(client: Client, name: str) -> str:
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": name}, headers=ADMIN)
    store: str = (await resp.json())["id"]
    resp = await client.post(
        f"/api/v1/stores/{store}/speakers", json={"name": "Sam"}, headers=ADMIN
    )
    assert resp.status == 201
    return store


async def write(
    conn: asyncpg.Connection, store: str, batch: list[dict[str, Any]], *, set_based: bool
) -> list[rules.Written] | str:
    """The batch's answers, or the error it was refused with (nothing is kept then)."""
    principal = await keys.authenticate(conn, BOOTSTRAP_KEY)
    assert principal is not None
    checked = Batch([], batch=True)  # as a body is checked: up to the first refused item
    for i, item in enumerate(batch):
        if not checked.add(msgspec.convert({**item, "store": store}, MemoryIn), f"memories[{i}]"):
            break
    ctx = rules.WriteContext(principal)
    try:
        async with conn.transaction():
            if set_based:  # the engine: set-based where the items allow it
                return await engine.apply_in(conn, ctx, checked)
            await rules.lock_batch(conn, ctx, checked.items)
            written = [
                await rules.write(conn, ctx, i, label=n)
                for i, n in zip(checked.items, checked.labels, strict=True)
            ]
            checked.raise_refused()
            return written
    except Problem as exc:
        return f"{api_error_of(exc).status} {exc.message}"


async def contents(conn: asyncpg.Connection, store: str) -> list[tuple[Any, ...]]:
    rows = await conn.fetch(
        "SELECT m.*, (SELECT count(*) FROM memory_versions v WHERE v.memory_id = m.id) AS n"
        " FROM memories m WHERE m.store_id = $1", store
    )  # fmt: skip
    found = [
        (r["n"], *(r[f] for f in FIELDS), r["provider_ref"] if r["provider_ref"] != r["id"] else "")
        for r in rows
    ]
    return sorted(found, key=repr)


async def compare(
    client: Client, conn: asyncpg.Connection, name: str,
    before: list[dict[str, Any]], batch: list[dict[str, Any]],
) -> list[rules.Written] | str:  # fmt: skip
    """Writes ``before`` then ``batch`` into two fresh stores, one each way; asserts the
    two agree and returns the set-based answers."""
    fast, slow = await new_store(client, f"{name}-a"), await new_store(client, f"{name}-b")
    for store in (fast, slow):
        for item in before:
            assert not isinstance(await write(conn, store, [item], set_based=False), str)
    got = await write(conn, fast, batch, set_based=True)
    want = await write(conn, slow, batch, set_based=False)
    if isinstance(want, str):
        assert got == want.replace(slow, fast).replace(f"{name}-b", f"{name}-a")
    else:
        assert not isinstance(got, str), got
        a_ids: dict[str, int] = {}
        b_ids: dict[str, int] = {}
        assert [(w.created, w.deduplicated, w.upserted, shape(w.memory, a_ids)) for w in got] == [
            (w.created, w.deduplicated, w.upserted, shape(w.memory, b_ids)) for w in want
        ]
    assert await contents(conn, fast) == await contents(conn, slow)
    return got


def random_item(rng: random.Random) -> dict[str, Any]:
    item: dict[str, Any] = {"text": rng.choice(TEXTS)}
    if rng.random() < 0.3:
        item["providerRef"] = rng.choice(REFS)
        if rng.random() < 0.2:
            del item["text"]
            item["category"] = rng.choice(["food", "places"])
    if rng.random() < 0.3:
        item["scope"] = rng.choice(["workspace", "room:kitchen"])
    if rng.random() < 0.3:
        item["speaker"] = rng.choice(["me", "Sam", None])
    if rng.random() < 0.2:
        item["importance"] = rng.choice([0.1, 0.9])
    if rng.random() < 0.1:
        item["speaker"] = "Nobody"  # not registered: the batch is refused
    if rng.random() < 0.05:
        item["scope"] = "nowhere"  # invalid
    return item


async def test_random_batches_agree_with_item_by_item(
    client: Client, conn: asyncpg.Connection
) -> None:
    rng = random.Random(20261201)
    outcomes: set[str] = set()
    for case in range(60):
        before = [random_item(rng) for _ in range(rng.randint(0, 4))]
        before = [i for i in before if i.get("speaker") != "Nobody" and i.get("scope") != "nowhere"]
        before = [i for i in before if "text" in i]
        size = rng.randint(1, 6)
        if case % 2:  # distinct texts and references: the set-based path applies
            texts, refs = rng.sample(TEXTS, size), rng.sample(REFS, min(size, len(REFS)))
            batch = [random_item(rng) for _ in range(size)]
            for i, item in enumerate(batch):
                if "text" in item:
                    item["text"] = texts[i]
                if "providerRef" in item:
                    item["providerRef"] = refs[i % len(refs)]
        else:
            batch = [random_item(rng) for _ in range(size)]
        got = await compare(client, conn, f"case{case}", before, batch)
        if isinstance(got, str):
            outcomes.add("refused")
        else:
            outcomes |= {k for w in got for k in ("created", "deduplicated", "upserted")
                         if getattr(w, k)}  # fmt: skip
    # The cases reach every outcome, so the comparison above covered each.
    assert outcomes == {"created", "deduplicated", "upserted", "refused"}


@pytest.mark.parametrize(
    ("before", "batch"),
    [
        # A duplicate of a stored memory, and a new one beside it.
        ([{"text": TEXTS[0]}], [{"text": TEXTS[0]}, {"text": TEXTS[1]}]),
        # One text twice in a batch: the second dedupes against the first.
        ([], [{"text": TEXTS[0]}, {"text": TEXTS[0]}]),
        # A sync identity twice: the second upserts the first.
        ([], [{"text": TEXTS[0], "providerRef": "r1"}, {"text": TEXTS[1], "providerRef": "r1"}]),
        # An upsert that makes a stored memory a duplicate of a later item's text.
        (
            [{"text": TEXTS[0], "providerRef": "r1", "scope": "room:kitchen"}],
            [{"providerRef": "r1", "scope": "workspace"}, {"text": TEXTS[0]}],
        ),
        # A synced memory, then a plain write of the same text: it dedupes against it.
        ([], [{"text": TEXTS[2], "providerRef": "r2"}, {"text": TEXTS[2]}]),
        # A re-sync that changes nothing beside a new memory.
        (
            [{"text": TEXTS[0], "providerRef": "r1"}],
            [{"text": TEXTS[0], "providerRef": "r1"}, {"text": TEXTS[1]}],
        ),
        # A reference nobody holds, without text: refused.
        ([], [{"text": TEXTS[0]}, {"providerRef": "r9", "category": "x"}]),
        # The first refused item decides: a bad scope after an unregistered speaker.
        ([], [{"text": TEXTS[0], "speaker": "Nobody"}, {"text": TEXTS[1], "scope": "nowhere"}]),
    ],
)
async def test_batches_whose_items_meet_agree_with_item_by_item(
    client: Client, conn: asyncpg.Connection,
    before: list[dict[str, Any]], batch: list[dict[str, Any]],
) -> None:  # fmt: skip
    await compare(client, conn, "meet", before, batch)


async def test_a_batch_of_new_memories_takes_a_few_statements_whatever_its_size(
    client: Client, conn: asyncpg.Connection
) -> None:
    store = await new_store(client, "many")
    await write(conn, store, [{"text": "warm up"}], set_based=True)  # the key's first use
    counted: list[str] = []

    def count(record: asyncpg.connection.LoggedQuery) -> None:
        counted.append(record.query)

    conn.add_query_logger(count)
    batch = [{"text": f"note {i}", "speaker": "Sam", "providerRef": f"n{i}"} for i in range(100)]
    got = await write(conn, store, batch, set_based=True)
    conn.remove_query_logger(count)
    assert not isinstance(got, str) and all(w.created for w in got)
    # authenticate, begin, store, speakers, locks, holders, duplicates (none asked: none
    # run), insert with versions, commit: not one per item.
    assert len(counted) <= 9, counted
    assert await conn.fetchval(
        "SELECT count(*) FROM memory_versions v JOIN memories m ON m.id = v.memory_id"
        " WHERE m.store_id = $1", store
    ) == 101  # fmt: skip
