"""Search snapshots: a small store's searchable rows held in the service's memory.

A store scanned exactly (under ``EXACT_BELOW`` memories) is cheaper to rank here than in
PostgreSQL: both arms over 1,000 memories take ~0.2 ms in numpy against ~3 ms of SQL (the
exact vector scan, and BM25 over every row that matches a word of the question).

A snapshot is exact for one store version (``store_versions``, stamped at commit by every
write to the store, the worker's vectors included) and is used only while the store is
still at that version, which the search's store lookup reads anyway. Who may read what
stays decided by the one SQL predicate (``mneme_readable``), in one of two ways:

- **in memory**: that predicate depends on a memory's scope alone, so the store lookup
  also evaluates it for each scope the snapshot holds (a handful) and a search without
  filters ranks the rows of the readable scopes with no further statement;
- **proposed, then checked**: with filters, each arm proposes its best rows and one
  statement (``service.queries.snapshot_rows.readable``) keeps those that pass the whole
  search predicate, as the SQL arms would have.

What a version does not cover is ``last_used_at`` (searches stamp it without changing the
store): a snapshot takes this instance's own stamps as it makes them, and is read again
when older than ``max_age_s``, so ranking's recency lags other instances' stamps by at
most that. A search of a changed store is answered by the SQL arms while a new snapshot is
read off the response path (one read per store at a time, at most one per ``reload_s`` and
per ten times the last read's duration, so a store written to all the time costs a
bounded share of a core, not a read per search). Snapshots are dropped least recently
used first beyond ``max_bytes``.

A snapshot of a changed store is never searched, but it holds the text it was read with:
an erasure's must not stay in memory until evicted. So every process checks the versions
of the stores it holds snapshots of every ``sweep_s`` (one statement, only while it holds
any) and drops those of changed stores; the process that made the erasure drops the
workspace's at once (``drop_workspace``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np
import numpy.typing as npt

from service.queries import snapshot_rows as snapshot_sql
from service.queries.keys import Principal
from service.queries.search import (
    BM25_B,
    BM25_K1,
    MAX_QUERY_TERMS,
    Candidate,
    RetrievalRequest,
    SearchFilters,
    predicate_values,
)
from service.queries.snapshot_rows import Columns

log = logging.getLogger("mneme.snapshots")

# BM25, as the full-text arm computes it (service.queries.search._TEXT).
K1, B = BM25_K1, BM25_B
UNFILTERED = SearchFilters()
# Masks of allowed rows a snapshot keeps (readers, speakers and subsets it was asked for).
ALLOWED_KEPT = 64


@dataclass(frozen=True)
class Proposal:
    """One arm's candidates, best first: their rows in the snapshot and scores, and
    whether they are all the arm could propose."""

    rows: list[int]
    scores: list[float]
    complete: bool


NOTHING = Proposal([], [], True)


class Snapshot:
    """One store at one version."""

    def __init__(self, columns: Columns) -> None:
        c = columns
        self.version = c.version
        self.read_at = self.used_at = time.monotonic()
        self.rows = c.rows
        self.ids: list[str] = [r["id"] for r in c.rows]
        self.row_of = {memory_id: i for i, memory_id in enumerate(self.ids)}
        self.vectors = c.vectors
        self.has_vector = np.array([r["has_vector"] for r in c.rows], dtype=bool)
        self.postings = c.postings
        self.chunk_rows = c.chunk_rows
        self.chunk_vectors = c.chunk_vectors
        self.last_used: list[datetime] = [r["last_used_at"] for r in c.rows]
        speakers = [r["speaker"] for r in c.rows]
        self.is_self = np.array([s == "me" for s in speakers], dtype=bool)
        self.images = np.array([r["kind"] == "image" for r in c.rows], dtype=bool)
        self._speakers = speakers
        self._speaker_masks: dict[str, npt.NDArray[np.bool_]] = {}
        # The rows a retrieval from memory may return, by what decides them (a store's
        # searches ask the same few questions: a read-only mask is made once).
        self._allowed: dict[tuple[Any, ...], npt.NDArray[np.bool_]] = {}
        scope_of = [r["scope"] for r in c.rows]
        self.scopes = sorted(set(scope_of))
        code = {scope: i for i, scope in enumerate(self.scopes)}
        self.scope_codes = np.array([code[s] for s in scope_of], dtype=np.int64)
        # The store's statistics, as search_terms and search_store_stats hold them.
        lengths = np.array([r["length"] for r in c.rows], dtype=np.float64)
        self.docs = float(len(c.rows))
        avgdl = max(1.0, float(lengths.sum()) / max(1, len(c.rows)))
        self.norm_length = K1 * (1 - B + B * lengths / avgdl)
        self.nbytes = (
            c.vectors.nbytes
            + c.chunk_vectors.nbytes
            + c.chunk_rows.nbytes
            + sum(r.nbytes + t.nbytes + len(w) + 64 for w, (r, t) in c.postings.items())
            + sum(len(r["text"]) + 400 for r in c.rows)  # a row's record and its parts
        )

    def age(self) -> float:
        return time.monotonic() - self.read_at

    def touch(self, ids: Iterable[str], at: datetime) -> None:
        """``last_used_at = at`` for those of ``ids`` held here (this instance's stamps)."""
        for memory_id in ids:
            row = self.row_of.get(memory_id)
            if row is not None and self.last_used[row] < at:
                self.last_used[row] = at

    def eligible(
        self, *, subset: str, speaker: str | None, self_only: bool | None, images: bool | None
    ) -> npt.NDArray[np.bool_]:
        """The rows a retrieval may return as far as the store's own columns tell (the
        subset, speaker, self and image rules of the search predicate)."""
        mask = np.ones(len(self.ids), dtype=bool)
        if subset == "self" or self_only is True:
            mask &= self.is_self
        elif self_only is False:
            mask &= ~self.is_self
        if subset == "images" or images is True:
            mask &= self.images
        elif images is False:
            mask &= ~self.images
        if speaker is not None:
            mask &= self._speaker_mask(speaker)
        return mask

    def readable(self, scopes: frozenset[str]) -> npt.NDArray[np.bool_]:
        """The rows whose scope is one of ``scopes`` (those mneme_readable passed)."""
        passed = np.array([scope in scopes for scope in self.scopes], dtype=bool)
        return passed[self.scope_codes]

    def allowed(
        self,
        scopes: frozenset[str],
        *,
        subset: str,
        speaker: str | None,
        self_only: bool | None,
        images: bool | None,
    ) -> npt.NDArray[np.bool_]:
        """``eligible`` rows whose scope is one of ``scopes``: all a retrieval without
        filters may return. Read-only: it is kept for the next search that asks."""
        key = (scopes, subset, speaker, self_only, images)
        found = self._allowed.get(key)
        if found is None:
            found = self.eligible(
                subset=subset, speaker=speaker, self_only=self_only, images=images
            ) & self.readable(scopes)
            found.flags.writeable = False
            if len(self._allowed) >= ALLOWED_KEPT:
                del self._allowed[next(iter(self._allowed))]
            self._allowed[key] = found
        return found

    def _speaker_mask(self, speaker: str) -> npt.NDArray[np.bool_]:
        found = self._speaker_masks.get(speaker)
        if found is None:
            found = np.array([s == speaker for s in self._speakers], dtype=bool)
            self._speaker_masks[speaker] = found
        return found

    def vector_arm(
        self, query: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_], limit: int
    ) -> Proposal:
        """Rows with a vector, by their best cosine (own or any chunk's), best first."""
        # Every row's cosine, then the unusable ones struck out: one pass over the
        # vectors, where selecting the usable rows first copies them all.
        sims = (self.vectors @ query).astype(np.float64)
        sims[~(mask & self.has_vector)] = -np.inf
        if len(self.chunk_rows):
            chunk_sims = (self.chunk_vectors @ query).astype(np.float64)
            chunk_sims[~mask[self.chunk_rows]] = -np.inf
            np.maximum.at(sims, self.chunk_rows, chunk_sims)
        return _best(sims, int(np.count_nonzero(np.isfinite(sims))), limit)

    def text_arm(self, lexemes: Sequence[str], mask: npt.NDArray[np.bool_], limit: int) -> Proposal:
        """Rows holding any of the query's lexemes, by BM25, best first (ties by id); of
        those in the store, the ``MAX_QUERY_TERMS`` rarest, as the SQL arm takes them."""
        scores = np.zeros(len(self.ids), dtype=np.float64)
        matched = np.zeros(len(self.ids), dtype=bool)
        present = [(len(p[0]), w) for w in set(lexemes) if (p := self.postings.get(w)) is not None]
        for _, lexeme in sorted(present)[:MAX_QUERY_TERMS]:
            rows, tf = self.postings[lexeme]
            df = float(len(rows))
            idf = math.log(1 + (max(self.docs, df) - df + 0.5) / (df + 0.5))
            scores[rows] += idf * (tf * (K1 + 1)) / (tf + self.norm_length[rows])
            matched[rows] = True
        matched &= mask
        scores[~matched] = -np.inf
        return _best(scores, int(np.count_nonzero(matched)), limit)

    def own_cosines(self, query: npt.NDArray[np.float32], rows: list[int]) -> list[float | None]:
        """Each row's own vector's cosine with the query (``None``: no vector yet), as the
        SQL reports it for a candidate of the full-text arm alone."""
        sims = (self.vectors[rows] @ query).tolist() if rows else []
        return [s if has else None for s, has in zip(sims, self.has_vector[rows], strict=True)]

    def candidate(
        self,
        row: int,
        record: asyncpg.Record,
        cosine: float | None,
        in_vec: bool,
        fts_rank: float | None,
    ) -> Candidate:
        r = record
        # By position, in CANDIDATE_COLUMNS' order, which is Candidate's (positional
        # arguments: a tenth of the cost of keywords).
        # Kept unformatted: sixteen fields one per line would hide their order.
        return Candidate(
            r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9],
            max(r[10], self.last_used[row]), cosine, in_vec, fts_rank, r[11], r[12],
        )  # fmt: skip


