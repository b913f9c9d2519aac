"""Retention (archive expired and idle transitory memories), import/export, reembed."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from embeddings.worker import requeue
from service.cli import REEMBED_WAIT_S
from service.queries import memories as q
from tests.helpers import ADMIN, Client, wait_for


async def write(client: Client, body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post("/api/v1/memories", json=body, headers=ADMIN)
    assert resp.status in (200, 201), await resp.text()
    out: dict[str, Any] = await resp.json()
    return out


def mneme(
    db_url: str, *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env["MNEME_DATABASE_URL"] = db_url
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env=env, input=stdin, capture_output=True, timeout=180, check=False,
    )  # fmt: skip


async def test_retention_archives_expired_and_idle_transitory_memories(
    client: Client, conn: asyncpg.Connection
) -> None:
    expired = await write(client, {"text": "flash sale ends", "expiresAt": "2020-01-01T00:00:00Z"})
    future = await write(client, {"text": "renewal due", "expiresAt": "2999-01-01T00:00:00Z"})
    idle = await write(
        client,
        {
            "text": "passing remark",
            "transitory": True,
            "lastUsedAt": "2020-01-01T00:00:00Z",
            "firstSeenAt": "2020-01-01T00:00:00Z",
        },
    )
    fresh = await write(client, {"text": "fresh remark", "transitory": True})
    old_but_used = await write(
        client,
        {"text": "old remark a search returned today", "transitory": True,
         "lastUsedAt": "2020-01-01T00:00:00Z", "firstSeenAt": "2020-01-01T00:00:00Z"},
    )  # fmt: skip
    await conn.execute(  # as a search's stamp records it
        "INSERT INTO memory_uses SELECT workspace_id, id, now() FROM memories WHERE id = $1",
        old_but_used["id"],
    )
    lasting = await write(client, {"text": "lasting fact", "firstSeenAt": "2020-01-01T00:00:00Z"})

    async with conn.transaction():
        archived = await q.archive_due(conn, transitory_idle_s=30 * 24 * 3600)
    assert {m.id for _, m in archived} == {expired["id"], idle["id"]}
    status = {r["id"]: r["status"] for r in await conn.fetch("SELECT id, status FROM memories")}
    assert status[expired["id"]] == status[idle["id"]] == "archived"
    assert status[future["id"]] == status[fresh["id"]] == status[lasting["id"]] == "active"
    assert status[old_but_used["id"]] == "active"
    # Archived is recoverable, and a restore holds: what archived it is lifted (the past
    # expiry cleared; the transitory one used now), so the next pass leaves both alone.
    for memory in (idle, expired):
        resp = await client.patch(
            f"/api/v1/memories/{memory['id']}", json={"status": "active"}, headers=ADMIN
        )
        assert (await resp.json())["status"] == "active"
    expiry = "SELECT expires_at FROM memories WHERE id = $1"
    assert await conn.fetchval(expiry, expired["id"]) is None
    async with conn.transaction():
        assert await q.archive_due(conn, transitory_idle_s=30 * 24 * 3600) == []
    # A restore that sets its own expiry keeps it (here: one already past, archived again).
    resp = await client.patch(
        f"/api/v1/memories/{expired['id']}",
        json={"status": "archived"}, headers=ADMIN,
    )  # fmt: skip
    resp = await client.patch(
        f"/api/v1/memories/{expired['id']}",
        json={"status": "active", "expiresAt": "2021-01-01T00:00:00Z"}, headers=ADMIN,
    )  # fmt: skip
    assert resp.status == 200 and (await conn.fetchval(expiry, expired["id"])).year == 2021
    async with conn.transaction():
        assert [m.id for _, m in await q.archive_due(conn, 30 * 24 * 3600)] == [expired["id"]]


async def test_janitor_runs_retention_with_a_version(
    make_client: Any, settings: Any, conn: asyncpg.Connection
) -> None:

    client = await make_client(settings.with_overrides(retention_interval_s=1.0))
    expired = await write(client, {"text": "gone soon", "expiresAt": "2020-01-01T00:00:00Z"})

    async def archived() -> bool:
        status = await conn.fetchval("SELECT status FROM memories WHERE id = $1", expired["id"])
        return bool(status == "archived")

    await wait_for(archived, 30, "the janitor archiving the expired memory")
    versions = (
        await (await client.get(f"/api/v1/memories/{expired['id']}/versions", headers=ADMIN)).json()
    )["data"]
    newest = versions[0]
    assert (newest["operation"], newest["status"], newest["actor"]) == (
        "modified",
        "archived",
        "retention",
    )


async def test_export_then_import_round_trips_a_store(
    client: Client, db_url: str, tmp_path: Path, conn: asyncpg.Connection
) -> None:
    await client.post("/api/v1/stores/default/speakers", json={"name": "Caroline"}, headers=ADMIN)
    png = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAA="
    await write(
        client,
        {
            "text": "I like hiking",
            "speaker": "Caroline",
            "eventDate": "2023-05-08T13:56:00Z",
            "metadata": {"session": "1"},
            "importance": 0.7,
            "factType": "experience",
        },
    )
    await write(client, {"text": "core file", "path": "notes/core.md", "tier": "core"})
    await write(client, {"text": "a picture", "image": {"data": png, "mimeType": "image/png"}})
    deleted = await write(client, {"text": "tombstone"})
    await client.delete(f"/api/v1/memories/{deleted['id']}", headers=ADMIN)  # fmt: skip

    out = tmp_path / "export.jsonl"
    result = mneme(db_url, "export", "--store", "default", "--output", str(out))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["text"] for line in lines] == ["I like hiking", "core file", "a picture"]
    assert lines[0]["speaker"] == "Caroline" and lines[0]["metadata"] == {"session": "1"}
    assert lines[2]["image"] == {"data": png, "mimeType": "image/png"}

    # Into a fresh store, through the same write rules: speakers must exist there.
    await conn.execute(
        "INSERT INTO stores (workspace_id, id, name) "
        "SELECT workspace_id, 'memstore_copy', 'copy' FROM stores LIMIT 1"
    )
    refused = mneme(db_url, "import", str(out), "--store", "copy")
    assert refused.returncode == 1 and b"line 1" in refused.stderr and b"Caroline" in refused.stderr
    done = mneme(db_url, "import", str(out), "--store", "copy", "--create-speakers")
    assert done.returncode == 0, done.stderr
    assert b"created 3" in done.stderr
    copied = await conn.fetch(
        "SELECT text, speaker, path, tier, media_type, importance, fact_type, embedding_status "
        "FROM memories WHERE store_id = 'memstore_copy' ORDER BY created_at, id"
    )
    assert [(r["text"], r["speaker"], r["path"], r["tier"]) for r in copied] == [
        ("I like hiking", "Caroline", None, "hindsight"),
        ("core file", None, "notes/core.md", "core"),
        ("a picture", None, None, "hindsight"),
    ]
    assert copied[0]["importance"] == 0.7 and copied[0]["fact_type"] == "experience"
    assert copied[2]["media_type"] == "image/png"
    assert {r["embedding_status"] for r in copied} == {"pending"}
    # Importing the same file again updates in place (providerRef identity): no copies.
    again = mneme(db_url, "import", str(out), "--store", "copy")
    assert again.returncode == 0 and b"upserted 3" in again.stderr
    assert (
        await conn.fetchval("SELECT count(*) FROM memories WHERE store_id = 'memstore_copy'") == 3
    )


async def test_import_refuses_a_bad_line_naming_it(
    client: Client, db_url: str, tmp_path: Path, conn: asyncpg.Connection
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n\n{"text": 5}\n')
    result = mneme(db_url, "import", str(path))
    assert result.returncode == 1
    assert b"line 3" in result.stderr and b"nothing was imported" in result.stderr
    # --create-speakers registers names by the rules POST .../speakers keeps.
    path.write_text('{"text": "a"}\n{"text": "b", "speaker": " Padded"}\n')
    result = mneme(db_url, "import", str(path), "--create-speakers")
    assert result.returncode == 1 and b"line 2" in result.stderr, result.stderr
    assert b"leading or trailing spaces" in result.stderr
    assert await conn.fetchval("SELECT count(*) FROM speakers WHERE name = ' Padded'") == 0
    # A refusal past the first batch (500 lines) says what stayed imported.
    path.write_text("".join(f'{{"text": "bulk {i}"}}\n' for i in range(501)) + '{"text": 5}\n')
    result = mneme(db_url, "import", str(path))
    assert result.returncode == 1 and b"line 502" in result.stderr
    assert b"lines 1-500 were imported, nothing after them" in result.stderr
    assert await conn.fetchval("SELECT count(*) FROM memories WHERE text LIKE 'bulk %'") == 500


async def test_worker_once_and_reembed(
    client: Client, db_url: str, conn: asyncpg.Connection
) -> None:
    await write(client, {"text": "embed me"})
    await write(client, {"text": "me too"})
    result = mneme(db_url, "worker", "--once")
    assert result.returncode == 0, result.stderr
    assert (
        await conn.fetchval("SELECT count(*) FROM memories WHERE embedding_status = 'ready'") == 2
    )
    # Rows of another model are re-encoded; rows of this one are left alone.
    await conn.execute("UPDATE memories SET embedding_model = 'old-model' WHERE text = 'me too'")
    result = mneme(db_url, "reembed")
    assert result.returncode == 0, result.stderr
    assert b"queued 1 memories" in result.stderr
    models = {
        r["text"]: r["embedding_model"]
        for r in await conn.fetch("SELECT text, embedding_model FROM memories")
    }
    assert models == {"embed me": "all-MiniLM-L6-v2", "me too": "all-MiniLM-L6-v2"}
    result = mneme(db_url, "reembed", "--all")
    assert b"queued 2 memories" in result.stderr
    # A re-queued row another worker holds (`serve`'s, say) is waited for, not left
    # behind: reembed ends once every re-queued row is embedded, not once it finds nothing
    # to claim.
    await conn.execute(
        "UPDATE memories SET embedding_status = 'pending', embedding_model = 'old-model',"
        " embedding_background = true, embedding_lease_until = now() + interval '1 hour'"
        " WHERE text = 'me too'"
    )
    generation = await conn.fetchval(
        "SELECT embedding_generation FROM memories WHERE text = 'embed me'"
    )
    running = asyncio.create_task(asyncio.to_thread(mneme, db_url, "reembed", "--all"))
    while await conn.fetchval(
        "SELECT embedding_generation = $1 OR embedding_status = 'pending'"
        " FROM memories WHERE text = 'embed me'",
        generation,
    ):  # reembed has queued and embedded the row free to claim
        assert not running.done(), running.result().stderr
        await asyncio.sleep(0.1)
    await asyncio.sleep(2 * REEMBED_WAIT_S)
    assert not running.done()  # it waits for the leased row ...
    await conn.execute("UPDATE memories SET embedding_lease_until = NULL")  # ... given up
    result = await running
    assert result.returncode == 0, result.stderr
    assert b"queued 1 memories" in result.stderr
    row = await conn.fetchrow("SELECT * FROM memories WHERE text = 'me too'")
    assert (row["embedding_status"], row["embedding_model"]) == ("ready", "all-MiniLM-L6-v2")
    # In spans of the table (one statement each), every row visited once.
    await write(client, {"text": "a third"})
    await conn.execute("UPDATE memories SET embedding_model = 'old-model'")
    await conn.execute("UPDATE memories SET embedding_status = 'ready'")
    assert await requeue(conn, "all-MiniLM-L6-v2", everything=False, batch=1) == 3
    assert await requeue(conn, "all-MiniLM-L6-v2", everything=False, batch=2) == 0  # queued


async def test_the_janitor_runs_on_one_replica_at_a_time(
    make_client: Any, settings: Any, conn: asyncpg.Connection
) -> None:
    """Two replicas on one database: one holds the janitor's lease (a row, so it holds
    through a transaction pooler), the other's passes do nothing until it runs out."""
    from service.ops import jobs
    from service.queries import leases

    quiet = settings.with_overrides(retention_interval_s=3600.0)  # one pass each, at start
    first, second = await make_client(quiet), await make_client(quiet)

    async def leased() -> bool:
        return bool(await conn.fetchval("SELECT count(*) FROM leases WHERE name = 'janitor'") == 1)

    await wait_for(leased, 30, "the janitor's lease")
    holder = await conn.fetchval("SELECT holder FROM leases WHERE name = 'janitor'")
    assert holder is not None

    async def spent_window() -> None:
        await conn.execute(
            "INSERT INTO rate_limit_counters VALUES ('ws_spent', now() - interval '1 hour', 1)"
        )

    async def spent_left() -> bool:
        spent = "SELECT count(*) FROM rate_limit_counters WHERE workspace_id = 'ws_spent'"
        return bool(await conn.fetchval(spent))

    await spent_window()
    # Not the holder: nothing done.
    for app in (first.app, second.app):
        assert not await jobs.janitor_pass(app, "another:1", retention=True)
    assert await spent_left()
    # The lease runs out (its holder stopped): the next replica to try takes it over.
    await conn.execute(
        "UPDATE leases SET until = now() - interval '1 second' WHERE name = 'janitor'"
    )
    assert await jobs.janitor_pass(second.app, "another:1", retention=True)
    assert not await spent_left()
    assert await conn.fetchval("SELECT holder FROM leases WHERE name = 'janitor'") == "another:1"
    # The new holder renews it; the old one is refused.
    await spent_window()
    assert not await jobs.janitor_pass(first.app, holder, retention=False)
    assert await spent_left()
    assert await jobs.janitor_pass(second.app, "another:1", retention=False)
    assert not await spent_left()
    # Given up (a replica shutting down does), it is free at once.
    await leases.release(conn, jobs.JANITOR_LEASE, "another:1")
    assert await jobs.janitor_pass(first.app, holder, retention=False)


