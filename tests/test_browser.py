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
from playwright.async_api import Browser, Page, async_playwright, expect

from embeddings.model import SentenceTransformerEmbedder
from service.app import create_app
from service.settings import Settings
from tests.helpers import ADMIN, BOOTSTRAP_KEY, Client, auth, make_key, make_member

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
