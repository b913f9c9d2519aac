"""``python -m service.ops.healthcheck``: exit 0 when this container's service answers
``/readyz`` with 200, else 1 (the image's ``HEALTHCHECK``). It asks where ``mneme
serve`` listens, ``MNEME_HOST`` and ``MNEME_PORT``; a wildcard host is reached on the
loopback. Standard library only: it runs every 15 s."""

from __future__ import annotations

import os
import sys
import urllib.request
from collections.abc import Mapping

WILDCARDS = ("", "0.0.0.0", "::", "[::]")  # noqa: S104 (names them, binds nothing)


def readyz_url(env: Mapping[str, str] = os.environ) -> str:
    host = env.get("MNEME_HOST", "").strip()
    host = "127.0.0.1" if host in WILDCARDS else host.strip("[]")
    port = env.get("MNEME_PORT", "").strip() or "8080"
    return f"http://[{host}]:{port}/readyz" if ":" in host else f"http://{host}:{port}/readyz"


def main() -> int:
    try:
        with urllib.request.urlopen(readyz_url(), timeout=4) as answer:  # noqa: S310 (http:)
            return 0 if answer.status == 200 else 1
    except OSError as exc:  # refused, timed out, or an HTTP error status
        print(f"not ready: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