def _best(scores: npt.NDArray[np.float64], finite: int, limit: int) -> Proposal:
    """The ``limit`` best rows (of the ``finite`` with a score), best first, ties by id
    (rows are in id order)."""
    take = min(limit, finite)
    if take == 0:
        return NOTHING
    # Every row scoring at least the take-th best score, so that rows tied at the cut are
    # chosen by id as the SQL arms choose them, not as a partition happens to leave them.
    cut = -np.partition(-scores, take - 1)[take - 1]
    top = np.flatnonzero(scores >= cut)
    top = top[np.lexsort((top, -scores[top]))][:take]
    return Proposal(top.tolist(), scores[top].tolist(), take == finite)


@dataclass(frozen=True)
class Reader:
    """What a snapshot search needs to know of its reader: the key, and which of the
    snapshot's scopes the store lookup found it may read (``None``: not asked)."""

    principal: Principal
    scopes: frozenset[str] | None


def _assemble(
    snap: Snapshot,
    query_vector: npt.NDArray[np.float32],
    vec: Proposal,
    text: Proposal,
    records: dict[int, asyncpg.Record],
) -> list[Candidate]:
    vec_score = dict(zip(vec.rows, vec.scores, strict=True))
    text_score = dict(zip(text.rows, text.scores, strict=True))
    text_only = [row for row in text.rows if row not in vec_score]
    cosine: dict[int, float | None] = {**vec_score}
    cosine.update(zip(text_only, snap.own_cosines(query_vector, text_only), strict=True))
    return [
        snap.candidate(row, records[row], cosine[row], row in vec_score, text_score.get(row))
        for row in (*vec.rows, *text_only)
    ]


