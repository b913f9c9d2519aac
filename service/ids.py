"""Identifiers: ``<prefix>_`` + lowercase base32 of a 48-bit millisecond time + 50 random bits.

The alphabet is Crockford's base32 in lowercase, which is in ASCII order, so ids sort
by creation time as plain strings. Within one process ids are strictly increasing even
inside one millisecond (the random part is incremented, as in monotonic ULIDs).
"""

from __future__ import annotations

import re
import secrets
import threading
import time

ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
_TIME_CHARS = 10  # 50 bits >= 48-bit ms time
_RAND_CHARS = 10  # 50 random bits
_RAND_BITS = 5 * _RAND_CHARS

_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _b32(value: int, width: int) -> str:
    out = []
    for _ in range(width):
        out.append(ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_id(prefix: str) -> str:
    global _last_ms, _last_rand
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            rand = _last_rand + 1
            if rand >> _RAND_BITS:  # the random part overflowed: borrow the next millisecond
                ms += 1
                rand = secrets.randbits(_RAND_BITS - 1)
        else:
            # One bit of headroom so increments within a millisecond cannot overflow in practice.
            rand = secrets.randbits(_RAND_BITS - 1)
        _last_ms, _last_rand = ms, rand
    return f"{prefix}_{_b32(ms, _TIME_CHARS)}{_b32(rand, _RAND_CHARS)}"


def id_pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"^{prefix}_[{ALPHABET}]{{{_TIME_CHARS + _RAND_CHARS}}}$")


# Client-chosen ids: members, rooms, store names, speakers.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def is_name(value: str) -> bool:
    return NAME_RE.fullmatch(value) is not None
