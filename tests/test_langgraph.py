"""``mneme_client.langgraph.MnemeStore`` (issue 47) against a running ``mneme serve``: the
same operations on it and on LangGraph's own ``InMemoryStore``, compared result by
result; a compiled graph whose node reads and writes through ``get_store()``; two keys
that see different things; and ranking by Mneme's search within a namespace prefix."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore, Item
from langgraph.store.memory import InMemoryStore
from mneme_client import Mneme
from mneme_client.langgraph import MnemeStore, path_of, split

from bench.common import Server
from tests.helpers import BOOTSTRAP_KEY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(mneme_serve: Server) -> Server:
    return mneme_serve


def fresh_store(server: Server, key: str = BOOTSTRAP_KEY, **options: Any) -> MnemeStore:
    """A MnemeStore on a store of its own."""
    name = f"lg-{uuid.uuid4().hex[:8]}"
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as admin:
        admin.stores.create(name)
    return MnemeStore(api_key=key, base_url=server.base, store=name, **options)


def view(item: Item | None) -> Any:
    """What must agree between the two stores (timestamps are each store's own)."""
    return None if item is None else (item.namespace, item.key, item.value)


def by_path(items: list[Any]) -> list[Any]:
    """Listings: Mneme's come in path order, InMemoryStore's in insertion order."""
    return sorted(view(i) for i in items)


def test_paths_escape_what_would_split_them() -> None:
    for namespace, key in [(("users", "alice"), "prefs"), (("a/b", "100%"), "x/y%2F"), ((), "k")]:
        assert split(path_of(namespace, key)) == (namespace, key)
    assert path_of(("users", "alice"), "prefs") == "users/alice/prefs"
    assert path_of(("a/b",), "c%") == "a%2Fb/c%25"


def run_both(ours: BaseStore, theirs: BaseStore) -> None:
    """Apply the same sequence to both; every answer must agree."""
    puts: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
        (("users", "alice"), "prefs", {"tea": "oolong", "n": 3}),
        (("users", "alice"), "diet", {"vegan": True, "n": 1}),
        (("users", "bob"), "prefs", {"tea": "mint", "n": 5}),
        (("users", "bob", "work"), "desk", {"floor": 4, "n": 2}),
        (("projects", "mneme"), "owner", {"name": "alice", "n": 7}),
        (("a/b", "100%"), "odd/key", {"n": 0}),
    ]
    for store in (ours, theirs):
        for namespace, key, value in puts:
            store.put(namespace, key, value)
    for namespace, key, _ in puts:
        assert view(ours.get(namespace, key)) == view(theirs.get(namespace, key))
    assert ours.get(("users", "alice"), "missing") is None
    listings: list[dict[str, Any]] = [
        {},
        {"prefix": ("users",)},
        {"suffix": ("work",)},
        {"prefix": ("users", "*")},
        {"max_depth": 1},
        {"prefix": ("users",), "max_depth": 2},
        {"limit": 2, "offset": 1},
    ]
    for kwargs in listings:
        assert ours.list_namespaces(**kwargs) == theirs.list_namespaces(**kwargs), kwargs
    # Overwrite, then delete: read after write at once.
    for store in (ours, theirs):
        store.put(("users", "alice"), "prefs", {"tea": "sencha", "n": 4})
        store.delete(("users", "bob"), "prefs")
    assert view(ours.get(("users", "alice"), "prefs")) == view(
        theirs.get(("users", "alice"), "prefs")
    )
    assert ours.get(("users", "bob"), "prefs") is None
    # A namespace is listed while it holds an item (as LangGraph's PostgresStore lists
    # them; InMemoryStore keeps the emptied one).
    assert ("users", "bob") not in ours.list_namespaces()
    searches: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("users",), {}),
        (("users", "alice"), {}),
        ((), {"limit": 100}),
        (("users",), {"filter": {"n": {"$gte": 2}}}),
        (("users",), {"filter": {"tea": "sencha"}}),
        (("projects",), {"filter": {"name": {"$ne": "bob"}}}),
        (("nobody",), {}),
    ]
    for prefix, kwargs in searches:
        assert by_path(ours.search(prefix, **kwargs)) == by_path(theirs.search(prefix, **kwargs)), (
            prefix
        )
    # Pagination walks the same items once each (in each store's own order).
    pages = [ours.search(("users",), limit=1, offset=i) for i in range(4)]
    assert [len(p) for p in pages] == [1, 1, 1, 0]
    assert sorted(view(p[0]) for p in pages[:3]) == by_path(theirs.search(("users",)))


def test_the_store_answers_as_langgraphs_in_memory_store(server: Server) -> None:
    run_both(fresh_store(server), InMemoryStore())