def in_memory(reader: Reader, filters: SearchFilters) -> bool:
    """Whether a snapshot answers a retrieval alone: the store lookup said which of its
    scopes the reader may read, and no filter asks for more than the snapshot knows."""
    return reader.scopes is not None and filters == UNFILTERED


async def candidates(
    connect: Callable[[], Awaitable[asyncpg.Connection]],
    snap: Snapshot,
    reader: Reader,
    retrieval: RetrievalRequest,
) -> list[Candidate] | None:
    """Both arms' candidates, as ``service.queries.search.candidates`` finds them: each
    arm's best ``per_arm`` of the memories that pass the search predicate. ``None`` where
    the SQL arms must answer: the predicate passed too few of what an arm proposed, and
    the arm had more to propose. ``connect``: a connection, for proposals to check (an
    answer from memory alone takes none)."""
    assert retrieval.vector is not None
    if in_memory(reader, retrieval.filters):
        assert reader.scopes is not None
        return _from_memory(snap, reader.scopes, retrieval, retrieval.vector)
    return await _checked(connect, snap, retrieval, retrieval.vector)


def _from_memory(
    snap: Snapshot,
    scopes: frozenset[str],
    retrieval: RetrievalRequest,
    vector: npt.NDArray[np.float32],
) -> list[Candidate]:
    """The whole predicate, known here: liveness (the snapshot holds active rows at the
    store's current version), readability (by ``scopes``, those the reader may read), and
    no filter."""
    mask = snap.allowed(
        scopes,
        subset=retrieval.subset,
        speaker=retrieval.speaker,
        self_only=retrieval.self_only,
        images=retrieval.images,
    )
    per_arm = retrieval.per_arm
    vec = snap.vector_arm(vector, mask, per_arm)
    text = snap.text_arm(retrieval.profile.lexemes, mask, per_arm) if retrieval.use_fts else NOTHING
    return _assemble(snap, vector, vec, text, {row: snap.rows[row] for row in vec.rows + text.rows})


