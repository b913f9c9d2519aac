"""The memory browser page in headless Chromium (Debian's package, driven by Playwright).

The page is served by the real app on a real port; the browser logs in with a key,
filters, pages with "load more", opens a memory with its versions and archives it.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from playwright.async_api import Browser, Page, Route, async_playwright, expect

from embeddings.model import SentenceTransformerEmbedder
from service.app import create_app
from service.app_keys import POOL
from service.settings import Settings
from tests.helpers import ADMIN, BOOTSTRAP_KEY, Client, auth, make_key, make_member
from tests.oauth_flow import REDIRECT, Answer, HandClient, pkce
from tests.test_mcp_http import INITIALIZE

pytestmark = pytest.mark.slow  # pyproject.toml: markers

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    pytest.fail("Chromium is not installed: `apt-get install chromium` (.ci/run does this)")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield b
        await b.close()


@pytest.fixture
async def served(
    settings: Settings,
    embedder: SentenceTransformerEmbedder,
    aiohttp_client: Callable[[Any], Awaitable[Client]],
) -> AsyncIterator[tuple[str, Client]]:
    server = TestServer(
        create_app(settings, embedder=embedder, announce_key=lambda _: None), host="127.0.0.1"
    )
    client = await aiohttp_client(server)
    yield f"http://127.0.0.1:{server.port}", client


async def login(page: Page, base: str, key: str) -> None:
    await page.goto(base + "/")
    await type_key(page, key)


async def type_key(page: Page, key: str) -> None:
    """Type ``key`` into the page's prompt, as a person would, and wait for the list."""
    await page.fill("#api-key", key)
    await page.click("#login-form button[type=submit]")
    await expect(page.locator("#meta")).to_contain_text("Scanned")


async def write(client: Client, *items: dict[str, Any]) -> list[str]:
    ids = []
    for item in items:
        resp = await client.post("/api/v1/memories", json=item, headers=ADMIN)
        assert resp.status == 201, await resp.text()
        ids.append((await resp.json())["id"])
    return ids


async def test_log_in_filter_page_open_and_archive(
    browser: Browser, served: tuple[str, Client]
) -> None:
    base, client = served
    await write(client, *({"text": f"note {i}", "tier": "core"} for i in range(4)))
    await write(client, {"text": "an observation", "factType": "observation"})
    await write(client, {"text": "Cohort runs on Convex.", "factType": "world"})
    page = await browser.new_page()
    await login(page, base, BOOTSTRAP_KEY)

    items = page.locator("#memories li")
    await expect(items).to_have_count(5)  # the observation is hidden by default
    await expect(page.locator("#meta")).to_contain_text("1 observations hidden")

    # Filter by tier, with a window of 2: "load more" walks the rest.
    await page.select_option("select[name=tier]", "core")
    await page.fill("input[name=limit]", "2")
    await page.click("#filters button[type=submit]")
    await expect(items).to_have_count(0)  # the newest two are not core
    await expect(page.locator("#load-more")).to_be_visible()
    await page.click("#load-more")  # window: note 3, note 2
    await expect(items).to_have_count(2)
    await page.click("#load-more")  # window: note 1, note 0, and nothing past it
    await expect(items).to_have_count(4)
    await expect(page.locator("#load-more")).to_be_hidden()

    # Open a memory: its fields and versions; archive it; it leaves the active list.
    await page.locator("#memories li", has_text="note 2").click()
    await expect(page.locator("#detail-text")).to_have_text("note 2")
    await expect(page.locator("#versions li")).to_have_count(1)
    await page.click("#archive")
    await expect(page.locator("#versions li")).to_have_count(2)
    await expect(page.locator("#detail-fields")).to_contain_text("archived")
    await expect(page.locator("#restore")).to_be_visible()
    await expect(page.locator("#memories li", has_text="note 2")).to_have_count(0)
    resp = await client.get("/api/v1/memories?status=archived", headers=ADMIN)
    assert [m["text"] for m in (await resp.json())["data"]] == ["note 2"]

    # Search filter: literal substring.
    await page.select_option("select[name=tier]", "")
    await page.fill("input[name=limit]", "25")
    await page.fill("input[name=search]", "convex")
    await page.click("#filters button[type=submit]")
    await expect(items).to_have_count(1)
    await expect(items.first).to_contain_text("Cohort runs on Convex.")


