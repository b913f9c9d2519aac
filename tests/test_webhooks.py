"""Webhooks: the outbox, the dispatcher, signatures, retries and outbound safety.

A receiver on loopback (``Receiver``) takes the deliveries of the test app's own
dispatcher (``MNEME_WEBHOOK_ALLOW_PRIVATE`` on, as a receiver on the same machine needs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from embeddings.model import SentenceTransformerEmbedder
from embeddings.worker import Worker
from service.app_keys import POOL
from service.settings import Settings
from service.webhooks import outbound
from service.webhooks.signing import signature, verify
from tests.helpers import ADMIN, Client, auth, make_key, make_member, repo_root

HOOKS = "/api/v1/webhooks"
ALL = ["memory.created", "memory.updated", "memory.deleted", "memory.embedded"]


@dataclasses.dataclass
class Got:
    headers: dict[str, str]
    body: bytes

    @property
    def event(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.body)
        return out


class Receiver:
    """An endpoint on 127.0.0.1 that notes every request; ``answers`` (statuses, or
    callables making a response) are used up first, then 200."""

    def __init__(self) -> None:
        self.got: list[Got] = []
        self.elsewhere: list[str] = []  # requests to any other path
        self.answers: list[int | Callable[[], Awaitable[web.StreamResponse]]] = []
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        app.router.add_route("*", "/{tail:.*}", self._other)
        self.server = TestServer(app, host="127.0.0.1")

    @property
    def url(self) -> str:
        return str(self.server.make_url("/hook"))

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        self.got.append(Got(dict(request.headers), await request.read()))
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, int):
                return web.Response(status=answer, text="not now")
            return await answer()
        return web.Response(status=200)

    async def _other(self, request: web.Request) -> web.StreamResponse:
        self.elsewhere.append(request.path)
        return web.Response(status=200)

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        return [g.event for g in self.got if type_ is None or g.event["type"] == type_]

    async def wait_for(self, count: int) -> list[Got]:
        deadline = time.monotonic() + 15
        while len(self.got) < count:
            assert time.monotonic() < deadline, [g.event["type"] for g in self.got]
            await asyncio.sleep(0.05)
        return self.got


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.server.start_server()
    yield r
    await r.server.close()


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(
        database_url=db_url, bootstrap_key="test-bootstrap-key-0123456789", worker=False,
        pool_min=1, pool_max=4, webhook_allow_private=True,
    )  # fmt: skip


async def hook(client: Client, url: str, key: dict[str, str] = ADMIN, **body: Any) -> Any:
    resp = await client.post(HOOKS, json={"url": url, "events": ALL, **body}, headers=key)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def write(client: Client, body: dict[str, Any], key: dict[str, str] = ADMIN) -> Any:
    resp = await client.post("/api/v1/memories", json=body, headers=key)
    assert resp.status == 201, await resp.text()
    return await resp.json()


async def deliveries(client: Client, webhook: str, **query: str) -> Any:
    resp = await client.get(f"{HOOKS}/{webhook}/deliveries", params=query, headers=ADMIN)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def settled(client: Client, webhook: str) -> list[dict[str, Any]]:
    """The delivery log once nothing in it is waiting to be sent now."""
    deadline = time.monotonic() + 15
    while True:
        log: list[dict[str, Any]] = (await deliveries(client, webhook, limit="100"))["data"]
        if all(d["state"] != "pending" or d["attempts"] > 0 for d in log):
            return log
        assert time.monotonic() < deadline, log
        await asyncio.sleep(0.05)


def readme_verify() -> Callable[[str, str, bytes], bool]:
    """The README's verification example, as a receiver would paste it."""
    text = (repo_root() / "README.md").read_text()
    after = text.split("**Verifying a delivery.**", 1)[1]
    code = after.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(code, scope)  # noqa: S102 - our own README
    check: Callable[[str, str, bytes], bool] = scope["verify"]
    return check


# --- the endpoints ------------------------------------------------------------------------


