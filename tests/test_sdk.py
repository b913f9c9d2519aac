"""The Python SDK (clients/python) against a real ``mneme serve``: one subprocess on
embedded PostgreSQL for the module, its embedding worker on.

A blocking httpx client cannot call an aiohttp server on its own event loop, hence the
subprocess. The retry tests wrap httpx's real transport: every request still reaches the
service; the wrapper only replaces an answer (or adds one before the real call).
"""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from mneme_client import (
    APIError,
    AsyncMneme,
    AuthenticationError,
    ConflictError,
    Hit,
    InvalidRequestError,
    Mneme,
    MnemeError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
)

from bench.common import Server
from tests.helpers import BOOTSTRAP_KEY, free_workspace_key, repo_root, serving

PNG = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAA="  # PNG magic, as tests/test_search.py


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("sdk")) as srv:
        yield srv


@pytest.fixture
def client(server: Server) -> Iterator[Mneme]:
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as c:
        yield c


@pytest.fixture
async def aclient(server: Server) -> AsyncIterator[AsyncMneme]:
    async with AsyncMneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as c:
        yield c


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def embedded(server: Server, within_s: float = 120) -> None:
    """Wait until the worker has embedded everything written so far."""
    deadline = time.monotonic() + within_s
    while httpx.get(f"{server.base}/readyz").json()["embeddingQueue"] != 0:
        assert time.monotonic() < deadline, "the embedding queue did not drain"
        time.sleep(0.2)


def admin_post(server: Server, path: str, body: object) -> httpx.Response:
    headers = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    resp = httpx.post(server.base + path, json=body, headers=headers)
    assert resp.status_code in (200, 201), resp.text
    return resp


# --- memories -----------------------------------------------------------------------------


def test_add_get_update_versions_delete_round_trip_with_snake_case_fields(
    client: Mneme,
) -> None:
    store = client.stores.create(unique("sdk-crud")).name
    when = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    m = client.add(
        "Dave prefers squash merges.", store=store, fact_type="world", importance=0.8,
        entity_refs=["dave"], event_date=when, proof_count=2, metadata={"src": "sdk"},
    )  # fmt: skip
    assert m.id.startswith("mem_") and m.text == "Dave prefers squash merges."
    assert (m.scope, m.fact_type, m.speaker) == ("workspace", "world", None)
    assert m.store is not None and m.store.startswith("memstore_")
    assert m.embedding_status in ("pending", "ready")
    assert m.raw["entityRefs"] == ["dave"] and m.raw["proofCount"] == 2
    assert m.raw["eventDate"].startswith("2026-03-01T12:30:00")

    assert client.get(m.id).text == m.text
    changed = client.update(m.id, text="Dave prefers rebase merges.", fact_type=None)
    assert (changed.text, changed.fact_type) == ("Dave prefers rebase merges.", None)
    assert client.get(m.id).text == "Dave prefers rebase merges."

    versions = client.versions(m.id)
    assert [v.operation for v in versions] == ["modified", "created"]  # newest first
    assert versions[0].created_at >= versions[1].created_at

    # The whole trail, whatever its length: the service answers it 100 versions a page.
    for i in range(110):
        client.update(m.id, metadata={"n": str(i)})
    trail = client.versions(m.id)
    assert len(trail) == 112 and len({v.id for v in trail}) == 112
    assert [v.operation for v in trail[-2:]] == ["modified", "created"]

    client.delete(m.id)
    assert client.get(m.id).raw["status"] == "deleted"  # the tombstone
    client.delete(m.id, purge=True)
    with pytest.raises(NotFoundError):
        client.get(m.id)


def test_add_many_writes_a_batch_in_request_order(client: Mneme) -> None:
    store = client.stores.create(unique("sdk-batch")).name
    items = [{"text": f"Batch fact {i}", "store": store, "fact_type": "world"} for i in range(5)]
    written = client.add_many(items)
    assert [m.text for m in written] == [f"Batch fact {i}" for i in range(5)]
    assert all(m.fact_type == "world" for m in written)
    assert len({m.id for m in written}) == 5


