"""Mneme's MCP tools (clients/mcp-tools/mneme_mcp_tools/tools.py), driven by the official MCP
client over both transports against a running service: ``mneme-mcp`` over stdio and the
service's own ``/mcp`` over Streamable HTTP. The tools an agent sees, and what each one
does to the memories behind it; tests/test_mcp_http.py has what only HTTP has."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.helpers import (
    ADMIN,
    SCRIPT,
    TOOLS,
    Client as HttpClient,
    call,
    connected,
    make_key,
    refused,
    write,
)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    """Each behaviour over ``mneme-mcp`` (stdio) and the service's ``/mcp`` (HTTP)."""
    name: str = request.param
    return name


async def test_the_tools_an_agent_sees(client: HttpClient, transport: str) -> None:
    async with connected(client, transport=transport) as agent:
        listed = (await agent.list_tools()).tools
        assert {t.name for t in listed} == TOOLS
        for tool in listed:
            assert tool.description and "\n" not in tool.description
            assert tool.input_schema["type"] == "object"
        schema = {t.name: t.input_schema for t in listed}
        assert schema["remember"]["required"] == ["text"]
        assert set(schema["remember"]["properties"]) == {
            "text", "store", "speaker", "fact_type", "scope", "importance", "event_date",
            "supersedes",
        }  # fmt: skip
        assert set(schema["recall"]["properties"]) == {
            "query", "store", "max_results", "verify", "speaker", "filters",
        }  # fmt: skip
        importance = json.dumps(schema["remember"]["properties"]["importance"])
        assert '"minimum": 0' in importance and '"maximum": 1' in importance
        max_results = json.dumps(schema["recall"]["properties"]["max_results"])
        assert '"minimum": 5' in max_results and '"maximum": 20' in max_results
        assert set(schema["browse"]["properties"]) == {"store", "search", "fact_type", "limit"}
        assert set(schema["list_files"]["properties"]) == {"store", "path_prefix", "limit"}
        assert schema["forget"]["required"] == ["memory_id"]
        assert set(schema["list_files"]["required"]) == {"store"}
        assert set(schema["read_file"]["required"]) == {"store", "path"}
        assert set(schema["write_file"]["required"]) == {"store", "path", "content"}
        assert "expected_sha256" in schema["write_file"]["properties"]


async def test_remember_recall_browse_forget(client: HttpClient, transport: str) -> None:
    async with connected(client, transport=transport) as agent:
        memory = await call(
            agent, "remember", text="Dave prefers squash merges.", fact_type="world"
        )
        assert memory["id"].startswith("mem_") and memory["store"].startswith("memstore_")
        assert memory["fact_type"] == "world"
        await call(agent, "remember", text="The staging database is rebuilt every Sunday.")

        hits = await call(agent, "recall", query="How does Dave like to merge?", max_results=5)
        assert hits[0]["id"] == memory["id"] and hits[0]["content"] == "Dave prefers squash merges."
        assert hits[0]["kind"] == "memory"

        found = await call(agent, "browse", search="squash")
        assert [m["id"] for m in found] == [memory["id"]]
        assert len(await call(agent, "browse", limit=1)) == 1

        assert await call(agent, "forget", memory_id=memory["id"]) == f"forgot {memory['id']}"
        assert await call(agent, "browse", search="squash") == []
        assert "404" in await refused(agent, "forget", memory_id="mem_doesnotexist")


async def test_a_store_that_does_not_exist_is_a_tool_error(
    client: HttpClient, transport: str
) -> None:
    async with connected(client, transport=transport) as agent:
        text = await refused(agent, "remember", text="Lost note.", store="nowhere")
        assert "404" in text and "nowhere" in text
        assert "404" in await refused(agent, "recall", query="anything", store="nowhere")
        # Out of the search contract's range (5-20): a tool error.
        assert (await agent.call_tool("recall", {"query": "x", "max_results": 2})).is_error


