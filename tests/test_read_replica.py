"""MNEME_READ_DATABASE_URL: the read faces read from a streaming hot standby, writes go to
the primary (issue 15). With the standby's replay paused, a new memory is written and
acknowledged, readable by id (the primary), and absent from browse, search and the store
listing (the standby) until replay resumes; the search cache never keeps the stale answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from service.settings import Settings
from tests.conftest import PgServer
from tests.helpers import ADMIN, Client, search
from tests.standby import Standby, caught_up, standby_of

pytestmark = pytest.mark.slow  # pyproject.toml: markers


@pytest.fixture(scope="module")
def standby(pg_server: PgServer) -> Iterator[Standby]:
    with standby_of(pg_server.embedded) as s:
        yield s


def database_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


async def test_reads_come_from_the_standby_and_writes_from_the_primary(
    make_client: Any, settings: Settings, db_url: str, standby: Standby
) -> None:
    read_url = standby.uri_for(database_of(db_url))
    await caught_up(db_url, read_url)
    client: Client = await make_client(settings.with_overrides(read_database_url=read_url))

    async def write(path: str, text: str) -> str:
        """A path-addressed memory (the store listing lists those), through the primary."""
        resp = await client.post("/api/v1/forward/memory_stores/default/memories",
                                 json={"path": path, "content": text}, headers=ADMIN)  # fmt: skip
        assert resp.status in (200, 201), await resp.text()
        return str((await resp.json())["id"])

    async def seen() -> dict[str, set[str]]:
        """The memory ids each read face returns."""
        browse = await (await client.get("/api/v1/memories", headers=ADMIN)).json()
        found = await search(client, {"user_id": "default", "query": "lighthouse keeper",
                                      "max_results": 20})  # fmt: skip
        cached = await search(client, {"user_id": "default", "query": "lighthouse keeper",
                                       "max_results": 20,
                                       "cache_control": {"type": "ephemeral"}})  # fmt: skip
        listing = await (await client.get(
            "/api/v1/forward/memory_stores/default/memories", headers=ADMIN)).json()  # fmt: skip
        return {
            "browse": {m["id"] for m in browse["data"]},
            "search": {m["id"] for m in found["memories"]},
            "cached search": {m["id"] for m in cached["memories"]},
            "store listing": {m["id"] for m in listing["data"] if m.get("id")},
        }

    first = await write("keeper/dawn.md", "The lighthouse keeper logs the weather at dawn.")
    await caught_up(db_url, read_url)
    everywhere = await seen()
    assert all(first in ids for ids in everywhere.values()), everywhere

    admin = await asyncpg.connect(read_url)
    try:
        await admin.execute("SELECT pg_wal_replay_pause()")
        second = await write(
            "keeper/spring.md", "The lighthouse keeper repaints the lamp room every spring."
        )
        # Acknowledged, committed on the primary, readable there by id ...
        resp = await client.get(f"/api/v1/memories/{second}", headers=ADMIN)
        assert resp.status == 200
        # ... and not yet on the standby, where the read faces look.
        for face, ids in (await seen()).items():
            assert first in ids and second not in ids, face
        await admin.execute("SELECT pg_wal_replay_resume()")
    finally:
        await admin.close()
    await caught_up(db_url, read_url)
    # Replayed: every face has it, the cached search too (the store's version moved).
    for face, ids in (await seen()).items():
        assert {first, second} <= ids, face