async def _checked(
    connect: Callable[[], Awaitable[asyncpg.Connection]],
    snap: Snapshot,
    retrieval: RetrievalRequest,
    vector: npt.NDArray[np.float32],
) -> list[Candidate] | None:
    """Proposed, then checked. Everything proposed passes for a service key without
    filters (unless a write lands meanwhile); a filter or a narrower reader passes fewer."""
    mask = snap.eligible(
        subset=retrieval.subset,
        speaker=retrieval.speaker,
        self_only=retrieval.self_only,
        images=retrieval.images,
    )
    per_arm = retrieval.per_arm
    unfiltered = retrieval.principal.is_service and retrieval.filters == UNFILTERED
    reach = per_arm if unfiltered else 3 * per_arm
    vec = snap.vector_arm(vector, mask, reach)
    text = snap.text_arm(retrieval.profile.lexemes, mask, reach) if retrieval.use_fts else NOTHING
    proposed = [snap.ids[row] for row in dict.fromkeys(vec.rows + text.rows)]
    passed = await snapshot_sql.readable(
        await connect(), retrieval.subset, predicate_values(retrieval), proposed
    )
    vec_kept, text_kept = _kept(snap, vec, passed, per_arm), _kept(snap, text, passed, per_arm)
    if vec_kept is None or text_kept is None:
        return None
    records = {row: passed[snap.ids[row]] for row in vec_kept.rows + text_kept.rows}
    return _assemble(snap, vector, vec_kept, text_kept, records)


def _kept(
    snap: Snapshot, arm: Proposal, passed: dict[str, asyncpg.Record], per_arm: int
) -> Proposal | None:
    """The arm's best ``per_arm`` of the rows that ``passed`` the check; ``None`` when
    fewer passed and the arm had more to propose."""
    rows, scores = [], []
    for row, score in zip(arm.rows, arm.scores, strict=True):
        if snap.ids[row] in passed:
            rows.append(row)
            scores.append(score)
            if len(rows) == per_arm:
                return Proposal(rows, scores, False)
    return Proposal(rows, scores, True) if arm.complete else None