async def test_the_page_shows_only_what_the_key_may_read(
    browser: Browser, served: tuple[str, Client]
) -> None:
    base, client = served
    await make_member(client, "alice")
    alice = await make_key(client, kind="personal", member="alice", scopes=["memory:read"])
    await write(
        client,
        {"text": "everyone sees this"},
        {"text": "private to bob", "scope": "pair:bob:bot"},
        {"text": "<img src=x onerror=alert(1)>"},
    )
    page = await browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    await login(page, base, alice)
    items = page.locator("#memories li")
    await expect(items).to_have_count(2)
    await expect(page.locator("#memories")).not_to_contain_text("private to bob")
    await expect(page.locator("#meta")).to_contain_text("Scanned 2")
    # Text is shown as text, never as markup.
    await expect(items.first).to_contain_text("<img src=x onerror=alert(1)>")
    assert dialogs == []
    assert (await client.get("/api/v1/memories", headers=auth(alice))).status == 200


async def test_forgetting_the_key_leaves_nothing_it_was_shown_for_the_next(
    browser: Browser, served: tuple[str, Client]
) -> None:
    # A shared browser: the admin reads bob's pair memory (its detail, a search), forgets
    # the key, and alice logs in. None of it may be left in the page (it was: the detail
    # panel and the search results stayed, and Archive acted on the admin's memory).
    base, client = served
    await make_member(client, "alice")
    alice = await make_key(client, kind="personal", member="alice", scopes=["memory:read"])
    [vault] = await write(client, {"text": "The vault code is 7741.", "scope": "pair:bob:bot"})
    page = await browser.new_page()
    await login(page, base, BOOTSTRAP_KEY)
    await page.click(f"#memories li[data-id='{vault}']")
    await expect(page.locator("#detail-text")).to_have_text("The vault code is 7741.")
    await page.click("#close-detail")
    await page.click("#tab-search")
    await page.fill("input[name=query]", "what is the vault code?")
    await page.click("#search-form button[type=submit]")
    await expect(page.locator("#results")).to_contain_text("7741")
    await page.click("#logout")
    await expect(page.locator("#login")).to_be_visible()
    await type_key(page, alice)  # in the same page, no reload
    assert "7741" not in await page.content()
    await expect(page.locator("#detail")).to_be_hidden()


async def test_a_wrong_key_is_sent_back_to_the_login(
    browser: Browser, served: tuple[str, Client]
) -> None:
    base, _ = served
    page = await browser.new_page()
    await page.goto(base + "/")
    await page.fill("#api-key", "not-a-key")
    await page.click("#login-form button[type=submit]")
    await expect(page.locator("#login-error")).to_contain_text("Invalid or revoked API key")
    await expect(page.locator("#login")).to_be_visible()


STORES = "/api/v1/forward/memory_stores"


