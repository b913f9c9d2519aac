"""``mneme_client.langchain.MnemeRetriever`` (issue 47) against a running ``mneme serve``:
``langchain-tests``' own ``RetrieversIntegrationTests``, plus two keys that see different
things and the search API's filters."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests
from mneme_client import Mneme
from mneme_client.langchain import MnemeRetriever

from bench.common import Server
from tests.helpers import BOOTSTRAP_KEY

pytestmark = pytest.mark.slow

TEA = [
    "Alice drinks oolong tea every morning.",
    "Alice keeps her green tea in a tin on the shelf.",
    "Alice's tea of choice in winter is a strong black tea.",
    "Bob prefers coffee to tea.",
    "The office kitchen stocks five kinds of tea.",
    "Alice once visited a tea plantation in Sri Lanka.",
]


@pytest.fixture(scope="module")
def server(mneme_serve: Server) -> Server:
    return mneme_serve


@pytest.fixture(scope="module")
def tea_store(server: Server) -> str:
    name = f"lc-{uuid.uuid4().hex[:8]}"
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as admin:
        admin.stores.create(name)
        admin.add_many([{"text": t, "store": name} for t in TEA])
    return name


class TestMnemeRetriever(RetrieversIntegrationTests):
    """The standard tests, on a store of six memories about tea."""

    params: dict[str, Any]

    @pytest.fixture(autouse=True)
    def _served(self, server: Server, tea_store: str) -> None:
        self.params = {"store": tea_store, "api_key": BOOTSTRAP_KEY, "base_url": server.base}

    @property
    def retriever_constructor(self) -> type[MnemeRetriever]:
        return MnemeRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return self.params

    @property
    def retriever_query_example(self) -> str:
        return "What tea does Alice drink?"


def test_documents_carry_the_memory(server: Server, tea_store: str) -> None:
    retriever = MnemeRetriever(store=tea_store, k=2, api_key=BOOTSTRAP_KEY, base_url=server.base)
    docs = retriever.invoke("oolong tea")
    assert len(docs) == 2 and all(isinstance(d, Document) for d in docs)
    assert docs[0].page_content == TEA[0]
    assert docs[0].metadata["id"].startswith("mem_") and docs[0].id == docs[0].metadata["id"]
    assert docs[0].metadata["kind"] == "memory" and 0 <= docs[0].metadata["similarity"] <= 1
    with pytest.raises(ValueError, match="k must be"):
        retriever.invoke("tea", k=21)


def test_two_keys_retrieve_only_what_each_may_read(server: Server) -> None:
    auth = {"Authorization": f"Bearer {BOOTSTRAP_KEY}"}
    for member, kind in (("carol", "human"), ("dave", "human"), ("bot", "agent")):
        httpx.post(f"{server.base}/api/v1/members", json={"id": member, "kind": kind}, headers=auth)
    keys = {}
    for member in ("carol", "dave"):
        body = {"kind": "personal", "member": member, "scopes": ["memory:read"]}
        made = httpx.post(f"{server.base}/api/v1/keys", json=body, headers=auth)
        keys[member] = made.json()["key"]
    name = f"lc-{uuid.uuid4().hex[:8]}"
    with Mneme(api_key=BOOTSTRAP_KEY, base_url=server.base) as admin:
        admin.stores.create(name)
        admin.add("Carol's locker code is 7316.", store=name, scope="pair:carol:bot")
    question = "What is Carol's locker code?"
    for member, expected in (("carol", 1), ("dave", 0)):
        retriever = MnemeRetriever(store=name, k=1, api_key=keys[member], base_url=server.base)
        assert len(retriever.invoke(question)) == expected, member