async def test_a_webhook_is_made_listed_and_deleted_and_its_secret_shown_once(
    client: Client, receiver: Receiver
) -> None:
    made = await hook(client, receiver.url, events=["memory.updated", "memory.created"])
    assert made["id"].startswith("whk_") and made["secret"].startswith("whsec_")
    assert made["events"] == ["memory.created", "memory.updated"]  # canonical order
    assert made["store"] is None and made["url"] == receiver.url
    listed = await (await client.get(HOOKS, headers=ADMIN)).json()
    assert listed["data"] == [{k: v for k, v in made.items() if k != "secret"}]
    assert listed["meta"] == {"pending": 0, "failedLastDay": 0}
    one = await client.get(f"{HOOKS}/{made['id']}", headers=ADMIN)
    assert "secret" not in await one.json()
    assert (await client.delete(f"{HOOKS}/{made['id']}", headers=ADMIN)).status == 204
    assert (await client.get(f"{HOOKS}/{made['id']}", headers=ADMIN)).status == 404
    assert (await client.delete(f"{HOOKS}/{made['id']}", headers=ADMIN)).status == 404


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"url": "ftp://example.com/x", "events": ALL}, "http or https"),
        ({"url": "not a url", "events": ALL}, "http or https"),
        ({"url": "http://user:pw@example.com/", "events": ALL}, "credentials"),
        ({"url": "http://[::1", "events": ALL}, "not a URL"),
        ({"url": "http://no-such-host.invalid/", "events": ALL}, "cannot resolve"),
        ({"url": "http://ä..example/", "events": ALL}, "not a valid host name"),
        ({"url": "http://example.com/" + "x" * 2048, "events": ALL}, "longer than"),
        ({"url": "http://127.0.0.1/", "events": []}, "may not be empty"),
        ({"url": "http://127.0.0.1/", "events": ["memory.read"]}, "memory.read"),
        ({"url": "http://127.0.0.1/", "events": ALL, "store": "nope"}, "No store"),
    ],
)
async def test_a_bad_webhook_is_a_400_and_makes_nothing(
    client: Client, body: dict[str, Any], message: str
) -> None:
    resp = await client.post(HOOKS, json=body, headers=ADMIN)
    assert resp.status == 400, await resp.text()
    assert message in (await resp.json())["error"]["message"]
    assert (await (await client.get(HOOKS, headers=ADMIN)).json())["data"] == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost:9/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://[fd00:ec2::254]/hook",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata service
        "http://[::127.0.0.1]/hook",  # IPv4-compatible
        "http://[::ffff:0:127.0.0.1]/hook",  # IPv4-translated (RFC 6145) of loopback
        "http://[::ffff:0:10.0.0.1]/hook",  # and of a private address
        "http://[2002:7f00:1::]/hook",  # 6to4 of loopback
        "http://[fec0::1]/hook",  # site-local
        "http://\uff11\uff12\uff17.0.0.1/hook",  # full-width digits, as yarl folds them
        "http://127.1/hook",  # forms aiohttp takes for an address without resolving
        "http://2130706433/hook",
        "http://127.0.0.1./hook",
    ],
)
async def test_private_addresses_are_refused_unless_allowed(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings, url: str
) -> None:
    client = await make_client(dataclasses.replace(settings, webhook_allow_private=False))
    resp = await client.post(HOOKS, json={"url": url, "events": ALL}, headers=ADMIN)
    assert resp.status == 400, await resp.text()
    message = (await resp.json())["error"]["message"]
    assert "not a public address" in message or "not an address in its usual form" in message


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "::ffff:0:8.8.8.8", "64:ff9b::808:808"],
)
def test_a_public_address_is_accepted_in_every_form_that_wraps_it(address: str) -> None:
    assert outbound.public(address)
    url = f"http://[{address}]/hook" if ":" in address else f"http://{address}/hook"
    assert outbound.url_problem(url, allow_private=False) is None


async def test_webhooks_need_the_admin_scope(client: Client, receiver: Receiver) -> None:
    key = auth(await make_key(client, kind="service", scopes=["memory:read", "memory:write"]))
    resp = await client.post(HOOKS, json={"url": receiver.url, "events": ALL}, headers=key)
    assert resp.status == 403
    assert (await client.get(HOOKS, headers=key)).status == 403
    # An admin key that reads no memory would have its webhook show what it may not GET.
    admin_only = auth(await make_key(client, kind="service", scopes=["admin"]))
    resp = await client.post(HOOKS, json={"url": receiver.url, "events": ALL}, headers=admin_only)
    assert resp.status == 400 and "memory:read" in (await resp.json())["error"]["message"]