async def test_the_stores_view_shows_the_tree_a_file_and_its_versions_and_guards_edits(
    browser: Browser, served: tuple[str, Client]
) -> None:
    base, client = served
    resp = await client.post(STORES, json={"name": "notes"}, headers=ADMIN)
    store = (await resp.json())["id"]
    files = {}
    for path, content in (("readme.md", "Start here."), ("docs/guide.md", "Use the blue door."),
                          ("docs/deep/x.md", "Deep file.")):  # fmt: skip
        resp = await client.post(f"{STORES}/{store}/memories", headers=ADMIN,
                                 json={"path": path, "content": content})  # fmt: skip
        assert resp.status in (200, 201), await resp.text()
        files[path] = await resp.json()
    page = await browser.new_page()
    await login(page, base, BOOTSTRAP_KEY)
    await page.click("#tab-stores")
    await page.locator("#store-list button", has_text="notes").click()
    await expect(page.locator("#tree-title")).to_have_text("Files of notes")
    tree = page.locator("#file-tree")
    await expect(tree.locator("summary")).to_have_text(["docs/", "deep/"])
    await expect(tree.locator("button")).to_have_text(["x.md", "guide.md", "readme.md"])

    await tree.locator("button[data-path='docs/guide.md']").click()
    guide = files["docs/guide.md"]
    await expect(page.locator("#file-path")).to_have_text("docs/guide.md")
    await expect(page.locator("#file-sha")).to_have_text(guide["content_sha256"])
    await expect(page.locator("#file-text")).to_have_value("Use the blue door.")
    await expect(page.locator("#file-versions li")).to_have_count(1)
    await expect(page.locator("#file-versions li ins")).to_have_text("Use the blue door.")

    # An edit is saved under the sha256 shown: the new content, its hash, a version whose
    # diff shows the word that changed.
    file_url = f"{STORES}/{store}/memories/{guide['id']}"

    async def stored() -> Any:
        return await (await client.get(file_url, headers=ADMIN)).json()

    await page.fill("#file-text", "Use the red door.")
    await page.click("#file-save")
    await expect(page.locator("#file-status")).to_have_text("Saved.")
    saved = await stored()
    assert saved["content"] == "Use the red door."
    await expect(page.locator("#file-sha")).to_have_text(saved["content_sha256"])
    await expect(page.locator("#file-versions li")).to_have_count(2)
    newest = page.locator("#file-versions li").first
    await expect(newest.locator("del")).to_have_text("blue")
    await expect(newest.locator("ins")).to_have_text("red")

    # Changed elsewhere after the page read it: the page's save is refused, nothing lost.
    resp = await client.post(file_url, headers=ADMIN, json={"content": "Use the green door."})
    assert resp.status == 200, await resp.text()
    await page.fill("#file-text", "Use the page's door.")
    await page.click("#file-save")
    await expect(page.locator("#file-error")).to_contain_text("changed since you opened it")
    assert (await stored())["content"] == "Use the green door."


async def test_a_memory_detail_shows_its_versions_as_a_diff(
    browser: Browser, served: tuple[str, Client]
) -> None:
    base, client = served
    [memory] = await write(client, {"text": "Alice drinks tea in the morning."})
    resp = await client.patch(f"/api/v1/memories/{memory}", headers=ADMIN,
                              json={"text": "Alice drinks green tea in the morning."})  # fmt: skip
    assert resp.status == 200, await resp.text()
    page = await browser.new_page()
    await login(page, base, BOOTSTRAP_KEY)
    await page.locator("#memories li", has_text="green tea").click()
    versions = page.locator("#versions li")
    await expect(versions).to_have_count(2)
    await expect(versions.first.locator("ins")).to_have_text("green ")
    await expect(versions.first.locator("del")).to_have_count(0)
    await expect(versions.nth(1).locator("ins")).to_have_text("Alice drinks tea in the morning.")


