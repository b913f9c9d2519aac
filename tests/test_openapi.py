"""The OpenAPI document and llms.txt describe exactly the routes the service has."""

from __future__ import annotations

from typing import Any

from service.routes import ROUTES
from tests.helpers import Client

METHODS = {"get", "post", "put", "patch", "delete"}


async def test_openapi_lists_every_route_and_nothing_else(client: Client) -> None:
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    doc: dict[str, Any] = await resp.json()
    assert doc["openapi"].startswith("3.1")
    documented = {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in METHODS
    }
    served = {(r.method, r.path) for r in ROUTES}
    assert documented == served


async def test_openapi_document_is_valid_openapi_3_1(client: Client) -> None:
    from openapi_spec_validator import validate

    validate(await (await client.get("/openapi.json")).json())


async def test_openapi_marks_keyless_routes(client: Client) -> None:
    doc: dict[str, Any] = await (await client.get("/openapi.json")).json()
    for route in ROUTES:
        operation = doc["paths"][route.path][route.method.lower()]
        keyless = operation.get("security") == []
        assert keyless == (route.scope is None), route.path


async def test_llms_txt_mentions_every_api_path(client: Client) -> None:
    resp = await client.get("/llms.txt")
    assert resp.status == 200
    text = await resp.text()
    for route in ROUTES:
        stem = route.path.split("{")[0].rstrip("/")
        assert stem in text, route.path