async def test_a_workspace_has_at_most_25_webhooks_even_when_made_at_once(
    client: Client, receiver: Receiver
) -> None:
    body = {"url": receiver.url, "events": ALL}
    made = await asyncio.gather(*(client.post(HOOKS, json=body, headers=ADMIN) for _ in range(30)))
    assert sorted(r.status for r in made) == [201] * 25 + [409] * 5
    refused = next(r for r in made if r.status == 409)
    assert "at most 25 webhooks" in (await refused.json())["error"]["message"]
    listed = (await (await client.get(HOOKS, headers=ADMIN)).json())["data"]
    assert len(listed) == 25
    # A deleted one makes room for one more, and no more than one.
    assert (await client.delete(f"{HOOKS}/{listed[0]['id']}", headers=ADMIN)).status == 204
    again = await asyncio.gather(*(client.post(HOOKS, json=body, headers=ADMIN) for _ in range(3)))
    assert sorted(r.status for r in again) == [201, 409, 409]


# --- deliveries ---------------------------------------------------------------------------


async def test_every_change_is_delivered_signed_and_as_get_shows_it(
    client: Client, receiver: Receiver, embedder: SentenceTransformerEmbedder
) -> None:
    made = await hook(client, receiver.url)
    memory = await write(client, {"text": "Caroline moved to Lisbon in May."})
    [got] = await receiver.wait_for(1)
    event = got.event
    assert event["type"] == "memory.created" and event["id"].startswith("evt_")
    assert got.headers["Mneme-Event-Id"] == event["id"]
    assert verify(made["secret"], got.headers["Mneme-Signature"], got.body)
    assert not verify("whsec_another", got.headers["Mneme-Signature"], got.body)
    assert readme_verify()(made["secret"], got.headers["Mneme-Signature"], got.body)
    t = int(got.headers["Mneme-Signature"].split(",")[0].removeprefix("t="))
    assert abs(t - time.time()) < 30
    shown = await (await client.get(f"/api/v1/memories/{memory['id']}", headers=ADMIN)).json()
    assert {k: v for k, v in event["data"]["memory"].items() if k != "updatedAt"} == shown
    assert event["data"]["memory"]["updatedAt"] >= event["createdAt"][:19]

    resp = await client.patch(
        f"/api/v1/memories/{memory['id']}", json={"text": "Caroline moved to Porto."},
        headers=ADMIN,
    )  # fmt: skip
    assert resp.status == 200
    await receiver.wait_for(2)
    assert receiver.events()[1]["data"]["memory"]["text"] == "Caroline moved to Porto."

    await Worker(client.app[POOL], embedder).drain()
    await receiver.wait_for(3)
    [embedded] = receiver.events("memory.embedded")
    assert embedded["data"]["memory"]["embeddingStatus"] == "ready"

    assert (await client.delete(f"/api/v1/memories/{memory['id']}", headers=ADMIN)).status == 200
    other = await write(client, {"text": "A memory purged."})
    await receiver.wait_for(5)
    resp = await client.delete(f"/api/v1/memories/{other['id']}?purge=true", headers=ADMIN)
    assert resp.status == 200
    await receiver.wait_for(6)
    deleted = receiver.events("memory.deleted")
    assert [d["data"]["memory"]["id"] for d in deleted] == [memory["id"], other["id"]]
    assert all(set(d["data"]["memory"]) == {"id", "updatedAt"} for d in deleted)
    # Searches and browsing change nothing a receiver hears of.
    await client.get("/api/v1/memories", headers=ADMIN)
    await asyncio.sleep(1.0)
    assert len(receiver.got) == 6
    log = await settled(client, made["id"])
    assert [d["state"] for d in log] == ["delivered"] * 6
    assert [d["event"] for d in log] == sorted((e["id"] for e in receiver.events()), reverse=True)