async def test_the_overview_plots_from_local_files_what_the_key_may_read(
    browser: Browser, served: tuple[str, Client]
) -> None:
    base, client = served
    resp = await client.post(STORES, json={"name": "ops"}, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    await make_member(client, "alice")
    alice = await make_key(client, kind="personal", member="alice", scopes=["memory:read"])
    # A webhook to a public address nothing answers at here: its deliveries wait.
    hook = {"url": "http://93.184.216.34/hook", "events": ["memory.created"]}
    assert (await client.post("/api/v1/webhooks", json=hook, headers=ADMIN)).status == 201
    await write(client, *({"text": f"default fact {i}"} for i in range(3)))
    await write(
        client, {"text": "ops fact 1", "store": "ops"}, {"text": "ops fact 2", "store": "ops"}
    )
    await write(client, {"text": "bob's secret", "scope": "pair:bob:bot"})
    for query in ("default fact", "ops fact"):
        resp = await client.post("/api/v1/memory/search", headers=ADMIN,
                                 json={"user_id": "default", "query": query})  # fmt: skip
        assert resp.status == 200, await resp.text()

    await client.app[POOL].execute(
        "UPDATE webhook_deliveries SET state = 'failed', finished_at = now()"
        " WHERE event_id = (SELECT min(event_id) FROM webhook_deliveries)"
    )

    async def overview(key: str) -> tuple[Page, list[str]]:
        page = await browser.new_page()
        requested: list[str] = []
        page.on("request", lambda r: requested.append(r.url))
        await login(page, base, key)
        await page.click("#tab-overview")
        return page, requested

    page, requested = await overview(BOOTSTRAP_KEY)
    await expect(page.locator("#written-summary")).to_have_text(
        "6 memories written: default 4, ops 2"
    )
    await expect(page.locator("#units-summary")).to_contain_text("2 searches")
    await expect(page.locator("#queue-summary")).to_contain_text("waiting now")
    for chart in ("#chart-written", "#chart-units", "#chart-queue"):
        await expect(page.locator(f"{chart} canvas")).to_have_count(1)
    await expect(page.locator("#webhooks-summary")).to_have_text(
        "1 webhook: 5 deliveries waiting, 1 failed in the last 24 h"
    )
    await expect(page.locator("#webhooks-list li")).to_have_text(
        ["http://93.184.216.34/hook (memory.created)"]
    )
    assert requested and all(url.startswith(base + "/") for url in requested), requested
    assert any(url.endswith("/static/uPlot.iife.min.js") for url in requested)

    # Alice may not read bob's pair: the plot counts what she may read, nothing more.
    page, _ = await overview(alice)
    await expect(page.locator("#written-summary")).to_have_text(
        "5 memories written: default 3, ops 2"
    )
    await expect(page.locator("#webhooks-figure")).to_be_hidden()  # not an admin key


async def test_a_person_approves_an_app_and_disconnects_it_from_the_page(
    browser: Browser, served: tuple[str, Client]
) -> None:
    # The consent page in a real browser (its cookie, its form, the redirect back), then the
    # Connected apps view: each key sees the apps it connected, and Disconnect ends one.
    base, client = served
    both = ["memory:read", "memory:write"]
    mine = await make_key(client, kind="service", scopes=both)
    theirs = await make_key(client, kind="service", scopes=both)
    agent = await HandClient.register(base, client_name="<b>Claude</b>")
    verifier, challenge = pkce()
    page = await browser.new_page()
    returned: list[str] = []

    async def back_at_the_app(route: Route) -> None:
        returned.append(route.request.url)
        await route.fulfill(status=200, body="back at the app")

    # A predicate, not a glob: the query's iss (RFC 9207) holds slashes, which "*" stops at.
    await page.route(lambda url: url.startswith(REDIRECT), back_at_the_app)
    await page.goto(agent.authorization_url(challenge))
    await expect(page.locator("h1")).to_contain_text("Connect <b>Claude</b> to Mneme?")
    await page.fill("#key", mine)
    await page.click("button[value=approve]")
    await expect(page.locator("body")).to_contain_text("back at the app")
    [location] = returned
    status, tokens = await agent.exchange(Answer(303, location, "").query["code"], verifier)
    assert status == 200, tokens
    their_tokens = await agent.tokens(theirs)

    await login(page, base, mine)
    await page.click("#tab-apps")
    rows = page.locator("#apps tbody tr")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("<b>Claude</b>")  # as text
    await expect(rows.first).to_contain_text("read and write")
    await rows.first.locator("button").click()
    await expect(page.locator("#apps-empty")).to_be_visible()
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for token, status in ((tokens["access_token"], 401), (their_tokens["access_token"], 200)):
        resp = await client.post("/mcp", json=INITIALIZE, headers={**headers, **auth(token)})
        assert resp.status == status