class Snapshots:
    """The service's snapshots, and their reading in the background."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        max_bytes: int,
        reload_s: float = 1.0,
        max_age_s: float = 60.0,
        sweep_s: float = 1.0,
    ) -> None:
        self.pool = pool
        self.max_bytes = max_bytes
        self.reload_s = reload_s
        self.max_age_s = max_age_s
        self.sweep_s = sweep_s
        self._sweeper: asyncio.Task[None] | None = None
        self._by_store: OrderedDict[tuple[str, str], Snapshot] = OrderedDict()
        self._bytes = 0
        self._reading: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._next_read: dict[tuple[str, str], float] = {}  # not before, by store
        # What a store reference (an id or a name, as a search names it) resolved to last.
        self._refs: OrderedDict[tuple[str, str], str] = OrderedDict()

    def guess(self, workspace_id: str, ref: str) -> Snapshot | None:
        """The snapshot of the store ``ref`` named last time, if one is held (the store
        lookup then says whether it is still that store, at that version)."""
        store_id = self._refs.get((workspace_id, ref))
        return None if store_id is None else self._by_store.get((workspace_id, store_id))

    def fresh(self, workspace_id: str, ref: str, store_id: str, version: int) -> Snapshot | None:
        """The store's snapshot if it is exact for ``version`` and young enough; else
        ``None``, and a new one is read in the background."""
        refs = self._refs
        refs[workspace_id, ref] = store_id
        refs.move_to_end((workspace_id, ref))
        while len(refs) > 10_000:
            refs.popitem(last=False)
        key = (workspace_id, store_id)
        found = self._by_store.get(key)
        if found is None or found.version != version or found.age() > self.max_age_s:
            self._request_read(key)
            return None
        self._by_store.move_to_end(key)
        found.used_at = time.monotonic()
        return found

    def drop_workspace(self, workspace_id: str) -> None:
        """Forget the workspace's snapshots now: an erasure took text they may hold (the
        next search of each store reads a new one)."""
        for key in [k for k in self._by_store if k[0] == workspace_id]:
            self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        self._bytes -= self._by_store.pop(key).nbytes

    async def sweep(self) -> int:
        """Drop the snapshots of stores changed since they were read: how many."""
        held = list(self._by_store)
        if not held:
            return 0
        async with self.pool.acquire() as conn:
            now = await snapshot_sql.versions(conn, held)
        stale = [
            k for k, snap in self._by_store.items() if now.get(k, snap.version) != snap.version
        ]
        for key in stale:
            self._drop(key)
        return len(stale)

    async def _sweep_while_held(self) -> None:
        """``sweep`` every ``sweep_s`` until nothing is held (``_put`` starts it again)."""
        while self._by_store:
            await asyncio.sleep(self.sweep_s)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database away: the next sweep tries again
                log.debug(
                    "could not check the snapshots' versions", extra={"error": type(exc).__name__}
                )

    def touch(self, workspace_id: str, store_id: str, ids: Iterable[str], at: datetime) -> None:
        found = self._by_store.get((workspace_id, store_id))
        if found is not None:
            found.touch(ids, at)

    def _request_read(self, key: tuple[str, str]) -> None:
        """Read the store's snapshot again in the background, unless one is being read or
        the last read is too recent: ``reload_s`` ago, or ten times as long as that read
        took (a store written to all the time costs at most a tenth of a core in reads)."""
        if self.max_bytes <= 0:
            return
        now = time.monotonic()
        if key in self._reading or now < self._next_read.get(key, -math.inf):
            return
        if self._no_room(now):
            return  # no room but what recent searches use: reading would only thrash
        if len(self._next_read) > 10_000:  # forget stores that may be read again anyway
            self._next_read = {k: t for k, t in self._next_read.items() if t > now}
        self._next_read[key] = now + self.reload_s
        self._reading[key] = asyncio.create_task(self._read(key), name="mneme-snapshot-read")

    def _no_room(self, now: float) -> bool:
        """Whether the held snapshots fill the memory allowed and even the least recently
        used was used in the last ``max_age_s`` (more small stores searched than fit)."""
        if self._bytes < 0.9 * self.max_bytes or not self._by_store:
            return False
        oldest = next(iter(self._by_store.values()))
        return now - oldest.used_at < self.max_age_s

    async def _read(self, key: tuple[str, str]) -> None:
        started = time.monotonic()
        try:
            async with self.pool.acquire() as conn:
                columns = await snapshot_sql.load(conn, *key)
            # Built in a thread: for a store of 20,000 memories that is tens of ms of Python.
            self._put(key, await asyncio.to_thread(Snapshot, columns))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the SQL arms answer meanwhile; a later search retries
            log.warning("could not read a search snapshot", extra={"error": type(exc).__name__})
        finally:
            self._reading.pop(key, None)
            took = time.monotonic() - started
            self._next_read[key] = max(self._next_read.get(key, 0.0), started + 10 * took)

    def _put(self, key: tuple[str, str], snap: Snapshot) -> None:
        old = self._by_store.pop(key, None)
        if old is not None:
            self._bytes -= old.nbytes
        if snap.nbytes > self.max_bytes:
            return
        self._by_store[key] = snap
        self._bytes += snap.nbytes
        while self._bytes > self.max_bytes:
            _, evicted = self._by_store.popitem(last=False)
            self._bytes -= evicted.nbytes
        if self.sweep_s > 0 and (self._sweeper is None or self._sweeper.done()):
            self._sweeper = asyncio.create_task(
                self._sweep_while_held(), name="mneme-snapshot-sweep"
            )

    @property
    def held_bytes(self) -> int:
        return self._bytes

    async def settled(self) -> None:
        """Wait for the reads in progress (tests, benchmarks)."""
        while self._reading:
            await asyncio.gather(*self._reading.values(), return_exceptions=True)

    async def close(self) -> None:
        tasks: list[Any] = list(self._reading.values())
        if self._sweeper is not None:
            tasks.append(self._sweeper)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
