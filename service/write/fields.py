"""Rules for values a client writes: text, scope, path, metadata, images.

Each check raises ``service.problems.Invalid`` (a 400 on the HTTP API) whose message names
the field and says what is allowed. Nothing here touches the database.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import unicodedata

import msgspec

from service.ids import is_name
from service.problems import Conflict, Invalid

MAX_TEXT_BYTES = 102_400
MAX_PATH_BYTES = 1024
MAX_METADATA_KEYS = 16
MAX_METADATA_BYTES = 64 * 1024  # encoded as compact JSON (UTF-8)
MAX_IMAGE_BYTES = 5 * 1024 * 1024
TIERS = ("core", "hindsight")
STATUSES = ("active", "archived", "deleted")

_json = msgspec.json.Encoder()

# Magic numbers: the bytes must really be the type they claim.
IMAGE_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),  # and "WEBP" at offset 8
}


def looks_like(raw: bytes, mime_type: str) -> bool:
    if not raw.startswith(IMAGE_MAGIC[mime_type]):
        return False
    return mime_type != "image/webp" or raw[8:12] == b"WEBP"


def check_text(text: str, field: str = "text") -> bytes:
    """1 byte to 100 KiB of UTF-8 without NUL; returns the UTF-8 bytes."""
    if "\x00" in text:
        raise Invalid(f"{field} must not contain NUL characters", param=field)
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        raise Invalid(f"{field} is not valid UTF-8 (lone surrogate)", param=field) from None
    if not raw:
        raise Invalid(f"{field} must not be empty", param=field)
    if len(raw) > MAX_TEXT_BYTES:
        raise Invalid(
            f"{field} is {len(raw)} bytes; the limit is {MAX_TEXT_BYTES} bytes of UTF-8",
            param=field,
        )
    return raw


# What counts as blank (an empty category, a query of spaces) and what a list item in a
# query string is trimmed of: ASCII whitespace, as the OpenAPI document's patterns say it.
BLANK = " \t\n\r\f\v"
# (store, provider, providerRef) is a unique index, whose entries PostgreSQL caps at about
# 2.7 kB: at 4 bytes a character, these two stay under it whatever the text.
MAX_SPEAKER_CHARS = 64
# No control character; no space first or last (the OpenAPI document has this pattern).
SPEAKER_NAME = re.compile("[^ \x00-\x1f\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f]*[^ \x00-\x1f\x7f-\x9f])?")


def check_speaker_name(name: str) -> str:
    """A speaker's name, as registering it requires (over HTTP or by an import)."""
    if len(name) > MAX_SPEAKER_CHARS or not SPEAKER_NAME.fullmatch(name):
        raise Invalid(
            f"Speaker names are 1-{MAX_SPEAKER_CHARS} characters without control characters "
            "or leading or trailing spaces",
            param="name",
        )
    return name


def speakers_full(store_name: str, limit: int) -> Conflict:
    """The refusal of a speaker past its store's limit (MNEME_MAX_SPEAKERS_PER_STORE)."""
    return Conflict(
        f"Store {store_name!r} has {limit} speakers, the most a store may register "
        "(MNEME_MAX_SPEAKERS_PER_STORE); remove one first"
    )


MAX_PROVIDER_CHARS = 64
MAX_PROVIDER_REF_CHARS = 512
INT4_MAX = 2**31 - 1


def check_length(value: str, field: str, limit: int) -> str:
    if len(value) > limit:
        raise Invalid(f"{field} is longer than {limit} characters", param=field)
    return value


def query_int(raw: str) -> int | None:
    """A query-string integer: ASCII digits only, else ``None``. One beyond any limit
    stands in for a number of more digits than Python parses (4,300)."""
    if not raw.isascii() or not raw.isdigit():
        return None
    digits = raw.lstrip("0") or "0"
    return int(digits) if len(digits) <= 18 else 10**18


def is_blank(value: str) -> bool:
    return not value.strip(BLANK)


