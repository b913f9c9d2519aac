"""The OpenAPI document and llms.txt describe exactly the routes the service has."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from service.routes import ROUTES
from tests.helpers import Client

METHODS = {"get", "post", "put", "patch", "delete", "options"}


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


def _whole(path: str) -> str:
    """A path with its parameters' names dropped: ``/a/{id}/b`` and ``/a/{x}/b`` agree."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def undocumented(llms: str) -> list[str]:
    """The routes whose whole path (parameters aside) llms.txt does not name: the path
    as a word of its own, not the start of a longer one (``/`` is not in ``/api``)."""
    text = _whole(llms)

    def named(path: str) -> bool:
        # Followed by a space, punctuation or the end; a full stop only when no word
        # follows it (``/`` is not named by ``/.well-known``).
        end = r"(?=[\s?,;:)`]|\.(?![\w-])|$)"
        return re.search(rf"(?:^|(?<=[\s|(`])){re.escape(_whole(path))}{end}", text) is not None

    return sorted({r.path for r in ROUTES if not named(r.path)})


async def test_llms_txt_mentions_every_api_path(client: Client) -> None:
    resp = await client.get("/llms.txt")
    assert resp.status == 200
    text = await resp.text()
    assert undocumented(text) == []
    # The check sees a route whose line goes, parameters and the page at / included.
    for path, named in (
        ("/api/v1/memories/{memory_id}/versions", r"/api/v1/memories/\{id\}/versions"),
        ("/api/v1/activity", r"/api/v1/activity(?![\w/])"),
        ("/", r"GET / "),
    ):
        without = "\n".join(line for line in text.splitlines() if not re.search(named, line))
        assert path in undocumented(without), path


# The types each handler decodes its body into: the document must name the same fields,
# and require the same ones, so a field added to a handler cannot be left undocumented
# (and Schemathesis, tests/test_fuzz.py, holds the constraints to what handlers enforce).
def _bodies() -> dict[tuple[str, str], type[msgspec.Struct]]:
    from service.faces import admin, speakers, stores
    from service.write import items

    store = "/api/v1/forward/memory_stores"
    return {
        ("POST", "/api/v1/members"): admin.MemberIn,
        ("POST", "/api/v1/rooms"): admin.RoomIn,
        ("POST", "/api/v1/keys"): admin.KeyIn,
        ("POST", "/api/v1/memories"): items.MemoryIn,
        ("PATCH", "/api/v1/memories/{memory_id}"): items.MemoryPatch,
        ("POST", "/api/v1/stores/{store}/speakers"): speakers.SpeakerIn,
        ("POST", store): stores.StoreCreate,
        ("POST", store + "/{store_id}"): stores.StoreUpdate,
        ("POST", store + "/{store_id}/memories"): stores.PathMemoryCreate,
        ("POST", store + "/{store_id}/memories/{memory_id}"): stores.PathMemoryUpdate,
    }


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = doc
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def _object_schemas(doc: dict[str, Any], schema: dict[str, Any]) -> list[dict[str, Any]]:
    schema = _resolve(doc, schema)
    alternatives = schema.get("oneOf") or schema.get("anyOf")
    if alternatives and "properties" not in schema:
        return [s for alt in alternatives for s in _object_schemas(doc, alt)]
    return [schema]


async def test_request_bodies_document_the_fields_their_handlers_decode(client: Client) -> None:
    doc: dict[str, Any] = await (await client.get("/openapi.json")).json()
    for (method, path), struct in _bodies().items():
        body = doc["paths"][path][method.lower()]["requestBody"]["content"]["application/json"]
        schemas = _object_schemas(doc, body["schema"])
        if struct.__name__ == "MemoryIn":  # one memory, or {"memories": [...]}
            schemas = [s for s in schemas if "memories" not in s.get("properties", {})]
        (schema,) = schemas
        fields = msgspec.structs.fields(struct)
        assert set(schema["properties"]) == {f.encode_name for f in fields}, path
        required = {f.encode_name for f in fields if f.required}
        assert set(schema.get("required", [])) == required, path
        assert schema.get("additionalProperties") is False, path  # unknown fields are a 400


async def test_the_search_body_documents_what_the_parser_reads(client: Client) -> None:
    from service.faces.search import request as search

    doc: dict[str, Any] = await (await client.get("/openapi.json")).json()
    schema = _resolve(doc, {"$ref": "#/components/schemas/SearchRequest"})
    assert set(schema["properties"]) == set(search.TOP_LEVEL)
    (filters,) = [
        s for s in _object_schemas(doc, schema["properties"]["filters"]) if "properties" in s
    ]
    assert set(filters["properties"]) == set(search.FILTER_KEYS)


async def test_every_route_documents_its_path_parameters(client: Client) -> None:
    doc: dict[str, Any] = await (await client.get("/openapi.json")).json()
    for route in ROUTES:
        item = doc["paths"][route.path]
        params = item.get("parameters", []) + item[route.method.lower()].get("parameters", [])
        documented = {p["name"] for p in params if p["in"] == "path"}
        assert documented == set(re.findall(r"{(\w+)}", route.path)), route.path
