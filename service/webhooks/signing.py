"""What a delivery is signed with, and how a receiver checks it.

``Mneme-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">``, keyed
with the webhook's secret. A receiver recomputes it over the raw body (before any JSON
parsing), compares in constant time, and refuses a ``t`` older than its replay window
(``REPLAY_WINDOW_S`` here): a captured delivery replayed later fails, and the event id
(``Mneme-Event-Id``) tells a resend of one it already has.
"""

from __future__ import annotations

import hashlib
import hmac
import time

REPLAY_WINDOW_S = 300


def signature(secret: str, body: bytes, t: int) -> str:
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256)
    return f"t={t},v1={mac.hexdigest()}"


def verify(
    secret: str,
    header: str,
    body: bytes,
    *,
    now: float | None = None,
    window_s: int = REPLAY_WINDOW_S,
) -> bool:
    """Whether ``header`` signs ``body`` with ``secret`` within the replay window."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - t) > window_s:
        return False
    expected = signature(secret, body, t).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))