async def test_an_event_whose_memory_is_gone_when_sent_is_skipped(
    client: Client, receiver: Receiver
) -> None:
    # Rendered as it is sent: a memory purged before its memory.created went out is not
    # sent after all (nothing of a purged or erased memory leaves after it is gone); its
    # memory.deleted is.
    made = await hook(client, receiver.url)
    receiver.answers = [500]
    memory = await write(client, {"text": "Gone before it was told."})
    await receiver.wait_for(1)
    resp = await client.delete(f"/api/v1/memories/{memory['id']}?purge=true", headers=ADMIN)
    assert resp.status == 200
    await client.app[POOL].execute("UPDATE webhook_deliveries SET next_attempt_at = now()")
    await receiver.wait_for(2)
    deadline = time.monotonic() + 15
    log = await settled(client, made["id"])
    while any(d["state"] == "pending" for d in log):
        assert time.monotonic() < deadline, log
        await asyncio.sleep(0.05)
        log = await settled(client, made["id"])
    assert [(d["type"], d["state"]) for d in log] == [
        ("memory.deleted", "delivered"), ("memory.created", "skipped"),
    ]  # fmt: skip
    assert [g.event["type"] for g in receiver.got] == ["memory.created", "memory.deleted"]


async def test_a_webhook_carries_only_what_its_key_may_read(
    client: Client, receiver: Receiver
) -> None:
    await make_member(client, "alice")
    await make_member(client, "bob")
    resp = await client.post(
        "/api/v1/rooms", json={"id": "ops", "members": ["alice"]}, headers=ADMIN
    )
    assert resp.status == 201
    scopes = ["memory:read", "memory:write", "admin"]
    alice = auth(await make_key(client, kind="personal", member="alice", scopes=scopes))
    bob = auth(await make_key(client, kind="personal", member="bob", scopes=scopes))
    for_alice = await hook(client, receiver.url + "?for=alice", alice)
    for_bob = await hook(client, receiver.url + "?for=bob", bob)
    secret = await write(client, {"text": "The ops vault code is 4471.", "scope": "room:ops"})
    shared = await write(client, {"text": "Lunch is at noon."})
    await receiver.wait_for(3)  # alice: both; bob: the one he may read
    resp = await client.delete(f"/api/v1/memories/{secret['id']}?purge=true", headers=ADMIN)
    assert resp.status == 200
    alice_log = await settled(client, for_alice["id"])
    bob_log = await settled(client, for_bob["id"])
    assert [d["state"] for d in alice_log] == ["delivered"] * 3
    assert sorted((d["type"], d["state"]) for d in bob_log) == [
        ("memory.created", "delivered"), ("memory.created", "skipped"),
        ("memory.deleted", "skipped"),
    ]  # fmt: skip
    to_bob = [
        g for g in receiver.got if verify(for_bob["secret"], g.headers["Mneme-Signature"], g.body)
    ]
    assert [g.event["data"]["memory"]["id"] for g in to_bob] == [shared["id"]]
    assert all(b"4471" not in g.body and secret["id"].encode() not in g.body for g in to_bob)
    to_alice = [g.event for g in receiver.got if g not in to_bob]
    assert {e["data"]["memory"]["id"] for e in to_alice} == {secret["id"], shared["id"]}


async def test_a_store_webhook_hears_of_its_store_only(client: Client, receiver: Receiver) -> None:
    resp = await client.post("/api/v1/forward/memory_stores", json={"name": "crm"}, headers=ADMIN)
    assert resp.status in (200, 201), await resp.text()
    store = (await resp.json())["id"]
    made = await hook(client, receiver.url, store="crm", events=["memory.created"])
    assert made["store"] == store
    await write(client, {"text": "Into the default store."})
    mine = await write(client, {"text": "Into the crm store.", "store": "crm"})
    [got] = await receiver.wait_for(1)
    assert got.event["data"]["memory"]["id"] == mine["id"]
    await asyncio.sleep(1.0)
    assert len(receiver.got) == 1