def test_browse_follows_the_cursor_across_pages_and_never_repeats_an_id(client: Mneme) -> None:
    store = client.stores.create(unique("sdk-browse")).name
    written = client.add_many([{"text": f"note {i} {'even' if i % 2 == 0 else 'odd'}",
                                "store": store} for i in range(9)])  # fmt: skip
    seen = [m.id for m in client.browse(limit=2, store=store)]
    assert len(seen) == len(set(seen)) == 9
    assert set(seen) == {m.id for m in written}
    # A filter leaves pages short (even empty) while more follow: still every match.
    evens = [m for m in client.browse(limit=2, store=store, search="even")]
    assert sorted(m.text for m in evens) == sorted(f"note {i} even" for i in range(0, 9, 2))
    assert all(m.store is None and m.scope == "workspace" for m in evens)  # browse's shape


# --- search -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def search_store(server: Server) -> str:
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as c:
        store = c.stores.create(unique("sdk-search")).name
        facts = [f"Project fact {i}: the build uses cache layer {i}." for i in range(12)]
        c.add_many([{"text": t, "store": store} for t in facts])
        c.add("Alice drinks oat milk flat whites every morning.", store=store, importance=0.9)
        c.add("I promised Alice a report on her coffee order.", store=store, speaker="me")
    image = {"text": "A photo of Alice's coffee cup", "store": store,
             "image": {"data": PNG, "mimeType": "image/png"}}  # fmt: skip
    admin_post(server, "/api/v1/memories", image)
    embedded(server)
    return store


def test_search_returns_one_list_memories_then_own_words_then_images(
    client: Mneme, search_store: str
) -> None:
    hits = client.search(search_store, "What does Alice drink?")
    assert all(isinstance(h, Hit) for h in hits)
    kinds = [h.kind for h in hits]
    assert kinds == sorted(kinds, key=["memory", "self", "image"].index)
    assert {"memory", "self", "image"} <= set(kinds)
    assert len({h.id for h in hits}) == len(hits)
    assert hits[0].content.startswith("Alice drinks oat milk")
    assert 0 < hits[0].similarity <= 1 and hits[0].raw["id"] == hits[0].id
    assert not any("verify_used" in h.raw for h in hits)


def test_search_full_keeps_the_parts_apart_and_sends_ten_by_default(
    client: Mneme, search_store: str
) -> None:
    full = client.search_full(search_store, "Which cache layer does the build use?")
    assert len(full.memories) == 10  # the SDK's default, not the service's 20
    assert [h.kind for h in full.self_memories] == ["self"]
    assert [h.kind for h in full.images] == ["image"]
    assert full.verify_used is None
    assert len(client.search_full(search_store, "build cache", 5).memories) == 5

    verified = client.search_full(search_store, "build cache", 5, verify=2)
    assert isinstance(verified.verify_used, int) and 0 <= verified.verify_used <= 2

    # model goes in X-WOS-Model: Scroll 1.2 keeps everything in memories.
    scroll = client.search_full(search_store, "Alice coffee", model="Scroll 1.2")
    assert scroll.self_memories == [] and scroll.images == []
    assert "self_memories" not in scroll.raw


def test_search_filters_take_datetimes_as_the_typescript_sdk_takes_dates(
    client: Mneme, search_store: str
) -> None:
    everything = client.search_full(search_store, "Alice coffee", 5)
    since = {"created_after": datetime(2000, 1, 1, tzinfo=UTC)}
    assert client.search_full(search_store, "Alice coffee", 5, filters=since).memories == (
        everything.memories
    )
    future = {"created_after": datetime.now(UTC) + timedelta(days=1)}
    assert client.search_full(search_store, "Alice coffee", 5, filters=future).memories == []


def test_speakers_are_registered_listed_and_removed(client: Mneme) -> None:
    store = client.stores.create(unique("sdk-speakers")).name
    with pytest.raises(NotFoundError, match="Caroline"):  # unregistered: the API's 404
        client.add("I went to a support group.", store=store, speaker="Caroline")
    assert client.speakers.add("Caroline", store) == "Caroline"
    said = client.add("I went to a support group.", store=store, speaker="Caroline")
    assert said.speaker == "Caroline"
    assert client.speakers.list(store) == ["me", "Caroline"]
    with pytest.raises(ConflictError):
        client.speakers.add("Caroline", store)
    with pytest.raises(ConflictError):
        client.speakers.delete("me", store)
    client.speakers.delete("Caroline", store)
    assert client.speakers.list(store) == ["me"]
    assert client.speakers.list() == ["me"]  # the default store's


def test_a_naive_datetime_is_local_time_as_the_typescript_sdk_sends_a_date(
    client: Mneme, monkeypatch: pytest.MonkeyPatch
) -> None:
    # datetime.now() on a machine in New York: the instant it names, not that clock in UTC.
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        m = client.add("written at noon in New York", event_date=datetime(2026, 1, 5, 12, 0))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert m.raw["eventDate"] == "2026-01-05T17:00:00.000Z"


