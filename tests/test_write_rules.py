"""What every change to memories must do happens in the database (SPEC §9).

Stamping the store's version (which invalidates its cached searches) and waking the
embedding workers are done by triggers on ``memories`` and ``stores`` (0007_trust.sql,
0008_store_versions.sql), so no write path can forget them: each way a memory changes is
tried here against a cached search.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import asyncpg
import pytest

from embeddings.model import SentenceTransformerEmbedder
from embeddings.worker import CHANNEL, Worker
from service.ops import db
from service.queries import memories as q, stores, tenancy
from service.settings import Settings
from service.write import rules
from tests.helpers import ADMIN, Client

SEARCH = "/api/v1/memory/search"
BODY: dict[str, Any] = {"user_id": "default", "query": "oat milk", "max_results": 5,
                        "cache_control": {"type": "ephemeral", "ttl": "1h"}}  # fmt: skip

# The default store's version, as the service reads it (0 before its first stamp).
DEFAULT_VERSION = """
SELECT coalesce((SELECT v.version FROM store_versions v JOIN stores s ON s.id = v.store_id
                 WHERE s.name = 'default'), 0)
"""


async def cache_state(client: Client) -> str:
    resp = await client.post(SEARCH, json=BODY, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    state: str = resp.headers["X-Cache"]
    return state


async def primed(client: Client) -> None:
    """A cached answer that the next identical search hits."""
    await cache_state(client)
    assert await cache_state(client) == "hit"


async def new_memory(client: Client, **fields: Any) -> str:
    resp = await client.post(
        "/api/v1/memories", json={"text": "Alice drinks oat milk.", **fields}, headers=ADMIN
    )
    assert resp.status in (200, 201), await resp.text()
    memory_id: str = (await resp.json())["id"]
    return memory_id


async def test_every_way_a_memory_changes_invalidates_cached_searches(
    client: Client, conn: asyncpg.Connection
) -> None:
    memory = await new_memory(client)
    path_store = (await (await client.get("/api/v1/forward/memory_stores/default",
                                          headers=ADMIN)).json())["id"]  # fmt: skip
    resp = await client.post(
        f"/api/v1/forward/memory_stores/{path_store}/memories",
        json={"path": "notes/milk.md", "content": "oat milk notes"},
        headers=ADMIN,
    )
    path_memory = (await resp.json())["id"]

    async def patch(body: dict[str, Any]) -> None:
        resp = await client.patch(f"/api/v1/memories/{memory}", json=body, headers=ADMIN)
        assert resp.status == 200, await resp.text()

    async def dedupe() -> None:
        await new_memory(client)  # the same text again: proofCount goes up, no new row

    async def upsert() -> None:
        await new_memory(client, provider="crm", providerRef="c1")
        await primed(client)
        await new_memory(client, provider="crm", providerRef="c1", category="drinks")

    async def supersede() -> None:
        await new_memory(client, text="Alice switched to soy milk.", supersedes=memory)

    async def store_face_update() -> None:
        resp = await client.post(
            f"/api/v1/forward/memory_stores/{path_store}/memories/{path_memory}",
            json={"content": "oat milk, barista edition"},
            headers=ADMIN,
        )
        assert resp.status == 200

    async def store_face_delete() -> None:
        resp = await client.delete(
            f"/api/v1/forward/memory_stores/{path_store}/memories/{path_memory}", headers=ADMIN
        )
        assert resp.status == 200

    async def retention() -> None:
        await conn.execute(
            "UPDATE memories SET expires_at = now() - interval '1 minute' WHERE id = $1", memory
        )
        await primed(client)  # setting expires_at was itself a change
        async with conn.transaction():
            assert [m.id for _, m in await q.archive_due(conn, 3600.0)] == [memory]

    async def restore() -> None:
        await patch({"status": "active"})

    async def delete() -> None:
        assert (await client.delete(f"/api/v1/memories/{memory}", headers=ADMIN)).status == 200

    async def purge() -> None:
        resp = await client.delete(f"/api/v1/memories/{memory}?purge=true", headers=ADMIN)
        assert resp.status == 200

    async def direct_sql() -> None:
        # Not through the service at all: the rule is the database's.
        await conn.execute("UPDATE memories SET importance = 0.9 WHERE id = $1", path_memory)

    changes: list[tuple[str, Any]] = [
        ("create", lambda: new_memory(client, text="Bob drinks oat milk too.")),
        ("patch text", lambda: patch({"text": "Alice drinks oat milk lattes."})),
        ("patch category", lambda: patch({"category": "drinks"})),
        ("archive", lambda: patch({"status": "archived"})),
        ("restore", restore),
        ("dedupe", dedupe),
        ("upsert", upsert),
        ("supersede", supersede),
        ("store face update", store_face_update),
        ("direct SQL", direct_sql),
        ("store face delete", store_face_delete),
        ("retention", retention),
        ("delete", delete),
        ("purge", purge),
    ]
    for name, change in changes:
        await primed(client)
        await change()
        assert await cache_state(client) == "write", name


async def test_a_vector_arriving_invalidates_cached_searches_but_wakes_no_worker(
    client: Client, db_url: str, conn: asyncpg.Connection, embedder: SentenceTransformerEmbedder
) -> None:
    # Answered before the vector existed, a cached search would rank without it (and a
    # vector-only model would not find the memory at all) for as long as it lives.
    await new_memory(client)
    await primed(client)
    version = await conn.fetchval(DEFAULT_VERSION)
    heard: list[str] = []
    await conn.add_listener(CHANNEL, lambda *args: heard.append(args[1]))
    pool = await db.create_pool(db_url, Settings(database_url=db_url, pool_min=1, pool_max=2))
    try:
        worker = Worker(pool, embedder)
        claimed = await worker.claim()  # claiming (a lease) changes nothing a reader sees
        assert len(claimed) == 1
        assert await conn.fetchval(DEFAULT_VERSION) == version
        await worker.release([(c.workspace_id, c.id, c.generation) for c in claimed])
        assert await worker.drain() == 1
    finally:
        await pool.close()
    await asyncio.sleep(0.2)
    assert heard == []  # storing a vector does not wake the workers again
    assert await conn.fetchval(DEFAULT_VERSION) != version
    assert await cache_state(client) == "write"


async def test_a_write_wakes_the_workers_when_it_commits(
    client: Client, conn: asyncpg.Connection
) -> None:
    heard: asyncio.Queue[str] = asyncio.Queue()
    await conn.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[1]))
    memory = await new_memory(client)
    await asyncio.wait_for(heard.get(), timeout=5)
    # A change to what is embedded queues it again, and wakes them again.
    resp = await client.patch(
        f"/api/v1/memories/{memory}", json={"text": "Alice drinks soy milk."}, headers=ADMIN
    )
    assert resp.status == 200
    await asyncio.wait_for(heard.get(), timeout=5)


async def test_a_rolled_back_write_changes_no_version(
    client: Client, conn: asyncpg.Connection
) -> None:
    await new_memory(client)
    await primed(client)
    with pytest.raises(asyncpg.CheckViolationError):
        async with conn.transaction():
            await conn.execute("UPDATE memories SET importance = 0.7")
            await conn.execute("UPDATE memories SET importance = 7")
    assert await cache_state(client) == "hit"


async def test_the_change_trigger_watches_every_column_but_the_workers(
    conn: asyncpg.Connection,
) -> None:
    # Columns that may change without a reader seeing a difference: identity, the
    # worker's claim state and what is derived from another watched column (the vector
    # and its model, and whether it has chunks, come with embedding_status) or bookkeeping.
    # The token count is watched (0010): search snapshots bill it. written_after is set
    # once, as the row is inserted (0013), like created_at.
    unwatched = {
        "workspace_id", "id", "created_at", "updated_at", "search_tsv",
        "embedding", "embedding_model", "embedding_generation", "embedding_attempts",
        "embedding_error", "embedding_lease_until", "embedding_background", "chunked",
        "written_after",
    }  # fmt: skip
    columns = {
        r["column_name"]
        for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'memories'"
        )
    }
    definition = await conn.fetchval(
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'memories_changed_update'"
    )
    for column in columns - unwatched:
        assert re.search(rf"\bold\.{column}\b", definition, re.IGNORECASE), column
        assert re.search(rf"\bnew\.{column}\b", definition, re.IGNORECASE), column
    assert unwatched <= columns  # the list above names real columns


async def test_concurrent_writers_of_shared_texts_and_stores_never_deadlock(
    client: Client,
) -> None:
    # Each writer takes a lock per duplicate text it writes (advisory) while it writes;
    # the store's version is stamped at commit. Were the stamp taken at the first write,
    # a batch [A, X] and a lone X would each wait for the other's lock.
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "s2"}, headers=ADMIN)
    other = (await resp.json())["id"]
    texts = [f"shared fact {i}" for i in range(6)]

    async def batch(order: list[int], stores: tuple[str, str]) -> int:
        items = [{"text": texts[i], "store": stores[i % 2]} for i in order]
        resp = await client.post("/api/v1/memories", json={"memories": items}, headers=ADMIN)
        return resp.status

    async def lone(i: int) -> int:
        resp = await client.post("/api/v1/memories", json={"text": texts[i]}, headers=ADMIN)
        return resp.status

    for _ in range(3):
        statuses = await asyncio.gather(
            batch([0, 1, 2, 3, 4, 5], ("default", other)),
            batch([5, 4, 3, 2, 1, 0], (other, "default")),
            batch([2, 0, 4, 1, 5, 3], ("default", other)),
            *(lone(i) for i in range(6)),
        )
        assert set(statuses) <= {200, 201}, statuses


async def race_a_store_delete(client: Client, round_: int) -> list[int]:
    """Writes, a PATCH, a store update, a speaker and cached searches racing a forced
    delete of their store."""
    resp = await client.post(
        "/api/v1/forward/memory_stores", json={"name": f"doomed{round_}"}, headers=ADMIN
    )
    store = (await resp.json())["id"]
    first = await new_memory(client, store=store, text=f"seed {round_}")

    async def write(i: int) -> int:
        body = {"text": f"note {round_}.{i}", "store": store}
        return (await client.post("/api/v1/memories", json=body, headers=ADMIN)).status

    async def patch() -> int:
        body = {"category": "late"}
        return (await client.patch(f"/api/v1/memories/{first}", json=body, headers=ADMIN)).status

    async def update() -> int:
        url, body = f"/api/v1/forward/memory_stores/{store}", {"description": "going"}
        return (await client.post(url, json=body, headers=ADMIN)).status

    async def speaker() -> int:
        url = f"/api/v1/stores/{store}/speakers"
        return (await client.post(url, json={"name": f"Sam{round_}"}, headers=ADMIN)).status

    async def search() -> int:
        return (await client.post(SEARCH, json={**BODY, "user_id": store}, headers=ADMIN)).status

    async def delete() -> int:
        await asyncio.sleep(0.005 * round_)
        url = f"/api/v1/forward/memory_stores/{store}?force=true"
        return (await client.delete(url, headers=ADMIN)).status

    others = (patch(), update(), speaker(), search(), search())
    return list(await asyncio.gather(*(write(i) for i in range(6)), *others, delete()))


async def test_deleting_a_store_while_it_is_written_never_deadlocks(client: Client) -> None:
    # A write holds a key-share lock on its store's row (the memory's foreign key) until
    # commit, when it stamps the store's version; a delete queues for that row. With the
    # version kept on the store's row, the two waited for each other (found by fuzzing).
    for round_ in range(6):
        statuses = await race_a_store_delete(client, round_)
        # Before or after the delete: done, or the store is gone (404); never a 5xx.
        assert all(s < 500 for s in statuses), statuses
        assert statuses[-1] == 200


async def test_a_deleted_stores_version_is_pruned_by_the_janitor(
    client: Client, conn: asyncpg.Connection
) -> None:
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "brief"}, headers=ADMIN)
    store = (await resp.json())["id"]
    await new_memory(client, store=store)
    await new_memory(client)
    stamped = "SELECT store_id FROM store_versions ORDER BY store_id"
    kept = [r["store_id"] for r in await conn.fetch(stamped) if r["store_id"] != store]
    assert store in [r["store_id"] for r in await conn.fetch(stamped)]
    url = f"/api/v1/forward/memory_stores/{store}?force=true"
    assert (await client.delete(url, headers=ADMIN)).status == 200
    await stores.prune_versions(conn)
    assert [r["store_id"] for r in await conn.fetch(stamped)] == kept
    assert kept  # the default store keeps its version


async def test_write_defaults_are_the_schemas(conn: asyncpg.Connection) -> None:
    """The defaults the write path applies before the database does (the duplicate rule
    compares scopes, a sync identity names its provider) are the columns' own."""
    defaults = dict(await conn.fetch(
        "SELECT column_name, column_default FROM information_schema.columns"
        " WHERE table_name = 'memories' AND column_name IN ('scope', 'provider')"
    ))  # fmt: skip
    assert defaults == {"scope": f"'{rules.DEFAULT_SCOPE}'::text",
                        "provider": f"'{rules.DEFAULT_PROVIDER}'::text"}  # fmt: skip
    workspace = await tenancy.create_workspace(conn, "defaults", "free")
    assert workspace is not None
    store = await q.resolve_store(conn, workspace.id, rules.DEFAULT_STORE)
    assert store is not None and store.name == rules.DEFAULT_STORE