async def test_the_async_methods_answer_alike(server: Server) -> None:
    ours = fresh_store(server)
    await ours.aput(("users", "alice"), "prefs", {"tea": "oolong"})
    got = await ours.aget(("users", "alice"), "prefs")
    assert got is not None and got.value == {"tea": "oolong"}
    assert got.created_at <= got.updated_at
    assert [i.key for i in await ours.asearch(("users",))] == ["prefs"]
    assert await ours.alist_namespaces() == [("users", "alice")]
    await ours.adelete(("users", "alice"), "prefs")
    assert await ours.aget(("users", "alice"), "prefs") is None


def test_a_query_is_ranked_by_mnemes_search_within_the_prefix(server: Server) -> None:
    store = fresh_store(server)
    store.put(("users", "alice"), "drink", {"text": "Alice drinks oolong tea every morning"})
    store.put(("users", "alice"), "pet", {"text": "Alice has a cat called Miso"})
    store.put(("users", "bob"), "drink", {"text": "Bob drinks oolong tea too"})
    found = store.search(("users", "alice"), query="What tea does Alice drink?", limit=5)
    assert [i.key for i in found][:1] == ["drink"]
    assert all(i.namespace == ("users", "alice") for i in found)
    assert all(i.score is not None for i in found)
    everyone = store.search(("users",), query="oolong tea", limit=5)
    assert {i.namespace for i in everyone} >= {("users", "alice"), ("users", "bob")}


def test_two_keys_see_only_what_each_may_read(server: Server) -> None:
    # Members and keys through the REST API (the SDK has no admin calls).
    auth = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    keys = {}
    for member, kind in (("alice", "human"), ("bob", "human"), ("bot", "agent")):
        httpx.post(f"{server.base}/api/v1/members", json={"id": member, "kind": kind}, headers=auth)
    for member in ("alice", "bob"):
        body = {"kind": "personal", "member": member, "scopes": ["memory:read", "memory:write"]}
        keys[member] = httpx.post(f"{server.base}/api/v1/keys", json=body, headers=auth).json()[
            "key"
        ]
    alices = fresh_store(server, keys["alice"], scope="pair:alice:bot")
    bobs = MnemeStore(api_key=keys["bob"], base_url=server.base, store=alices.store)
    alices.put(("notes",), "locker", {"code": "7316"})
    assert alices.get(("notes",), "locker") is not None
    assert bobs.get(("notes",), "locker") is None
    assert bobs.search(("notes",)) == [] and bobs.list_namespaces() == []
    assert bobs.search(("notes",), query="locker code") == []


def test_a_graph_reads_and_writes_through_get_store(server: Server) -> None:
    from langgraph.config import get_store
    from typing_extensions import TypedDict

    class State(TypedDict):
        user: str
        seen: int

    def remember_visit(state: State) -> dict[str, int]:
        store = get_store()
        namespace = ("visits", state["user"])
        before = store.get(namespace, "count")
        count = (before.value["n"] if before else 0) + 1
        store.put(namespace, "count", {"n": count})
        return {"seen": count}

    graph = StateGraph(State).add_node(remember_visit).add_edge(START, "remember_visit")
    store = fresh_store(server)
    app = graph.compile(store=store)
    assert app.invoke({"user": "alice", "seen": 0})["seen"] == 1
    assert app.invoke({"user": "alice", "seen": 0})["seen"] == 2
    again = graph.compile(
        store=MnemeStore(api_key=BOOTSTRAP_KEY, base_url=server.base, store=store.store)
    )
    assert again.invoke({"user": "alice", "seen": 0})["seen"] == 3  # kept in Mneme


def test_langmems_memory_tools_work_on_the_store(server: Server) -> None:
    from langmem import create_manage_memory_tool, create_search_memory_tool

    store = fresh_store(server)
    namespace = ("memories", "alice")
    manage = create_manage_memory_tool(namespace=namespace, store=store)
    search = create_search_memory_tool(namespace=namespace, store=store)
    said = manage.invoke({"content": "Alice's favourite tea is oolong", "action": "create"})
    assert "created memory" in said.lower()
    [kept] = store.search(namespace)
    assert kept.value == {"content": "Alice's favourite tea is oolong"}
    manage.invoke({"content": "Alice now prefers sencha", "action": "update", "id": kept.key})
    got = store.get(namespace, kept.key)
    assert got is not None and got.value == {"content": "Alice now prefers sencha"}
    found = search.invoke({"query": "Which tea does Alice like?"})
    assert "sencha" in str(found)
    manage.invoke({"action": "delete", "id": kept.key})
    assert store.search(namespace) == []