def test_a_string_utf8_cannot_carry_is_the_apis_400(client: Mneme) -> None:
    with pytest.raises(InvalidRequestError) as refused:  # as the TypeScript SDK gets it
        client.add("half a pair: \ud800")
    assert refused.value.status == 400


def test_search_self_returns_only_the_agents_own_words(client: Mneme, search_store: str) -> None:
    own = client.search_self(search_store, "What did I promise Alice?")
    assert [h.content for h in own] == ["I promised Alice a report on her coffee order."]
    assert own[0].kind == "self" and own[0].raw["speaker"] == "me"
    scroll = client.search_self(search_store, "promise", model="Scroll 1.2")
    assert [h.id for h in scroll] == [h.id for h in own] and scroll[0].kind == "self"


# --- memory stores ------------------------------------------------------------------------


def test_store_and_path_memory_metadata_and_strip_temporal(client: Mneme) -> None:
    store = client.stores.create(unique("sdk-meta"), metadata={"team": "infra"},
                                 strip_temporal=True)  # fmt: skip
    assert store.raw["metadata"] == {"team": "infra"} and store.raw["strip_temporal"] is True
    note = client.stores.write(store.id, "runbook.md", "Restart the worker.",
                               metadata={"owner": "dana"})  # fmt: skip
    assert note.metadata == {"owner": "dana"}
    moved = client.stores.update(store.id, note.id, metadata={"owner": "eve"})
    assert (moved.metadata, moved.content) == ({"owner": "eve"}, "Restart the worker.")
    [listed] = client.stores.list_memories(store.id)
    assert listed.metadata == {"owner": "eve"}
    hit = client.search_full(store.id, "restart the worker").memories[0]
    assert "created_at" not in hit.raw and "time_bucket" not in hit.raw


def test_stores_create_list_get_write_read_update_delete(client: Mneme) -> None:
    name = unique("sdk-store")
    store = client.stores.create(name, description="decisions")
    assert store.id.startswith("memstore_") and (store.name, store.description) == (
        name,
        "decisions",
    )
    assert store.id in {s.id for s in client.stores.list()}
    assert client.stores.get(name).id == client.stores.get(store.id).id == store.id

    note = client.stores.write(store.id, "decisions/merging.md", "Squash merges only.")
    assert (note.path, note.content) == ("decisions/merging.md", "Squash merges only.")
    assert client.stores.read(store.id, note.id) == note

    newer = client.stores.update(
        store.id, note.id, content="Squash; rebase one-commit PRs.",
        content_sha256=note.content_sha256,
    )  # fmt: skip
    assert newer.content_sha256 != note.content_sha256

    with pytest.raises(ConflictError) as stale:
        client.stores.update(store.id, note.id, content="lost", content_sha256=note.content_sha256)
    assert stale.value.status == 409 and stale.value.type == "conflict_error"
    assert client.stores.read(store.id, note.id).content == "Squash; rebase one-commit PRs."

    with pytest.raises(InvalidRequestError):  # a path never changes
        client.stores.update(store.id, note.id, path="elsewhere.md")
    with pytest.raises(ConflictError):  # the path is taken
        client.stores.write(store.id, "decisions/merging.md", "again")
    with pytest.raises(ConflictError):  # it still holds a memory
        client.stores.delete(store.id)
    client.stores.delete(store.id, force=True)
    with pytest.raises(NotFoundError):
        client.stores.get(store.id)


def test_list_memories_pages_through_a_path_prefix(client: Mneme) -> None:
    store = client.stores.create(unique("sdk-paths"))
    for i in range(5):
        client.stores.write(store.id, f"notes/{i}.md", f"note {i}")
    client.stores.write(store.id, "notesX.md", "beside the prefix")
    client.stores.write(store.id, "other/a.md", "elsewhere")

    listed = list(client.stores.list_memories(store.id, path_prefix="notes/", limit=2))
    assert [m.path for m in listed] == [f"notes/{i}.md" for i in range(5)]
    assert all(m.content is None and len(m.content_sha256) == 64 for m in listed)
    everything = [m.path for m in client.stores.list_memories(store.id)]
    assert everything == sorted(everything) and len(everything) == 7


# --- errors -------------------------------------------------------------------------------


