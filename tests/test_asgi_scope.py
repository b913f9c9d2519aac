"""The ASGI bridge to the MCP library (``service.http.asgi``) passes any header or query
string a client can send, not only Latin-1 (SPEC §9: no 5xx from input)."""

from __future__ import annotations

from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from service.http.asgi import scope_of


def test_headers_and_query_of_any_text_pass_as_bytes() -> None:
    request = make_mocked_request(
        "POST", "/mcp?store=%E2%80%AE&x=%E4%B8%AD", headers=CIMultiDict({"X-Note": "中 café"})
    )
    scope = scope_of(request, 0)
    assert (b"x-note", "中 café".encode()) in scope["headers"]
    assert scope["query_string"] == b"store=%E2%80%AE&x=%E4%B8%AD"
    assert scope["raw_path"] == b"/mcp"
