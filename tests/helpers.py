"""Helpers shared by the tests: keys, headers, small request wrappers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

BOOTSTRAP_KEY = "test-bootstrap-key-0123456789"
Client = TestClient[web.Request, web.Application]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


ADMIN = auth(BOOTSTRAP_KEY)


async def make_key(client: Client, **body: Any) -> str:
    resp = await client.post("/api/v1/keys", json=body, headers=ADMIN)
    assert resp.status == 201, await resp.text()
    key: str = (await resp.json())["key"]
    return key


async def make_member(client: Client, member_id: str, kind: str = "human") -> None:
    resp = await client.post("/api/v1/members", json={"id": member_id, "kind": kind}, headers=ADMIN)
    assert resp.status == 201, await resp.text()


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
