"""JSON documents into checked values, on every way in (HTTP bodies, ``mneme import``
lines, MCP tool arguments): decoding (``decode_json``) and the strings PostgreSQL can store.

PostgreSQL's ``text`` cannot hold NUL (U+0000), and a lone surrogate cannot be encoded as
UTF-8: either would fail deep inside a query. So they are refused as an ``Invalid`` naming
the field: any string, key or value, at any depth, named by its path (``metadata.k``,
``filters.entity[1]``). JSON cannot carry a raw NUL byte or a lone surrogate escape
(msgspec refuses both as malformed), so only a ``\\u0000`` escape needs looking for, and a
document is walked only when it has one. A batch of memories checks each item as it
comes to it (``check_strings``), so the first failing item decides, whatever it fails on.
A document nested deeper than the decoder allows is refused too, not a RecursionError.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from service.problems import Invalid

T = TypeVar("T")


def string_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text, or ``None``."""
    if "\x00" in value:
        return "must not contain NUL (\\u0000) characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    return None


def nul_path(value: Any) -> str | None:
    """The JSON path of a string (or key) holding NUL, if any; walks without recursion."""
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return path
        elif isinstance(node, dict):
            for key, item in node.items():
                if "\x00" in key:
                    return path
                stack.append((f"{path}.{key}", item))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(node))
    return None


def check_strings(value: Any) -> None:
    """400 naming a string of a decoded value (a struct too) that holds a NUL."""
    path = nul_path(msgspec.to_builtins(value))
    if path is not None:
        _refuse(path)


def _refuse(path: str) -> None:
    message = f"{path.removeprefix('$.')} must not contain NUL (\\u0000) characters"
    if path == "$":
        raise Invalid(message)
    raise Invalid(message, param=path.removeprefix("$."))


def check_json_strings(raw: bytes) -> None:
    """400 naming a string of a JSON document that holds a NUL."""
    if b"\\u0000" not in raw:
        return
    try:
        path = nul_path(msgspec.json.decode(raw))
    except (msgspec.DecodeError, RecursionError):
        return  # not valid JSON: the decoder's own error says so
    if path is not None:
        _refuse(path)


def decode_json(
    raw: bytes | msgspec.Raw, type_: type[T], *, what: str = "Request body", strings: bool = True
) -> T:
    """Decode and validate a JSON document; every failure is a 400 that says why.

    ``strings=False``: a part of a document whose strings were checked already.
    """
    try:
        value = msgspec.json.decode(raw, type=type_)
    except msgspec.ValidationError as exc:
        if str(exc).startswith("Expected `object`") and " - at " not in str(exc):
            raise Invalid(f"{what} must be a JSON object") from None
        raise Invalid(f"Invalid {what[0].lower()}{what[1:]}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise Invalid(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise Invalid(f"{what} is nested too deeply") from None
    if strings:
        check_json_strings(bytes(raw))
    return value
