"""The embedding worker: the ``memories`` table is the queue.

A batch is claimed with ``FOR UPDATE SKIP LOCKED`` and a lease (the claim commits at
once, so no lock is held while the model runs). Vectors go back with one
``UPDATE … FROM unnest``, accepted only if the row's ``embedding_generation`` is still
the claimed one — a text edited meanwhile is not overwritten with a stale vector. A
worker that dies (even SIGKILL) loses nothing: its lease expires and the rows are
claimed again, and an interrupted batch is no attempt: only a text that fails to encode
counts one, is retried with backoff, and is marked ``failed`` with its error after
``max_attempts``. Rows queued again by ``mneme reembed`` (``embedding_background``) wait
behind every new write.

Workers wake on ``LISTEN mneme_embed`` (writers ``NOTIFY`` on commit) and poll as a
fallback, so a lost notification only costs ``poll_s``; woken, they wait ``linger_s`` (10 ms)
to take a burst of writes together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeAlias

import asyncpg
from pgvector import Vector

from embeddings import Embedder, Vectors, document_text
from service.queries.named import NamedSQL

log = logging.getLogger("mneme.worker")

CHANNEL = "mneme_embed"

# Where a worker LISTENs on CHANNEL (``Worker.listen``).
Listen: TypeAlias = "bool | Callable[[], Awaitable[asyncpg.Connection]]"

# What the worker commits can be done again, so it commits without waiting for the WAL to
# reach the disk (synchronous_commit off for its own transaction: set_config's ``true``).
# A crash can lose the last fraction of a second of claims and vectors: those memories
# are pending again, and embedded again. The writers it shares the disk with (and, in
# ``mneme serve``, the CPU) do not queue behind its flushes.
LAZY_COMMIT = "(SELECT set_config('synchronous_commit', 'off', true)) lazy_commit"

# A batch is shared fairly among the workspaces with memories waiting: each gets its
# oldest first, round by round (every workspace's oldest, then every one's second
# oldest, ...), so one tenant's bulk import of a million memories cannot hold back
# another's next write by a million places. The workspaces waiting are found by a skip
# scan of memories_embedding_backlog (one index probe per workspace waiting, not a walk
# of the backlog); of them, the :claim_size that have waited longest are served, each
# from its own part of the same index, at most 4 x :claim_size read each. The rows
# offered are locked and checked again as they are claimed: a row another worker is
# claiming at this moment is skipped, one it has claimed (leased) is not offered. Rows
# re-queued in the background (REQUEUE) come after every new write, in each workspace
# and across them.
CLAIM = NamedSQL(f"""
WITH RECURSIVE waiting AS (
    (SELECT workspace_id FROM memories WHERE embedding_status = 'pending'
     ORDER BY workspace_id LIMIT 1)
    UNION ALL
    SELECT (SELECT m.workspace_id FROM memories m
            WHERE m.embedding_status = 'pending' AND m.workspace_id > w.workspace_id
            ORDER BY m.workspace_id LIMIT 1)
    FROM waiting w WHERE w.workspace_id IS NOT NULL
), heads AS (
    SELECT w.workspace_id FROM waiting w
    CROSS JOIN LATERAL (
        SELECT m.embedding_background, m.updated_at, m.id FROM memories m
        WHERE m.workspace_id = w.workspace_id AND m.embedding_status = 'pending'
          AND (m.embedding_lease_until IS NULL OR m.embedding_lease_until < now())
        ORDER BY m.embedding_background, m.updated_at, m.id LIMIT 1
    ) oldest
    ORDER BY oldest.embedding_background, oldest.updated_at, oldest.id
    LIMIT :claim_size
), offered AS (
    SELECT c.workspace_id, c.id, c.updated_at, c.embedding_background,
           row_number() OVER (PARTITION BY c.workspace_id
                              ORDER BY c.embedding_background, c.updated_at, c.id) AS round
    FROM heads w
    CROSS JOIN LATERAL (
        SELECT m.workspace_id, m.id, m.updated_at, m.embedding_background FROM memories m
        WHERE m.workspace_id = w.workspace_id AND m.embedding_status = 'pending'
          AND (m.embedding_lease_until IS NULL OR m.embedding_lease_until < now())
        ORDER BY m.embedding_background, m.updated_at, m.id LIMIT 4 * :claim_size
    ) c
), claimed AS (
    -- Locked in the fair order, the limit counting only rows this claim got: a row
    -- another worker is claiming at this moment is passed over for the next one (each
    -- workspace offers four claims' worth, so workers claiming at once all get rows).
    SELECT m.workspace_id, m.id, o.round, o.embedding_background FROM offered o
    JOIN memories m ON m.workspace_id = o.workspace_id AND m.id = o.id
    WHERE m.embedding_status = 'pending'
      AND (m.embedding_lease_until IS NULL OR m.embedding_lease_until < now())
    ORDER BY o.embedding_background, o.round, o.updated_at, o.id
    LIMIT :claim_size
    FOR UPDATE OF m SKIP LOCKED
)
UPDATE memories m
SET embedding_lease_until = now() + make_interval(secs => :lease_s)
FROM claimed c, {LAZY_COMMIT}
WHERE m.workspace_id = c.workspace_id AND m.id = c.id
RETURNING m.workspace_id, m.id, m.text, m.speaker, m.embedding_generation,
          m.embedding_attempts, m.updated_at, c.round, c.embedding_background
""")


CLAIM_RETRIES = 2


def _claim_order(row: asyncpg.Record) -> tuple[bool, int, object, str]:
    """CLAIM's order: new writes first, then round by round, oldest first."""
    return row["embedding_background"], row["round"], row["updated_at"], row["id"]


STORE = NamedSQL(f"""
UPDATE memories m
SET embedding = v.embedding,
    embedding_model = :model,
    embedding_status = 'ready',
    embedding_error = NULL,
    embedding_attempts = 0,
    embedding_lease_until = NULL,
    text_tokens = v.tokens,
    chunked = v.chunked
FROM unnest(:workspaces::text[], :ids::text[], :generations::int[], :embeddings::vector[],
            :tokens::int[], :chunked::boolean[])
     AS v(workspace_id, id, generation, embedding, tokens, chunked), {LAZY_COMMIT}
WHERE m.workspace_id = v.workspace_id AND m.id = v.id
  AND m.embedding_generation = v.generation
  AND m.embedding_status = 'pending'
RETURNING m.workspace_id, m.id
""")

DELETE_CHUNKS = NamedSQL("""
DELETE FROM memory_chunks c
USING unnest(:workspaces::text[], :ids::text[]) AS v(workspace_id, id)
WHERE c.workspace_id = v.workspace_id AND c.memory_id = v.id
""")

INSERT_CHUNKS = NamedSQL("""
INSERT INTO memory_chunks (workspace_id, memory_id, chunk_index, embedding)
SELECT * FROM unnest(:workspaces::text[], :ids::text[], :chunk_indexes::int[],
                     :embeddings::vector[])
""")

# RENEW, RELEASE and FAIL act only on the text the worker claimed (its generation), as
# STORE does: an edit meanwhile re-queued the memory (lease cleared, attempts 0) for any
# worker, and the old text's lease, attempt or error must not land on the new one.
RENEW = NamedSQL("""
UPDATE memories m SET embedding_lease_until = now() + make_interval(secs => :lease_s)
FROM unnest(:workspaces::text[], :ids::text[], :generations::int[])
     AS v(workspace_id, id, generation)
WHERE m.workspace_id = v.workspace_id AND m.id = v.id AND m.embedding_status = 'pending'
  AND m.embedding_generation = v.generation
""")

RELEASE = NamedSQL("""
UPDATE memories m
SET embedding_lease_until = NULL
FROM unnest(:workspaces::text[], :ids::text[], :generations::int[])
     AS v(workspace_id, id, generation)
WHERE m.workspace_id = v.workspace_id AND m.id = v.id
  AND m.embedding_generation = v.generation
""")

FAIL = NamedSQL("""
UPDATE memories m
SET embedding_error = v.error,
    embedding_attempts = m.embedding_attempts + 1,
    embedding_status = CASE WHEN m.embedding_attempts + 1 >= :max_attempts THEN 'failed'
                            ELSE 'pending' END,
    -- Back off before the next try: 5 s, 10 s, 20 s, …
    embedding_lease_until = now() + make_interval(secs => 5 * power(2, m.embedding_attempts))
FROM unnest(:workspaces::text[], :ids::text[], :generations::int[], :errors::text[])
     AS v(workspace_id, id, generation, error)
WHERE m.workspace_id = v.workspace_id AND m.id = v.id
  AND m.embedding_generation = v.generation AND m.embedding_status = 'pending'
""")

# New rows of a GIN index wait in its pending list until a vacuum (or a full list) merges
# them, and every full-text search reads the whole list meanwhile: right after a bulk
# import, 1.1 ms of a 2.4 ms full-text arm at 663 memories. Every written memory passes
# through the queue (its vector's UPDATE adds it to the list once more), so the worker
# merges the list when the queue empties, at most once a second (``clean_every_s``):
# searches read at most a second's writes there, and writes pay nothing extra.
CLEAN_TEXT_INDEX = "SELECT gin_clean_pending_list('memories_search_tsv'::regclass)"

QUEUE = NamedSQL("""
SELECT count(*) AS depth,
       coalesce(extract(epoch FROM now() - min(updated_at)), 0)::float8 AS lag
FROM memories WHERE embedding_status = 'pending'
""")


# Token counts (for billing) are taken this many characters at a time: the counting
# tokenizer is shared with search, which counts a query's tokens on the event loop, so
# one claim's texts (up to 1 MiB) must not hold it for long.
COUNT_SLICE_CHARS = 16_384


def count_in_slices(embedder: Embedder, texts: Sequence[str]) -> list[int]:
    out: list[int] = []
    batch: list[str] = []
    size = 0
    for text in texts:
        if batch and size + len(text) > COUNT_SLICE_CHARS:
            out += embedder.count_tokens_many(batch)
            batch, size = [], 0
        batch.append(text)
        size += len(text)
    return out + (embedder.count_tokens_many(batch) if batch else [])


@dataclass(frozen=True)
class WorkerConfig:
    # Rows claimed at once. The model still encodes ``batch_size`` texts per forward pass
    # (its own setting), but a bigger claim lets it sort texts by length first: far less
    # padding than encoding each small claim as it comes (2x faster on LoCoMo turns).
    # Many workers sharing a backlog spread it better with smaller claims.
    claim_size: int = 4096
    # ... and at most this many characters of text (about 250k tokens), so one claim of
    # long core-memory files does not hold a worker for minutes.
    claim_chars: int = 1_048_576
    lease_s: float = 60.0
    poll_s: float = 5.0
    max_attempts: int = 5
    # Woken by a write, the worker waits this long before it claims: the writes of one
    # burst (an agent's turn, a batch sent item by item) are encoded together, and the
    # write whose commit woke it has sent its answer before the worker takes the CPU
    # (in ``mneme serve`` they share one).
    linger_s: float = 0.01
    # The text index's pending list is merged (CLEAN_TEXT_INDEX) at most this often: a
    # trickle of writes pays one merge a second, not one per write.
    clean_every_s: float = 1.0


@dataclass
class Claimed:
    workspace_id: str
    id: str
    text: str
    speaker: str | None
    generation: int
    attempts: int


@dataclass
class Encoded:
    row: Claimed
    vectors: Vectors  # one per chunk, chunk 0 first
    tokens: int  # of the text, as search bills it


@dataclass
class WorkerStats:
    embedded: int = 0
    failed: int = 0
    batches: int = 0
    seconds_encoding: float = 0.0
    last_lag_s: float = 0.0
    observers: list[Callable[[int, float], None]] = field(default_factory=list)


class Worker:
    def __init__(
        self,
        pool: asyncpg.Pool,
        embedder: Embedder,
        config: WorkerConfig | None = None,
        *,
        on_error: Callable[[BaseException], None] | None = None,
        listen: Listen = True,
    ) -> None:
        self.pool = pool
        # Where it LISTENs: a connection of ``pool`` (True), one of its own that this
        # opens (a transaction pooler cannot carry a LISTEN), or nowhere (False: it polls).
        self.listen = listen
        self.embedder = embedder
        self.config = config or WorkerConfig()
        # How a failed batch or LISTEN is reported (the loop goes on after the poll
        # interval either way): the service passes its outage log, one warning per
        # interval while the database is away; by default, a traceback.
        self.on_error = on_error or _log_error
        self.stats = WorkerStats()
        self._wake = asyncio.Event()
        self._may_clean = True
        self._cleaned_at = -math.inf  # time.monotonic() of the last merge
        # One long-lived thread for the model: torch/oneDNN warm per-thread caches, which a
        # fresh pool thread would rebuild (seen as a slow first batch on each new thread).
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mneme-encode")

    def close(self) -> None:
        self._thread.shutdown(wait=False)

    async def _in_thread(
        self, claimed: Sequence[Claimed]
    ) -> tuple[list[Encoded], list[tuple[Claimed, str]], float]:
        """Encode in the model thread, renewing the lease while it runs.

        A live worker keeps its claim however long the batch takes; a dead one stops
        renewing, and its rows are claimed again once the lease runs out.
        """
        loop = asyncio.get_running_loop()
        renewing = asyncio.create_task(self._renew(claimed))
        try:
            return await loop.run_in_executor(self._thread, self._encode_claimed, claimed)
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def _renew(self, claimed: Sequence[Claimed]) -> None:
        rows = {"workspaces": [r.workspace_id for r in claimed], "ids": [r.id for r in claimed],
                "generations": [r.generation for r in claimed]}  # fmt: skip
        while True:
            await asyncio.sleep(self.config.lease_s / 3)
            try:
                await RENEW.execute(self.pool, **rows, lease_s=self.config.lease_s)
            except Exception as exc:
                log.warning(
                    "could not renew a lease; the batch may be claimed twice",
                    extra={"error": f"{type(exc).__name__}: {exc}"[:300]},
                )

    # --- one batch ------------------------------------------------------------------------

    async def claim(self) -> list[Claimed]:
        """Lease pending rows (CLAIM: shared among the workspaces waiting, the oldest of
        each first), up to ``claim_size`` rows and ``claim_chars``; past the characters,
        the last rounds go back."""
        claim = {"claim_size": self.config.claim_size, "lease_s": self.config.lease_s}
        rows = await CLAIM.fetch(self.pool, **claim)
        for _ in range(CLAIM_RETRIES):
            if rows:
                break
            # Nothing: an empty queue, or every row offered was taken by workers claiming
            # at the same instant (seen with three workers starting together). Their
            # claims are committed now, so asking again offers the rows after theirs.
            rows = await CLAIM.fetch(self.pool, **claim)
        claimed: list[Claimed] = []
        extra: list[asyncpg.Record] = []
        chars = 0
        for r in sorted(rows, key=_claim_order):
            if claimed and chars + len(r["text"]) > self.config.claim_chars:
                extra.append(r)
                continue
            chars += len(r["text"])
            claimed.append(
                Claimed(
                    r["workspace_id"], r["id"], r["text"], r["speaker"],
                    r["embedding_generation"], r["embedding_attempts"],
                )
            )  # fmt: skip
        if extra:
            await self.release(
                [(r["workspace_id"], r["id"], r["embedding_generation"]) for r in extra]
            )
        return claimed

    async def release(self, rows: Sequence[tuple[str, str, int]]) -> None:
        """Give claimed rows (workspace, id, generation) back untouched (over budget, or
        stopping)."""
        await RELEASE.execute(
            self.pool, workspaces=[r[0] for r in rows], ids=[r[1] for r in rows],
            generations=[r[2] for r in rows],
        )  # fmt: skip

    def encode(self, rows: Sequence[Claimed]) -> tuple[list[Encoded], list[tuple[Claimed, str]]]:
        """Chunk and encode (in a worker thread). Returns successes and failures."""
        texts: list[str] = []
        spans: list[tuple[int, int]] = []
        for row, chunks in zip(rows, self.embedder.chunk_many([r.text for r in rows]), strict=True):
            first = len(texts)
            texts.extend(document_text(row.text[c.start : c.end], row.speaker) for c in chunks)
            spans.append((first, len(texts)))
        try:
            vectors = self.embedder.encode_documents(texts)
        except Exception:
            if len(rows) == 1:
                raise
            # Find the culprit: encode one memory at a time.
            done: list[Encoded] = []
            failed: list[tuple[Claimed, str]] = []
            for row in rows:
                try:
                    ok, bad = self.encode([row])
                except Exception as exc:
                    failed.append((row, f"{type(exc).__name__}: {exc}"[:1000]))
                else:
                    done.extend(ok)
                    failed.extend(bad)
            return done, failed
        tokens = count_in_slices(self.embedder, [r.text for r in rows])
        return [
            Encoded(row, vectors[a:b], n)
            for row, (a, b), n in zip(rows, spans, tokens, strict=True)
        ], []

    async def store(self, encoded: Sequence[Encoded], failed: Sequence[tuple[Claimed, str]]) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            stored = 0
            if encoded:
                accepted = await STORE.fetch(
                    conn,
                    workspaces=[e.row.workspace_id for e in encoded],
                    ids=[e.row.id for e in encoded],
                    generations=[e.row.generation for e in encoded],
                    embeddings=[Vector(e.vectors[0]) for e in encoded],
                    model=self.embedder.name,
                    tokens=[e.tokens for e in encoded],
                    chunked=[len(e.vectors) > 1 for e in encoded],
                )
                keep = {(r["workspace_id"], r["id"]) for r in accepted}
                stored = len(keep)
                kept = [e for e in encoded if (e.row.workspace_id, e.row.id) in keep]
                if kept:
                    await DELETE_CHUNKS.execute(
                        conn,
                        workspaces=[e.row.workspace_id for e in kept],
                        ids=[e.row.id for e in kept],
                    )
                    extra = [(e, i) for e in kept for i in range(1, len(e.vectors))]
                    if extra:
                        await INSERT_CHUNKS.execute(
                            conn,
                            workspaces=[e.row.workspace_id for e, _ in extra],
                            ids=[e.row.id for e, _ in extra],
                            chunk_indexes=[i for _, i in extra],
                            embeddings=[Vector(e.vectors[i]) for e, i in extra],
                        )
            if failed:
                await FAIL.execute(
                    conn,
                    workspaces=[row.workspace_id for row, _ in failed],
                    ids=[row.id for row, _ in failed],
                    generations=[row.generation for row, _ in failed],
                    errors=[error for _, error in failed],
                    max_attempts=self.config.max_attempts,
                )
                for row, error in failed:
                    log.warning(
                        "embedding failed",
                        extra={"memory": row.id, "attempt": row.attempts + 1, "error": error},
                    )
        return stored

    def _encode_claimed(
        self, claimed: Sequence[Claimed]
    ) -> tuple[list[Encoded], list[tuple[Claimed, str]], float]:
        """Encode (in a thread): (encoded, failed with their errors, seconds taken)."""
        started = time.perf_counter()
        encoded, failed = self._encode_or_blame(claimed)
        return encoded, failed, time.perf_counter() - started

    def _encode_or_blame(
        self, rows: Sequence[Claimed]
    ) -> tuple[list[Encoded], list[tuple[Claimed, str]]]:
        """``encode``, and if it fails outside its own per-row fallback (chunking, token
        counting), one row at a time: the error is charged to the row that raised it."""
        try:
            return self.encode(rows)
        except Exception as exc:
            if len(rows) == 1:
                return [], [(rows[0], f"{type(exc).__name__}: {exc}"[:1000])]
        encoded: list[Encoded] = []
        failed: list[tuple[Claimed, str]] = []
        for row in rows:
            ok, bad = self._encode_or_blame([row])
            encoded += ok
            failed += bad
        return encoded, failed

    async def _store_and_count(
        self, encoded: list[Encoded], failed: list[tuple[Claimed, str]], elapsed: float
    ) -> None:
        stored = await self.store(encoded, failed)
        self.stats.embedded += stored
        self.stats.failed += len(failed)
        self.stats.batches += 1
        self.stats.seconds_encoding += elapsed
        for observe in self.stats.observers:
            observe(stored, elapsed)

    async def run_once(self) -> int:
        """Claim, encode and store one batch; the number of memories claimed."""
        claimed = await self.claim()
        if claimed:
            result = await self._in_thread(claimed)
            await self._store_and_count(*result)
        return len(claimed)

    async def drain(self, stop: asyncio.Event | None = None) -> int:
        """Work until nothing is claimable (or ``stop`` is set); the number claimed.

        Pipelined: while one batch is being encoded, the previous one is stored and the
        next one claimed, so the model never waits for the database.
        """
        total = 0
        storing: asyncio.Task[None] | None = None
        claimed = await self.claim()
        try:
            while claimed:
                encoding = asyncio.ensure_future(self._in_thread(claimed))
                if storing is not None:
                    await storing
                    storing = None
                following = [] if stop is not None and stop.is_set() else await self.claim()
                result = await encoding
                if following and stop is not None and stop.is_set():
                    # Stopped while this batch was encoded: the next one goes back now,
                    # for another worker, not when its lease runs out.
                    await self.release([(r.workspace_id, r.id, r.generation) for r in following])
                    following = []
                storing = asyncio.create_task(self._store_and_count(*result))
                total += len(claimed)
                claimed = following
        finally:
            if storing is not None:
                await storing
        return total

    async def clean_text_index(self) -> bool:
        """Merge the full-text index's pending list (CLEAN_TEXT_INDEX); False if that
        failed (tried again after the next drain). Not allowed to (a role that does not
        own the table): never tried again, autovacuum does it instead."""
        if not self._may_clean:
            return True
        self._cleaned_at = time.monotonic()
        try:
            await self.pool.execute(CLEAN_TEXT_INDEX)
        except asyncpg.InsufficientPrivilegeError as exc:
            self._may_clean = False
            log.warning("cannot merge the text index's pending list", extra={"error": str(exc)})
        except Exception as exc:
            self.on_error(exc)
            return False
        return True

    # --- the loop -------------------------------------------------------------------------

    def _notified(self, *args: object) -> None:
        self._wake.set()

    def _clean_due(self) -> float:
        """Seconds until the text index may be merged again (0 or less: now)."""
        return self._cleaned_at + self.config.clean_every_s - time.monotonic()

    async def _idle(self, stop: asyncio.Event, at_most_s: float) -> None:
        """Sleep until notified, stopped, or ``at_most_s`` (at most ``poll_s``) passes;
        notified, linger ``linger_s`` more."""
        waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait(
            waiters,
            timeout=min(self.config.poll_s, max(0.0, at_most_s)),
            return_when=asyncio.FIRST_COMPLETED,
        )
        for w in waiters:
            w.cancel()
        if self._wake.is_set() and not stop.is_set():
            await asyncio.sleep(self.config.linger_s)

    async def _listen(self, old: asyncpg.Connection | None) -> asyncpg.Connection | None:
        """A connection listening on ``CHANNEL`` (a new one if ``old`` was lost: a
        restarted database drops it), or ``None`` while that fails (polling meanwhile)
        or when it does not listen (``listen``)."""
        if self.listen is False:
            return None
        if old is not None:
            try:
                if not old.is_closed():
                    return old
            except asyncpg.InterfaceError:
                pass  # lost, and already taken back by the pool
            else:
                await self._unlisten(old)
        try:
            conn: asyncpg.Connection
            if callable(self.listen):
                conn = await self.listen()
            else:
                conn = await self.pool.acquire()
        except Exception as exc:
            self.on_error(exc)
            return None
        try:
            await conn.add_listener(CHANNEL, self._notified)
        except Exception as exc:
            await self._unlisten(conn)
            self.on_error(exc)
            return None
        return conn  # rows written while nobody listened: the drain that follows finds them

    async def _unlisten(self, conn: asyncpg.Connection) -> None:
        """Give a listening connection up: back to the pool, or closed if its own."""
        with contextlib.suppress(Exception):  # lost: the pool has it back already
            await conn.remove_listener(CHANNEL, self._notified)
        with contextlib.suppress(Exception):
            if callable(self.listen):
                await conn.close()
            else:
                await self.pool.release(conn)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set: drain, then sleep until notified or ``poll_s`` passes.

        Stopping never interrupts a batch: the current one is stored first.
        """
        listener: asyncpg.Connection | None = None
        dirty = False  # memories embedded since the text index was last cleaned
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    listener = await self._listen(listener)
                    claimed = await self.drain(stop)
                except Exception as exc:
                    # Whatever it was (the database away, a bug), the loop must go on: a
                    # worker task that died would leave the queue to grow unseen.
                    self.on_error(exc)
                    claimed = 0
                if claimed:
                    dirty = True
                    continue
                if dirty and self._clean_due() <= 0:
                    dirty = not await self.clean_text_index()
                await self._idle(stop, self._clean_due() if dirty else self.config.poll_s)
        finally:
            if listener is not None:
                await self._unlisten(listener)


def _log_error(exc: BaseException) -> None:
    log.error("worker batch failed; retrying after the poll interval", exc_info=exc)


BACKGROUND_LEFT = NamedSQL("""
SELECT count(*) FROM memories WHERE embedding_status = 'pending' AND embedding_background
""")


async def background_left(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    """Memories re-queued by ``requeue`` still waiting for a vector (new writes aside)."""
    return int(await BACKGROUND_LEFT.fetchval(conn))


async def queue_state(conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, float]:
    """(memories waiting for a vector, age in seconds of the oldest)."""
    row = await QUEUE.fetchrow(conn)
    assert row is not None
    return int(row["depth"]), float(row["lag"])


# A probe's count stops here: past it, what /readyz and /metrics report is the exact count
# taken at most once per QUEUE_RECOUNT_S (a count over a million pending rows is a scan of
# the queue's index; a probe every few seconds from every replica must not be one).
QUEUE_CAP = 10_000
QUEUE_RECOUNT_S = 30.0

QUEUE_BOUNDED = NamedSQL("""
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM memories WHERE embedding_status = 'pending' LIMIT :cap
        ) s) AS depth,
       coalesce(extract(epoch FROM now() - (
           SELECT min(updated_at) FROM memories WHERE embedding_status = 'pending'
       )), 0)::float8 AS lag