def test_each_error_class_comes_from_a_real_answer(server: Server, client: Mneme) -> None:
    bad = Mneme(api_key="not-a-key-0123456789", base_url=server.base)
    with bad, pytest.raises(AuthenticationError) as auth:
        bad.get("mem_0000000000000000")
    assert (auth.value.status, auth.value.type) == (401, "authentication_error")
    assert auth.value.request_id is not None and auth.value.request_id.startswith("req_")

    with pytest.raises(NotFoundError) as missing:
        client.get("mem_0000000000000000")
    assert missing.value.status == 404 and "not found" in missing.value.message
    assert "404 not_found_error" in str(missing.value)

    with pytest.raises(InvalidRequestError) as invalid:
        client.search("default", "anything", max_results=50)
    assert (invalid.value.status, invalid.value.type) == (400, "invalid_request_error")
    with pytest.raises(InvalidRequestError):
        client.add("x", importance=7)

    secret = admin_post(server, "/api/v1/keys", {"kind": "service", "scopes": ["memory:read"]})
    reader = Mneme(api_key=secret.json()["key"], base_url=server.base)
    with reader, pytest.raises(PermissionDeniedError) as denied:
        reader.add("not allowed")
    assert (denied.value.status, denied.value.type) == (403, "permission_error")

    gone = Mneme(api_key="k", base_url="http://127.0.0.1:9", max_retries=0)
    with gone, pytest.raises(MnemeError) as nobody:  # no answer at all
        gone.get("mem_x")
    assert nobody.value.status is None and nobody.value.type == "connection_error"


def test_a_key_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MNEME_API_KEY", raising=False)
    with pytest.raises(AuthenticationError, match="MNEME_API_KEY") as missing:
        Mneme()
    assert (missing.value.status, missing.value.type) == (None, "authentication_error")


def test_no_answer_within_the_timeout_is_an_api_error() -> None:
    # A listener that never accepts: the connection opens (the kernel's backlog), no answer.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        started = time.monotonic()
        for client in (Mneme, AsyncMneme):
            made = client(api_key="k", base_url=f"http://127.0.0.1:{port}", timeout=0.3,
                          max_retries=0)  # fmt: skip
            with pytest.raises(APIError) as late:
                if isinstance(made, AsyncMneme):
                    asyncio.run(made.get("mem_x"))
                else:
                    made.get("mem_x")
            assert (late.value.status, late.value.type) == (None, "timeout_error")
            assert "within 0.3 s" in late.value.message
        assert time.monotonic() - started < 10


def test_a_real_rate_limit_is_a_rate_limit_error(server: Server) -> None:
    # tier free: 60 requests a minute
    secret = asyncio.run(free_workspace_key(server.database_url(), unique("sdk-free")))
    c = Mneme(api_key=secret, base_url=server.base, max_retries=0)
    with c, pytest.raises(RateLimitError) as limited:
        for _ in range(70):
            with pytest.raises(NotFoundError):
                c.get("mem_0000000000000000")
    assert (limited.value.status, limited.value.type) == (429, "rate_limit_error")


# --- retries ------------------------------------------------------------------------------


class Recorder(httpx.BaseTransport):
    """httpx's real transport, remembering each request and answer. ``before``: answers
    given instead of sending (the service never sees those requests); ``after``: answers
    given after sending (the service did the work; the client hears this instead)."""

    def __init__(
        self, before: list[httpx.Response] | None = None, after: list[httpx.Response] | None = None
    ) -> None:
        self.real = httpx.HTTPTransport()
        self.before, self.after = before or [], after or []
        self.requests: list[httpx.Request] = []
        self.responses: list[httpx.Response] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.before:
            response = self.before.pop(0)
        else:
            response = self.real.handle_request(request)
            if self.after:
                response.read()
                response.close()
                response = self.after.pop(0)
        self.responses.append(response)
        return response


def unavailable(retry_after: str = "0") -> httpx.Response:
    body = {"type": "error", "error": {"type": "api_error", "message": "unavailable"}}
    return httpx.Response(503, json=body, headers={"Retry-After": retry_after})


def test_a_write_retried_after_a_503_is_not_written_twice(server: Server, client: Mneme) -> None:
    store = client.stores.create(unique("sdk-retry")).name
    wire = Recorder(after=[unavailable()])  # written, but the client hears a 503
    with Mneme(BOOTSTRAP_KEY, server.base, http_client=httpx.Client(transport=wire)) as c:
        m = c.add("Written once, acknowledged on the retry.", store=store)
    first, second = wire.requests
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"] != ""
    assert first.content == second.content
    assert wire.responses[1].headers["Idempotent-Replayed"] == "true"
    # A second real write of the same text would have deduplicated: proofCount 2.
    stored = [x for x in client.browse(store=store)]
    assert [x.id for x in stored] == [m.id] and stored[0].raw["proofCount"] is None