async def test_an_export_file_is_readable_by_its_owner_alone(
    client: Client, db_url: str, tmp_path: Path
) -> None:
    # The export holds every memory of the store: not for the other users of the machine,
    # whatever the umask, and an existing file left readable by all is narrowed too.
    await write(client, {"text": "Brimblecombe is the vault code."})
    fresh, existing = tmp_path / "fresh.jsonl", tmp_path / "existing.jsonl"
    existing.write_text("old")
    existing.chmod(0o644)
    for out in (fresh, existing):
        result = mneme(db_url, "export", "--store", "default", "-o", str(out))
        assert result.returncode == 0, result.stderr
        assert stat.S_IMODE(out.stat().st_mode) == 0o600, oct(out.stat().st_mode)
        assert out.read_text().startswith('{"') and "Brimblecombe" in out.read_text()


async def test_export_into_a_pipe_closed_early_ends_quietly(client: Client, db_url: str) -> None:
    # `mneme export | head -1`: more than a pipe's buffer, then the reader goes away. It
    # ended in a BrokenPipeError traceback.
    for start in range(0, 2000, 500):
        batch = [{"text": f"note {i}: " + "x" * 200} for i in range(start, start + 500)]
        resp = await client.post("/api/v1/memories", json={"memories": batch}, headers=ADMIN)
        assert resp.status == 200, await resp.text()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env["MNEME_DATABASE_URL"] = db_url
    export = subprocess.Popen(  # noqa: ASYNC220 (its pipes are read in threads)
        [sys.executable, "-m", "service.cli", "export"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert export.stdout is not None and export.stderr is not None
    assert json.loads(export.stdout.readline())["text"].startswith("note ")
    export.stdout.close()
    err = await asyncio.to_thread(export.stderr.read)
    assert await asyncio.to_thread(export.wait, 60) == 0, err
    assert b"Traceback" not in err and b"BrokenPipe" not in err