async def test_files_are_read_and_written_under_the_sha256_precondition(
    client: HttpClient, transport: str
) -> None:
    async with connected(client, transport=transport) as agent:
        created = await call(agent, "write_file", store="default", path="notes/todo.md",
                             content="- ship the MCP server\n")  # fmt: skip
        await call(agent, "write_file", store="default", path="profile.md", content="Name: Ada\n")
        read = await call(agent, "read_file", store="default", path="notes/todo.md")
        assert read["content"] == "- ship the MCP server\n"
        assert read["content_sha256"] == created["content_sha256"] and read["id"] == created["id"]

        listed = await call(agent, "list_files", store="default")
        assert [f["path"] for f in listed] == ["notes/todo.md", "profile.md"]
        assert all("content" not in f for f in listed)
        notes = await call(agent, "list_files", store="default", path_prefix="notes/")
        assert [f["path"] for f in notes] == ["notes/todo.md"]

        updated = await call(agent, "write_file", store="default", path="notes/todo.md",
                             content="- ship it\n- test it\n",
                             expected_sha256=read["content_sha256"])  # fmt: skip
        assert updated["id"] == created["id"]
        assert updated["content_sha256"] != read["content_sha256"]

        # The sha256 read before the update is stale now: refused, and nothing changes.
        stale = read["content_sha256"]
        text = await refused(agent, "write_file", store="default", path="notes/todo.md",
                             content="- overwritten\n", expected_sha256=stale)  # fmt: skip
        assert "409" in text and "nothing was written" in text
        again = await call(agent, "read_file", store="default", path="notes/todo.md")
        assert again["content"] == "- ship it\n- test it\n"

        # An expected sha256 for a file that is not there writes nothing either.
        text = await refused(agent, "write_file", store="default", path="notes/gone.md",
                             content="x", expected_sha256="0" * 64)  # fmt: skip
        assert "409" in text
        assert "404" in await refused(agent, "read_file", store="default", path="notes/gone.md")

        # Without a precondition, the file is overwritten.
        overwritten = await call(agent, "write_file", store="default", path="profile.md",
                                 content="Name: Ada Lovelace\n")  # fmt: skip
        assert (await call(agent, "read_file", store="default", path="profile.md"))[
            "content_sha256"
        ] == overwritten["content_sha256"]


async def test_the_key_decides_what_the_tools_may_do(client: HttpClient, transport: str) -> None:
    """A read-only key's agent may recall but not remember; the refusal is the service's."""
    async with connected(client, transport=transport) as agent:
        await call(agent, "remember", text="The office wifi password rotates monthly.")
        reader = await make_key(client, kind="service", scopes=["memory:read"])
        async with connected(client, reader, transport) as limited:
            hits = await call(limited, "recall", query="office wifi password")
            assert hits and hits[0]["content"] == "The office wifi password rotates monthly."
            text = await refused(limited, "remember", text="Sneaky write.")
            assert "403" in text
            text = await refused(limited, "write_file", store="default", path="x.md", content="x")
            assert "403" in text
        assert await call(agent, "browse", search="Sneaky") == []
        assert json.dumps(await call(agent, "list_files", store="default")) == "[]"


async def test_browse_lists_the_newest_first_whatever_was_used_last(
    client: HttpClient, transport: str
) -> None:
    # Written older, newer; the older one used last, so browse's own order puts it first.
    used = {"firstSeenAt": "2025-01-01T00:00:00Z"}
    older, newer = await write(
        client,
        {"text": "Kiln fired on Monday.", **used, "lastUsedAt": "2025-01-03T00:00:00Z"},
        {"text": "Kiln fired on Friday.", **used, "lastUsedAt": "2025-01-01T00:00:00Z"},
    )
    page = await client.get("/api/v1/memories?search=kiln", headers=ADMIN)
    assert [m["id"] for m in (await page.json())["data"]] == [older, newer]
    async with connected(client, transport=transport) as agent:
        found = await call(agent, "browse", search="KILN")
    assert [m["id"] for m in found] == [newer, older]


def test_mneme_mcp_without_a_key_says_so_in_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MNEME_API_KEY"}
    done = subprocess.run(
        [SCRIPT], env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "mneme-mcp: set MNEME_API_KEY to a Mneme API key (`mneme keys create`)"
    ]


async def test_a_service_that_does_not_answer_is_a_tool_error_that_says_so() -> None:
    async with connected("http://127.0.0.1:9", transport="stdio") as agent:
        text = await refused(agent, "recall", query="anything")
    assert "recall: connection_error: No answer from http://127.0.0.1:9" in text, text


async def test_browse_takes_each_window_newest_first_and_shows_observations_when_asked(
    client: HttpClient, transport: str
) -> None:
    # Written a, b, c, d; d deleted. With limit 2 the first window (d, c) leaves c; the
    # second (b, a) is sorted by last use, a first: the tool still takes b, the newer.
    used = {"firstSeenAt": "2025-01-01T00:00:00Z"}
    _, b, c, d = await write(
        client,
        {"text": "Glaze test a.", **used, "lastUsedAt": "2025-01-09T00:00:00Z"},
        {"text": "Glaze test b.", **used, "lastUsedAt": "2025-01-01T00:00:00Z"},
        {"text": "Glaze test c.", **used, "lastUsedAt": "2025-01-01T00:00:00Z"},
        {"text": "Glaze test d.", **used, "lastUsedAt": "2025-01-01T00:00:00Z"},
    )
    assert (await client.delete(f"/api/v1/memories/{d}", headers=ADMIN)).status == 200
    async with connected(client, transport=transport) as agent:
        found = await call(agent, "browse", search="glaze test", limit=2)
        assert [m["id"] for m in found] == [c, b]
        assert "store" not in found[0] and "speaker" not in found[0]  # browse carries none
        seen = await call(agent, "remember", text="Glaze crawled at cone 6.",
                          fact_type="observation")  # fmt: skip
        assert await call(agent, "browse", search="crawled") == []  # hidden by default
        shown = await call(agent, "browse", search="crawled", fact_type="observation")
        assert [m["id"] for m in shown] == [seen["id"]]