def whole_number(value: float, field: str, lo: int, hi: int) -> int:
    """An integer field, which JSON may also spell ``3.0`` (JSON Schema's integers include
    it): a whole number from ``lo`` to ``hi``, else a 400."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Invalid(f"{field} must be an integer from {lo} to {hi}", param=field)
    if isinstance(value, float) and not value.is_integer():
        raise Invalid(f"{field} must be a whole number, got {value}", param=field)
    if not lo <= value <= hi:
        raise Invalid(
            f"{field} must be from {lo} to {hi}, got {value}: out-of-range values are refused, "
            "not clamped",
            param=field,
        )
    return int(value)


def sha256_hex(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def check_scope(scope: str) -> str:
    """``workspace``, ``room:<id>`` or ``pair:<id>:<id>`` with ids obeying the member-id rule."""
    kind, _, rest = scope.partition(":")
    ok = False
    if scope == "workspace":
        ok = True
    elif kind == "room":
        ok = is_name(rest)
    elif kind == "pair":
        parts = rest.split(":")
        ok = len(parts) == 2 and all(is_name(p) for p in parts)
    if not ok:
        raise Invalid(
            f"Invalid scope {scope!r}: use 'workspace', 'room:<roomId>' or "
            "'pair:<humanId>:<agentId>'",
            param="scope",
        )
    return scope


def check_choice(value: str, valid: tuple[str, ...], field: str) -> str:
    if value not in valid:
        raise Invalid(
            f"Invalid {field} {value!r}; valid values: {', '.join(valid)}",
            param=field,
            valid=list(valid),
        )
    return value


def check_path(path: str) -> str:
    """SPEC §3.4: 1 to 1024 UTF-8 bytes, NFC, relative, no empty/./.. segments, no controls."""
    if not path:
        raise Invalid("path must not be empty", param="path")
    if any(unicodedata.category(ch) == "Cc" for ch in path):
        raise Invalid("path must not contain control characters", param="path")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise Invalid("path is not valid UTF-8 (lone surrogate)", param="path") from None
    if size > MAX_PATH_BYTES:
        raise Invalid(f"path is {size} bytes; the limit is {MAX_PATH_BYTES}", param="path")
    if unicodedata.normalize("NFC", path) != path:
        raise Invalid("path must be in Unicode NFC form", param="path")
    if path.startswith("/"):
        raise Invalid("path must be relative: no leading '/'", param="path")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise Invalid(f"path {path!r} has an empty, '.' or '..' segment", param="path")
    return path


def check_metadata(metadata: dict[str, str]) -> dict[str, str]:
    """At most 16 keys, no NUL, at most 64 KiB as JSON: every version of a memory keeps a
    copy, so a big value costs again with each change."""
    if len(metadata) > MAX_METADATA_KEYS:
        raise Invalid(
            f"metadata has {len(metadata)} keys; at most {MAX_METADATA_KEYS} are allowed",
            param="metadata",
        )
    for key, value in metadata.items():
        if "\x00" in key or "\x00" in value:
            raise Invalid("metadata must not contain NUL characters", param="metadata")
    try:
        size = len(_json.encode(metadata))
    except UnicodeEncodeError:
        raise Invalid("metadata is not valid UTF-8 (lone surrogate)", param="metadata") from None
    if size > MAX_METADATA_BYTES:
        raise Invalid(
            f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES} bytes (64 KiB)",
            param="metadata",
        )
    return metadata


def check_importance(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise Invalid(f"importance must be between 0 and 1, got {value}", param="importance")
    return float(value)


def decode_image(data: str, mime_type: str) -> bytes:
    """Base64 media of a supported type, at most 5 MiB decoded, whose bytes match the type."""
    check_choice(mime_type, tuple(IMAGE_MAGIC), "image.mimeType")
    if len(data) > (MAX_IMAGE_BYTES * 4) // 3 + 8:
        raise Invalid("image is larger than 5 MiB", param="image")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise Invalid("image.data is not valid base64", param="image.data") from None
    if len(raw) > MAX_IMAGE_BYTES:
        raise Invalid("image is larger than 5 MiB", param="image")
    if not looks_like(raw, mime_type):
        raise Invalid(f"image.data is not a {mime_type} image", param="image.data")
    return raw
