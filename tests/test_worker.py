"""The embedding worker and the query encoder, with the real model and database."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import numpy as np
import pytest

from embeddings import Chunk, Vectors, document_text
from embeddings.batcher import QueryEncoder
from embeddings.model import SentenceTransformerEmbedder
from embeddings.worker import QueueProbe, Worker, WorkerConfig, queue_state, requeue
from service.ops import db
from service.queries import keys, tenancy
from service.settings import Settings
from tests.helpers import ADMIN, Client, auth


class Recording:
    """The real embedder, noting every text it encodes (and failing on request)."""

    def __init__(self, inner: SentenceTransformerEmbedder, poison: str | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.dimension = inner.dimension
        self.poison = poison
        self.encoded: list[str] = []
        self._lock = threading.Lock()

    def encode_queries(self, texts: Sequence[str]) -> Vectors:
        return self.inner.encode_queries(texts)

    def encode_queries_counted(self, texts: Sequence[str]) -> tuple[Vectors, list[int]]:
        return self.inner.encode_queries_counted(texts)

    def encode_documents(self, texts: Sequence[str]) -> Vectors:
        if self.poison is not None and any(self.poison in t for t in texts):
            raise ValueError("poisoned text")
        with self._lock:
            self.encoded.extend(texts)
        return self.inner.encode_documents(texts)

    def chunk_many(self, texts: Sequence[str]) -> list[list[Chunk]]:
        return self.inner.chunk_many(texts)

    def count_tokens(self, text: str) -> int:
        return self.inner.count_tokens(text)

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        return self.inner.count_tokens_many(texts)


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await db.create_pool(db_url, Settings(database_url=db_url, pool_min=1, pool_max=6))
    yield p
    await p.close()


async def write(client: Client, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    resp = await client.post("/api/v1/memories", json={"memories": items}, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    out: list[dict[str, Any]] = (await resp.json())["memories"]
    return out


async def test_worker_embeds_pending_memories(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    await client.post("/api/v1/stores/default/speakers", json={"name": "Caroline"}, headers=ADMIN)
    written = await write(
        client,
        [{"text": "I went to a LGBTQ support group yesterday", "speaker": "Caroline"},
         {"text": "The deploy runs on Fridays"}],
    )  # fmt: skip
    worker = Worker(pool, embedder)
    assert await worker.drain() == 2
    assert await queue_state(pool) == (0, 0.0)
    rows = await pool.fetch(
        "SELECT id, text, speaker, embedding, embedding_model, embedding_status FROM memories"
    )
    for r in rows:
        assert (r["embedding_status"], r["embedding_model"]) == ("ready", "all-MiniLM-L6-v2")
        expected = embedder.encode_documents([document_text(r["text"], r["speaker"])])[0]
        got = r["embedding"].to_numpy()
        assert np.allclose(got, expected, atol=1e-5)
        assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-4
    status = await (await client.get(f"/api/v1/memories/{written[0]['id']}", headers=ADMIN)).json()
    assert status["embeddingStatus"] == "ready"


async def test_three_workers_embed_every_row_exactly_once(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    texts = [f"memory number {i} about topic {i % 7}" for i in range(300)]
    for start in range(0, len(texts), 100):
        await write(client, [{"text": t} for t in texts[start : start + 100]])
    recording = Recording(embedder)
    workers = [Worker(pool, recording, WorkerConfig(claim_size=16)) for _ in range(3)]
    claimed = await asyncio.gather(*(w.drain() for w in workers))
    assert sum(claimed) == 300
    assert all(n > 0 for n in claimed), claimed  # all three really took part
    assert Counter(recording.encoded) == Counter(texts)  # every text once, none twice
    assert (
        await pool.fetchval("SELECT count(*) FROM memories WHERE embedding_status = 'ready'") == 300
    )


async def test_a_text_edited_mid_batch_is_not_overwritten_with_a_stale_vector(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    [m] = await write(client, [{"text": "first version"}])
    worker = Worker(pool, embedder)
    rows = await worker.claim()
    encoded, failed = worker.encode(rows)
    # Meanwhile the text changes.
    await client.patch(
        f"/api/v1/memories/{m['id']}", json={"text": "second version"}, headers=ADMIN
    )
    assert await worker.store(encoded, failed) == 0
    assert await pool.fetchval("SELECT embedding_status FROM memories") == "pending"
    await worker.drain()
    vector = (await pool.fetchval("SELECT embedding FROM memories")).to_numpy()
    assert np.allclose(vector, embedder.encode_documents(["second version"])[0], atol=1e-5)


async def test_a_failing_text_is_retried_then_marked_failed(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    await write(client, [{"text": "fine one"}, {"text": "POISON pill"}, {"text": "fine two"}])
    worker = Worker(pool, Recording(embedder, poison="POISON"), WorkerConfig(max_attempts=2))
    await worker.drain()
    rows = {r["text"]: r for r in await pool.fetch("SELECT * FROM memories")}
    assert rows["fine one"]["embedding_status"] == "ready"
    assert rows["fine two"]["embedding_status"] == "ready"
    bad = rows["POISON pill"]
    assert (bad["embedding_status"], bad["embedding_attempts"]) == ("pending", 1)
    assert "poisoned text" in bad["embedding_error"]
    # After the backoff it is tried again; at the last attempt it is given up.
    await pool.execute("UPDATE memories SET embedding_lease_until = now() - interval '1 s'")
    await worker.drain()
    bad = await pool.fetchrow("SELECT * FROM memories WHERE text = 'POISON pill'")
    assert (bad["embedding_status"], bad["embedding_attempts"]) == ("failed", 2)
    assert "poisoned text" in bad["embedding_error"]
    got = await pool.fetchval("SELECT id FROM memories WHERE text = 'POISON pill'")
    memory = await (await client.get(f"/api/v1/memories/{got}", headers=ADMIN)).json()
    assert memory["embeddingStatus"] == "failed"


async def test_interrupted_batches_are_not_attempts(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    # Workers killed mid-batch (their leases run out) more often than a text may fail to
    # encode: the text never failed, so it is embedded, not given up.
    [m] = await write(client, [{"text": "a healthy text in a crashing backlog"}])
    worker = Worker(pool, embedder, WorkerConfig(max_attempts=2))
    for _ in range(4):
        assert [r.id for r in await worker.claim()] == [m["id"]]
        await pool.execute("UPDATE memories SET embedding_lease_until = now() - interval '1 s'")
    assert await worker.drain() == 1
    row = await pool.fetchrow("SELECT * FROM memories WHERE id = $1", m["id"])
    assert (row["embedding_status"], row["embedding_attempts"]) == ("ready", 0)


class BadCount(Recording):
    """Fails to count the tokens of a text with ``poison`` in it (outside the model)."""

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        if any("BADCOUNT" in t for t in texts):
            raise ValueError("cannot count")
        return super().count_tokens_many(texts)


async def test_a_failure_outside_the_model_is_charged_to_its_own_row(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    # Not to the batch's first row, and the others are still embedded.
    await write(client, [{"text": "a fine first row"}, {"text": "BADCOUNT second row"}])
    assert await Worker(pool, BadCount(embedder)).drain() == 2
    rows = {r["text"]: r for r in await pool.fetch("SELECT * FROM memories")}
    fine, bad = rows["a fine first row"], rows["BADCOUNT second row"]
    assert (fine["embedding_status"], fine["embedding_attempts"]) == ("ready", 0)
    assert (bad["embedding_status"], bad["embedding_attempts"]) == ("pending", 1)
    assert "cannot count" in bad["embedding_error"]


class Stopping(Recording):
    """Sets ``stop`` as it encodes (a SIGTERM arriving mid-batch)."""

    def __init__(self, inner: SentenceTransformerEmbedder, stop: asyncio.Event) -> None:
        super().__init__(inner)
        self.stop, self.loop = stop, asyncio.get_running_loop()

    def encode_documents(self, texts: Sequence[str]) -> Vectors:
        self.loop.call_soon_threadsafe(self.stop.set)
        return super().encode_documents(texts)


async def test_a_drain_stopped_mid_batch_gives_the_next_batch_back(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    await write(client, [{"text": f"turn {i} of a burst"} for i in range(4)])
    stop = asyncio.Event()
    worker = Worker(pool, Stopping(embedder, stop), WorkerConfig(claim_size=2))
    assert await worker.drain(stop) == 2
    rows = await pool.fetch(
        "SELECT embedding_status, embedding_lease_until FROM memories ORDER BY embedding_status"
    )
    assert [r["embedding_status"] for r in rows] == ["pending", "pending", "ready", "ready"]
    assert [r["embedding_lease_until"] for r in rows[:2]] == [None, None]  # free to claim


async def test_new_writes_and_edits_go_ahead_of_a_reembedding(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    old = await write(client, [{"text": f"an old memory {i}"} for i in range(3)])
    await Worker(pool, embedder).drain()
    assert await requeue(pool, embedder.name, everything=True) == 3
    [new] = await write(client, [{"text": "what the agent just learned"}])
    edited = old[2]["id"]
    resp = await client.patch(
        f"/api/v1/memories/{edited}", json={"text": "an edited memory"}, headers=ADMIN
    )
    assert resp.status == 200, await resp.text()
    worker = Worker(pool, embedder, WorkerConfig(claim_size=1))
    order = [(await worker.claim())[0].id for _ in range(4)]
    assert order == [new["id"], edited, old[0]["id"], old[1]["id"]]


async def test_an_old_texts_failure_or_lease_never_lands_on_the_edited_text(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    # A worker fails on the text it claimed while an edit re-queues the memory: the error,
    # backoff and attempt were the old text's, and (at the last attempt) marked the new
    # text failed without ever trying it. Its renewals and release touch it no more.
    [m, _] = await write(client, [{"text": "POISON at first"}, {"text": "a fine neighbour"}])
    worker = Worker(pool, Recording(embedder, poison="POISON"), WorkerConfig(max_attempts=1))
    rows = await worker.claim()
    encoded, failed = worker.encode(rows)
    assert [r.id for r, _ in failed] == [m["id"]]
    await client.patch(f"/api/v1/memories/{m['id']}", json={"text": "fine now"}, headers=ADMIN)
    await worker.store(encoded, failed)
    await worker.release([(r.workspace_id, r.id, r.generation) for r, _ in failed])
    row = await pool.fetchrow("SELECT * FROM memories WHERE id = $1", m["id"])
    assert (row["embedding_status"], row["embedding_error"]) == ("pending", None)
    assert (row["embedding_attempts"], row["embedding_lease_until"]) == (0, None)
    await worker.drain()
    assert (
        await pool.fetchval("SELECT count(*) FROM memories WHERE embedding_status = 'ready'") == 2
    )


async def test_long_texts_are_embedded_in_chunks(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    paragraphs = [f"Section {i}: the {w} service owns the {w} queue." for i, w in enumerate(
        ["billing", "search", "auth", "mail", "storage", "payments", "gateway", "ledger"] * 12
    )]  # fmt: skip
    long_text = " ".join(paragraphs)
    [chunks] = embedder.chunk_many([long_text])
    assert len(chunks) > 2
    assert chunks[0].start == 0 and chunks[-1].end == len(long_text)
    assert all(a.end > b.start for a, b in itertools.pairwise(chunks))  # windows overlap
    [m] = await write(client, [{"text": long_text}])
    await Worker(pool, embedder).drain()
    assert await pool.fetchval("SELECT count(*) FROM memory_chunks") == len(chunks) - 1
    last = (
        await pool.fetchval("SELECT embedding FROM memory_chunks ORDER BY chunk_index DESC LIMIT 1")
    ).to_numpy()
    expected = embedder.encode_documents([long_text[chunks[-1].start : chunks[-1].end]])[0]
    assert np.allclose(last, expected, atol=1e-5)
    assert await pool.fetchval("SELECT chunked FROM memories WHERE id = $1", m["id"])
    # Vector search alone (Scroll 1.1) scores the memory by its best chunk: a query close
    # to a later window scores as that chunk does, not as the memory's own vector.
    await write(client, [{"text": "Weekend plans: hiking in the hills."}])
    await Worker(pool, embedder).drain()
    query = "Which service owns the ledger queue? Section 95"
    resp = await client.post(
        "/api/v1/memory/search", json={"user_id": "default", "query": query, "max_results": 5},
        headers={**ADMIN, "X-WOS-Model": "Scroll 1.1"},
    )  # fmt: skip
    assert resp.status == 200, await resp.text()
    hits = {h["id"]: h for h in (await resp.json())["memories"]}
    q = embedder.encode_queries([query])[0]
    best = max(float(q @ v) for v in embedder.encode_documents(
        [long_text[c.start : c.end] for c in chunks]
    ))  # fmt: skip
    own = float(q @ embedder.encode_documents([long_text[chunks[0].start : chunks[0].end]])[0])
    assert best > own + 0.01  # the test means something: a later chunk is closer
    # similarity is the cosine mapped onto [0, 1] (service.retrieval.ranking.similarity)
    assert hits[m["id"]]["similarity"] == pytest.approx((best + 1) / 2, abs=1e-3)
    # Shortened to one window: the extra chunks go.
    await client.patch(f"/api/v1/memories/{m['id']}", json={"text": "short now"}, headers=ADMIN)
    await Worker(pool, embedder).drain()
    assert await pool.fetchval("SELECT count(*) FROM memory_chunks") == 0
    assert not await pool.fetchval("SELECT chunked FROM memories WHERE id = $1", m["id"])


async def test_worker_inside_serve_embeds_soon_after_a_write(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings
) -> None:
    client = await make_client(settings.with_overrides(worker=True, embed_poll_s=30.0))
    [m] = await write(client, [{"text": "embed me quickly"}])
    # The poll interval is 30 s: being ready within 10 s means NOTIFY woke the worker.
    for _ in range(100):
        got = await (await client.get(f"/api/v1/memories/{m['id']}", headers=ADMIN)).json()
        if got["embeddingStatus"] == "ready":
            break
        await asyncio.sleep(0.1)
    assert got["embeddingStatus"] == "ready"
    metrics = await (await client.get("/metrics")).text()
    assert "mneme_embedded_memories_total 1.0" in metrics


async def test_the_worker_merges_the_text_index_pending_list_when_the_queue_empties(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    await pool.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    pending = "SELECT pending_pages FROM pgstatginindex('memories_search_tsv')"
    facts = [{"text": f"Fact {i}: the {w} team ships on day {i}."} for i, w in enumerate(
        ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"] * 10
    )]  # fmt: skip
    # A bare drain leaves the written memories in the list (what searches then read).
    await write(client, facts)
    await Worker(pool, embedder).drain()
    assert await pool.fetchval(pending) > 0
    # The loop merges it once the queue is empty.
    stop = asyncio.Event()
    worker = Worker(pool, embedder, WorkerConfig(poll_s=0.05))
    task = asyncio.create_task(worker.run(stop))
    try:
        await write(client, [{**f, "text": f["text"] + " Again."} for f in facts])
        for _ in range(200):
            if await pool.fetchval(pending) == 0 and (await queue_state(pool))[0] == 0:
                break
            await asyncio.sleep(0.05)
        assert await pool.fetchval(pending) == 0
        assert (await queue_state(pool))[0] == 0
    finally:
        stop.set()
        await task
        worker.close()


async def test_a_worker_killed_mid_batch_loses_nothing(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder, db_url: str
) -> None:
    # Long texts make one batch take seconds on a CPU, so the kill lands inside it.
    words = ("the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog", "while")
    texts = [
        " ".join(words[(i + j) % len(words)] for j in range(180)) + f" #{i}" for i in range(192)
    ]
    for start in range(0, len(texts), 96):
        await write(client, [{"text": t} for t in texts[start : start + 96]])
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env.update(
        MNEME_DATABASE_URL=db_url, MNEME_EMBED_CLAIM_SIZE="192", MNEME_EMBED_LEASE_SECONDS="4"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service.cli", "worker", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        # Wait until it holds the batch: a fresh process loads the model first, which took
        # over 30 s on a loaded 2-core machine (seen 2026-12-07, two suites side by side).
        for _ in range(2400):
            leased = await pool.fetchval(
                "SELECT count(*) FROM memories WHERE embedding_lease_until > now()"
            )
            if leased:
                break
            await asyncio.sleep(0.05)
        assert leased == 192
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), timeout=10)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    pending = await pool.fetchval(
        "SELECT count(*) FROM memories WHERE embedding_status = 'pending'"
    )
    assert pending == 192  # nothing was half-written
    rescuer = Worker(pool, embedder, WorkerConfig(claim_size=64))
    assert await rescuer.run_once() == 0  # the dead worker's lease still holds
    await asyncio.sleep(4.5)
    assert await rescuer.drain() == 192
    assert (
        await pool.fetchval("SELECT count(*) FROM memories WHERE embedding_status = 'ready'") == 192
    )


async def test_query_encoder_batches_concurrent_queries_and_caches(
    embedder: SentenceTransformerEmbedder,
) -> None:
    encoder = QueryEncoder(embedder, max_batch=32, cache_size=8)
    queries = [f"what does person {i} drink?" for i in range(24)]
    vectors = await asyncio.gather(*(encoder.encode(q) for q in queries))
    assert encoder.model_calls < len(queries)  # shared calls, not one per query
    direct = embedder.encode_queries(queries)
    assert np.allclose(np.stack(vectors), direct, atol=1e-5)
    calls = encoder.model_calls
    again = await encoder.encode(queries[-1])
    assert (
        np.allclose(again, direct[-1]) and encoder.model_calls == calls and encoder.cache_hits == 1
    )
    # Identical queries in flight share one encoding.
    same = await asyncio.gather(*(encoder.encode("one shared question") for _ in range(5)))
    assert encoder.model_calls == calls + 1
    assert all(np.array_equal(s, same[0]) for s in same)
    # Each encoded query's tokens are counted with it (billing reads them).
    assert encoder.tokens("one shared question") == embedder.count_tokens("one shared question")
    assert encoder.tokens("never asked") is None


def test_chunking_keeps_short_texts_whole(embedder: SentenceTransformerEmbedder) -> None:
    short = "word " * 40  # 200 characters: fits without tokenizing
    medium = "supercalifragilistic " * 20  # 420 characters but well under the token window
    a, b = embedder.chunk_many([short, medium])
    assert a == [Chunk(0, len(short))]
    assert len(b) == 1 and b[0] == Chunk(0, len(medium))
    assert embedder.count_tokens(medium) <= embedder.window_tokens


async def test_a_live_worker_renews_its_lease_during_a_long_batch(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    await write(client, [{"text": "slow one"}])

    class Slow(Recording):
        def encode_documents(self, texts: Sequence[str]) -> Vectors:
            import time

            time.sleep(2.5)  # longer than the 1.5 s lease
            return super().encode_documents(texts)

    slow = Worker(pool, Slow(embedder), WorkerConfig(lease_s=1.5))
    other = Worker(pool, embedder, WorkerConfig(lease_s=1.5))
    first = asyncio.create_task(slow.run_once())
    await asyncio.sleep(2.0)  # past the original lease: only renewal keeps the row
    assert await other.run_once() == 0
    assert await first == 1
    assert await pool.fetchval("SELECT embedding_status FROM memories") == "ready"


def test_token_counts_are_taken_a_slice_at_a_time() -> None:
    """The worker counts a claim's tokens in slices of limited size (search shares the
    counting tokenizer), and the counts come back in order, one per text."""
    from embeddings.worker import COUNT_SLICE_CHARS, count_in_slices

    calls: list[list[str]] = []

    class Counter:
        def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
            calls.append(list(texts))
            return [len(t) for t in texts]

    texts = ["a" * 5000, "b" * 5000, "c" * 7000, "d" * 40_000, "e" * 10]
    assert count_in_slices(Counter(), texts) == [len(t) for t in texts]  # type: ignore[arg-type]
    assert [len(c) for c in calls] == [2, 1, 1, 1]
    assert all(sum(map(len, c)) <= COUNT_SLICE_CHARS or len(c) == 1 for c in calls)


async def test_the_queue_probe_counts_up_to_its_cap_then_recounts_at_most_so_often(
    client: Client, pool: asyncpg.Pool
) -> None:
    """/readyz and /metrics read the queue through QueueProbe: no count over a large
    backlog on every probe."""
    probe = QueueProbe(cap=5, recount_s=3600.0)
    await write(client, [{"text": f"waiting number {i}"} for i in range(4)])
    assert (await probe.state(pool))[0] == 4  # under the cap: exact, every time
    await write(client, [{"text": f"more waiting number {i}"} for i in range(4)])
    depth, lag = await probe.state(pool)
    assert (depth, lag >= 0) == (8, True)  # past the cap: counted once
    await write(client, [{"text": f"still more number {i}"} for i in range(3)])
    assert (await probe.state(pool))[0] == 8  # ... and not again before recount_s
    probe.recount_s = 0.0
    assert (await probe.state(pool))[0] == 11
    assert (await queue_state(pool))[0] == 11
    resp = await client.get("/readyz")
    assert (await resp.json())["embeddingQueue"] == 11


async def test_a_bulk_import_does_not_starve_another_workspaces_writes(
    client: Client, pool: asyncpg.Pool, embedder: SentenceTransformerEmbedder
) -> None:
    """One workspace has 60 memories waiting, another writes 3 after them: the next batch
    of 10 shares itself out, round by round, instead of taking the importer's oldest ten."""
    async with pool.acquire() as conn:
        other = await tenancy.create_workspace(conn, "other", "free")
        assert other is not None
        _, secret = await keys.create_key(
            conn, other.id, kind="service", member=None, scopes=list(keys.SCOPES), name=None
        )
    await write(client, [{"text": f"imported memory number {i}"} for i in range(60)])
    resp = await client.post(
        "/api/v1/memories", headers=auth(secret),
        json={"memories": [{"text": f"their memory {i}"} for i in range(3)]},
    )  # fmt: skip
    assert resp.status == 200, await resp.text()
    theirs = {r["id"] for r in await pool.fetch(
        "SELECT id FROM memories WHERE workspace_id = $1", other.id)}  # fmt: skip
    worker = Worker(pool, embedder, WorkerConfig(claim_size=10))
    first = await worker.claim()
    assert len(first) == 10
    assert {c.id for c in first} & theirs == theirs  # all three, and 7 of the import
    oldest = await pool.fetch(
        "SELECT id FROM memories WHERE workspace_id <> $1 ORDER BY updated_at, id LIMIT 7",
        other.id,
    )  # fmt: skip
    assert {c.id for c in first} - theirs == {r["id"] for r in oldest}  # the import's oldest
    # Claimed rows are leased: the next claim takes the next ten of the import.
    second = await worker.claim()
    assert len(second) == 10 and not {c.id for c in second} & {c.id for c in first}
    await worker.release([(c.workspace_id, c.id, c.generation) for c in first + second])