async def test_a_failed_attempt_is_retried_with_backoff_then_given_up(
    client: Client, receiver: Receiver, conn: asyncpg.Connection
) -> None:
    made = await hook(client, receiver.url)
    receiver.answers = [500, 503]
    await write(client, {"text": "Retry me."})
    await receiver.wait_for(1)
    [d] = await settled(client, made["id"])
    assert (d["state"], d["attempts"], d["lastStatus"]) == ("pending", 1, 500)
    assert "not now" in d["lastError"] and d["nextAttemptAt"] > d["createdAt"]
    wait = await conn.fetchval(
        "SELECT extract(epoch FROM next_attempt_at - now()) FROM webhook_deliveries"
    )
    assert 2 <= wait <= 10  # 10 s at the first retry, drawn between half and all of it,
    # less the time since (a second or more on a loaded machine)
    # Past its 24 h, the next failure gives it up.
    await conn.execute(
        "UPDATE webhook_deliveries"
        " SET next_attempt_at = now(), retry_until = now() + interval '1 s'"
    )
    await receiver.wait_for(2)
    [d] = await settled(client, made["id"])
    assert (d["state"], d["attempts"], d["lastStatus"], d["nextAttemptAt"]) == (
        "failed", 2, 503, None,
    )  # fmt: skip
    # Retried by hand: sent again now, with a day of its own.
    resp = await client.post(f"{HOOKS}/{made['id']}/deliveries/{d['event']}/retry", headers=ADMIN)
    assert resp.status == 202, await resp.text()
    assert (await resp.json())["state"] == "pending"
    await receiver.wait_for(3)
    [d] = await settled(client, made["id"])
    assert (d["state"], d["attempts"], d["lastStatus"]) == ("delivered", 3, 200)
    assert d["deliveredAt"] is not None
    assert [g.headers["Mneme-Event-Id"] for g in receiver.got] == [d["event"]] * 3
    metrics = await (await client.get("/metrics")).text()
    for outcome, count in [("delivered", 1), ("retried", 1), ("failed", 1)]:
        assert f'mneme_webhook_deliveries_total{{outcome="{outcome}"}} {count}.0' in metrics
    bad = f"{HOOKS}/{made['id']}/deliveries/evt_nope/retry"
    assert (await client.post(bad, headers=ADMIN)).status == 404


async def test_a_delivery_being_sent_is_not_retried_by_hand_meanwhile(
    client: Client, receiver: Receiver
) -> None:
    answered = asyncio.Event()

    async def slow() -> web.StreamResponse:
        await answered.wait()
        return web.Response(status=200)

    made = await hook(client, receiver.url, events=["memory.created"])
    receiver.answers = [slow]
    await write(client, {"text": "Sent slowly."})
    [got] = await receiver.wait_for(1)
    retry = f"{HOOKS}/{made['id']}/deliveries/{got.headers['Mneme-Event-Id']}/retry"
    resp = await client.post(retry, headers=ADMIN)
    assert resp.status == 409, await resp.text()
    assert "being sent" in (await resp.json())["error"]["message"]
    answered.set()
    [d] = await settled(client, made["id"])
    assert (d["state"], d["attempts"]) == ("delivered", 1)
    await asyncio.sleep(1.0)
    assert len(receiver.got) == 1  # the refused retry sent nothing
    # Once the attempt is done, a retry sends it again, once.
    assert (await client.post(retry, headers=ADMIN)).status == 202
    await receiver.wait_for(2)
    deadline = time.monotonic() + 10
    while (d := (await deliveries(client, made["id"]))["data"][0])["attempts"] < 2:
        assert time.monotonic() < deadline, d
        await asyncio.sleep(0.05)
    assert (d["state"], d["attempts"], len(receiver.got)) == ("delivered", 2, 2)


