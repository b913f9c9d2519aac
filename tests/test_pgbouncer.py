"""MNEME_DATABASE_POOLER=transaction: the service through Debian's PgBouncer (1.18) in
transaction pooling mode (issue 15). Two PgBouncer server connections serve every pool of
the service, so each transaction lands on whichever is free: nothing may rely on a
statement prepared earlier or a setting of the session."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from service.settings import Settings
from tests.conftest import PgServer
from tests.helpers import ADMIN, Client, search
from tests.pgbouncer import PgBouncer, pgbouncer_for

pytestmark = pytest.mark.slow


@pytest.fixture
def bouncer(pg_server: PgServer) -> Iterator[PgBouncer]:
    with pgbouncer_for(pg_server.embedded, pool_size=2) as b:
        yield b


async def test_the_service_works_through_a_transaction_pooler(
    make_client: Any, settings: Settings, db_url: str, bouncer: PgBouncer
) -> None:
    pooled_url = bouncer.uri_for(urlsplit(db_url).path.lstrip("/"))
    client: Client = await make_client(settings.with_overrides(
        database_url=pooled_url, database_pooler="transaction", direct_database_url=db_url,
        worker=True, pool_max=6,
    ))  # fmt: skip

    async def ok(method: str, url: str, status: int = 200, **kw: Any) -> Any:
        resp = await client.request(method, url, headers=ADMIN, **kw)
        assert resp.status == status, (url, resp.status, await resp.text())
        return await resp.json() if resp.status != 204 else None

    batch = {"memories": [{"text": f"The ferry to island {i} leaves at {i} am."}
                          for i in range(30)]}  # fmt: skip
    await ok("POST", "/api/v1/memories", json=batch)
    singles = [ok("POST", "/api/v1/memories", 201, json={"text": f"Dock {i} is closed today."})
               for i in range(10)]  # fmt: skip
    searches = [search(client, {"user_id": "default", "query": f"ferry island {i}"})
                for i in range(20)]  # fmt: skip
    browses = [ok("GET", "/api/v1/memories?limit=5") for _ in range(10)]
    await asyncio.gather(*singles, *searches, *browses)  # all at once, over two connections
    store = await ok("POST", "/api/v1/forward/memory_stores", 201, json={"name": "harbour"})
    await ok("POST", "/api/v1/forward/memory_stores/harbour/memories", 201,
             json={"path": "notes/tides.md", "content": "High tide at noon."})  # fmt: skip
    listing = await ok("GET", "/api/v1/forward/memory_stores/harbour/memories")
    assert [m["path"] for m in listing["data"]] == ["notes/tides.md"]
    assert store["name"] == "harbour"

    # The worker (LISTENing on the direct URL) embeds everything; searches rank by vector.
    for _ in range(300):
        ready = await (await client.get("/readyz")).json()
        if ready["embeddingQueue"] == 0:
            break
        await asyncio.sleep(0.1)
    assert ready["embeddingQueue"] == 0
    found = await search(client, {"user_id": "default", "query": "boat departure time",
                                  "max_results": 5})  # fmt: skip
    assert found["memories"] and all(m["similarity"] > 0 for m in found["memories"])

    # The settings the pools could not send are the role's defaults: a pooled connection
    # has them.
    conn = await asyncpg.connect(pooled_url, statement_cache_size=0)
    try:
        assert await conn.fetchval("SHOW hnsw.iterative_scan") == "relaxed_order"
    finally:
        await conn.close()