def test_429_is_retried_after_its_retry_after(server: Server) -> None:
    limited = httpx.Response(
        429, headers={"Retry-After": "1"},
        json={"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
    )  # fmt: skip
    wire = Recorder(before=[limited])
    with Mneme(BOOTSTRAP_KEY, server.base, http_client=httpx.Client(transport=wire)) as c:
        started = time.monotonic()
        m = c.add(unique("after a 429"))
        assert time.monotonic() - started >= 1.0
    assert len(wire.requests) == 2 and c.get(m.id).id == m.id


def test_retries_stop_after_max_retries(server: Server) -> None:
    wire = Recorder(before=[unavailable() for _ in range(3)])
    client = httpx.Client(transport=wire)
    c = Mneme(BOOTSTRAP_KEY, server.base, max_retries=1, http_client=client)
    with c, pytest.raises(APIError) as failed:
        c.get("mem_0000000000000000")
    assert failed.value.status == 503 and len(wire.requests) == 2
    assert not client.is_closed  # a client passed in stays open
    client.close()


# --- async --------------------------------------------------------------------------------


class AsyncRecorder(httpx.AsyncBaseTransport):
    """``Recorder``'s ``after`` for ``httpx.AsyncClient``."""

    def __init__(self, after: list[httpx.Response]) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.after = after
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        response = await self.real.handle_async_request(request)
        if self.after:
            await response.aread()
            await response.aclose()
            return self.after.pop(0)
        return response


async def test_async_client_writes_searches_browses_and_lists(
    server: Server, aclient: AsyncMneme
) -> None:
    store = (await aclient.stores.create(unique("sdk-async"))).name
    m = await aclient.add("Async Alice keeps bees on the roof.", store=store, fact_type="world")
    assert (m.text, m.fact_type) == ("Async Alice keeps bees on the roof.", "world")
    more = await aclient.add_many([{"text": f"async note {i}", "store": store} for i in range(4)])
    assert (await aclient.get(more[0].id)).text == "async note 0"

    seen = [x.id async for x in aclient.browse(limit=2, store=store)]
    assert sorted(seen) == sorted([m.id, *(x.id for x in more)])

    hits = await aclient.search(store, "Who keeps bees?")
    assert hits[0].id == m.id and hits[0].kind == "memory"
    assert (await aclient.search_full(store, "bees")).memories[0].id == m.id

    for i in range(3):
        await aclient.stores.write(store, f"a/{i}.md", f"page {i}")
    paths = [x.path async for x in aclient.stores.list_memories(store, "a/", limit=2)]
    assert paths == ["a/0.md", "a/1.md", "a/2.md"]
    assert store in {s.name for s in await aclient.stores.list()}

    with pytest.raises(NotFoundError):
        await aclient.get("mem_0000000000000000")

    assert await aclient.speakers.add("Dana", store) == "Dana"
    assert await aclient.speakers.list(store) == ["me", "Dana"]
    await aclient.speakers.delete("Dana", store)
    assert await aclient.speakers.list(store) == ["me"]


async def test_async_write_retried_after_a_503_is_not_written_twice(server: Server) -> None:
    wire = AsyncRecorder(after=[unavailable()])
    http = httpx.AsyncClient(transport=wire)
    async with AsyncMneme(BOOTSTRAP_KEY, server.base, http_client=http) as c:
        m = await c.add(unique("async once"))
        assert (await c.get(m.id)).raw["proofCount"] is None
    first, second = wire.requests[:2]
    assert first.headers["Idempotency-Key"] == second.headers["Idempotency-Key"]
    await http.aclose()


# --- the README ---------------------------------------------------------------------------


def test_the_readme_quickstart_runs_as_written(server: Server, tmp_path: Path) -> None:
    readme = (repo_root() / "clients" / "python" / "README.md").read_text()
    script = re.search(r"```python\n(.*?)```", readme, re.S)
    assert script is not None
    path = tmp_path / "quickstart.py"
    path.write_text(script.group(1))
    env = {"MNEME_API_KEY": BOOTSTRAP_KEY, "MNEME_URL": server.base, "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "refused:" in out.stdout and "decisions/merging.md" in out.stdout