async def test_redirects_are_not_followed_and_answers_are_read_in_part(
    client: Client, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def redirect() -> web.StreamResponse:
        return web.Response(status=302, headers={"Location": "/elsewhere"})

    async def huge() -> web.StreamResponse:
        return web.Response(status=500, body=b"x" * (4 * 1024 * 1024))

    made = await hook(client, receiver.url)
    receiver.answers = [redirect, huge]
    await write(client, {"text": "Where does this go?"})
    await receiver.wait_for(1)
    [d] = await settled(client, made["id"])
    assert (d["state"], d["lastStatus"]) == ("pending", 302)
    assert receiver.elsewhere == []
    await client.app[POOL].execute("UPDATE webhook_deliveries SET next_attempt_at = now()")
    await receiver.wait_for(2)
    [d] = await settled(client, made["id"])
    assert d["lastStatus"] == 500 and len(d["lastError"]) <= outbound.EXCERPT_CHARS + 20


async def test_an_endpoint_that_does_not_answer_times_out(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings,
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(outbound, "TIMEOUT_S", 0.5)
    client = await make_client(settings)

    async def silent() -> web.StreamResponse:
        await asyncio.sleep(3)
        return web.Response(status=200)

    made = await hook(client, receiver.url)
    receiver.answers = [silent]
    await write(client, {"text": "Is anyone there?"})
    await receiver.wait_for(1)
    deadline = time.monotonic() + 10
    while (d := (await deliveries(client, made["id"]))["data"][0])["attempts"] == 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert (d["state"], d["lastStatus"]) == ("pending", None)
    assert "no answer within 0.5 s" in d["lastError"]


async def test_a_name_that_now_resolves_to_loopback_is_refused_at_delivery(
    make_client: Callable[[Settings], Awaitable[Client]], settings: Settings,
    receiver: Receiver,
) -> None:  # fmt: skip
    # Made while "localhost" was allowed (think: a name that was public then, and was
    # rebound to 127.0.0.1 since): every delivery resolves it again, and refuses it.
    client = await make_client(dataclasses.replace(settings, webhook_allow_private=False))
    url = receiver.url.replace("127.0.0.1", "localhost")
    await client.app[POOL].execute(
        "INSERT INTO webhooks (workspace_id, id, key_id, url, events, secret)"
        " SELECT workspace_id, 'whk_00000000000000000000', id, $1, $2, 'whsec_x'"
        " FROM api_keys LIMIT 1",
        url, ALL,
    )  # fmt: skip
    await write(client, {"text": "Not for loopback."})
    deadline = time.monotonic() + 10
    while (d := (await deliveries(client, "whk_00000000000000000000"))["data"][0])["attempts"] == 0:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    assert d["state"] == "pending" and "not a public address" in d["lastError"]
    assert receiver.got == []


async def test_a_revoked_keys_webhook_delivers_nothing_more(
    client: Client, receiver: Receiver
) -> None:
    resp = await client.post(
        "/api/v1/keys", json={"kind": "service", "scopes": ["admin", "memory:read"]},
        headers=ADMIN,
    )  # fmt: skip
    key = await resp.json()
    made = await hook(client, receiver.url, auth(key["key"]))
    assert (await client.delete(f"/api/v1/keys/{key['id']}", headers=ADMIN)).status == 204
    await write(client, {"text": "Nobody may hear of this."})
    [d] = await settled(client, made["id"])
    assert (d["state"], d["lastError"]) == ("failed", "the webhook's key is revoked")
    assert receiver.got == []


async def test_the_delivery_log_pages_newest_first(client: Client, receiver: Receiver) -> None:
    made = await hook(client, receiver.url, events=["memory.created"])
    resp = await client.post(
        "/api/v1/memories", json={"memories": [{"text": f"note {i}"} for i in range(5)]},
        headers=ADMIN,
    )  # fmt: skip
    assert resp.status == 200
    await receiver.wait_for(5)
    seen: list[str] = []
    page = await deliveries(client, made["id"], limit="2")
    while True:
        seen += [d["event"] for d in page["data"]]
        if not page["hasMore"]:
            break
        page = await deliveries(client, made["id"], limit="2", cursor=page["cursor"])
    assert seen == sorted({e["id"] for e in receiver.events()}, reverse=True)
    resp = await client.get(f"{HOOKS}/{made['id']}/deliveries?cursor=junk", headers=ADMIN)
    assert resp.status == 400


def test_the_signature_is_hmac_sha256_of_time_dot_body() -> None:
    import hashlib
    import hmac

    body = b'{"id":"evt_1"}'
    expected = hmac.new(b"whsec_k", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signature("whsec_k", body, 1700000000) == f"t=1700000000,v1={expected}"
    header = signature("whsec_k", body, 1700000000)
    assert verify("whsec_k", header, body, now=1700000100)
    assert not verify("whsec_k", header, body, now=1700000000 + 301)  # replayed too late
    assert not verify("whsec_k", header, body + b" ", now=1700000000)
    assert not verify("whsec_k", "t=x,v1=00", body)
    # The README's copy agrees, replay window included.
    fresh = signature("whsec_k", body, int(time.time()))
    assert readme_verify()("whsec_k", fresh, body)
    assert not readme_verify()("whsec_k", header, body)  # 2023: long past the window
    assert not readme_verify()("whsec_other", fresh, body)