""")


class QueueProbe:
    """The embedding queue's depth and lag for probes, at a bounded cost per probe: an
    exact count up to ``QUEUE_CAP`` (an index walk of at most that many entries; the lag
    is one index probe), and past it the last exact count, retaken at most every
    ``QUEUE_RECOUNT_S`` seconds (so a large backlog may read up to that old)."""

    def __init__(self, cap: int = QUEUE_CAP, recount_s: float = QUEUE_RECOUNT_S) -> None:
        self.cap, self.recount_s = cap, recount_s
        self._counted: tuple[float, int] | None = None  # (when, exact depth)
        self._counting = asyncio.Lock()

    async def state(self, conn: asyncpg.Connection | asyncpg.Pool) -> tuple[int, float]:
        """(memories waiting for a vector, age in seconds of the oldest)."""
        row = await QUEUE_BOUNDED.fetchrow(conn, cap=self.cap + 1)
        assert row is not None
        depth, lag = int(row["depth"]), float(row["lag"])
        if depth <= self.cap:
            return depth, lag
        async with self._counting:  # probes at once share one count
            counted = self._counted
            if counted is None or time.monotonic() - counted[0] >= self.recount_s:
                exact, _ = await queue_state(conn)
                counted = self._counted = (time.monotonic(), exact)
        return max(counted[1], self.cap + 1), lag


# One span of the table in key order: a statement of its own each, so that re-queueing
# a large database never runs into the pool's command timeout (one UPDATE of every row
# did: each row re-enters every index), and each row is visited once, even while workers
# store vectors meanwhile.
REQUEUE = NamedSQL("""
WITH span AS (
    SELECT workspace_id, id FROM memories
    WHERE (workspace_id, id) > (:after_workspace, :after_id)
    ORDER BY workspace_id, id
    LIMIT :batch
), queued AS (
    UPDATE memories m
    SET embedding_status = 'pending', embedding_generation = m.embedding_generation + 1,
        embedding_attempts = 0, embedding_error = NULL, embedding_lease_until = NULL,
        embedding_background = true
    FROM span s
    WHERE m.workspace_id = s.workspace_id AND m.id = s.id AND m.embedding_status <> 'pending'
      AND (:everything OR m.embedding_model IS DISTINCT FROM :model
           OR m.embedding_status = 'failed')
    RETURNING 1
)
SELECT (SELECT count(*) FROM queued)::int AS queued, last.workspace_id, last.id
FROM (VALUES (1)) one
LEFT JOIN LATERAL (
    SELECT workspace_id, id FROM span ORDER BY workspace_id DESC, id DESC LIMIT 1
) last ON true
""")

REQUEUE_SPAN = 5000


async def requeue(
    conn: asyncpg.Connection | asyncpg.Pool,
    model: str,
    *,
    everything: bool,
    batch: int = REQUEUE_SPAN,
) -> int:
    """Queue rows embedded by another model (and failed ones), or every row; how many."""
    total, after = 0, ("", "")
    while True:
        row = await REQUEUE.fetchrow(
            conn, model=model, everything=everything, batch=batch,
            after_workspace=after[0], after_id=after[1],
        )  # fmt: skip
        assert row is not None
        total += int(row["queued"])
        if row["id"] is None:
            return total
        after = (row["workspace_id"], row["id"])
