"""Schemathesis hooks for the fuzz run (bench/fuzz.py, tests/test_fuzz.py).

- Half of the generated path ids that could be real are swapped for objects the harness
  seeded (``MNEME_FUZZ_IDS``, by parameter name: only parameters whose schema takes any
  string without NUL), so requests reach real memories, stores, rooms and keys as well
  as missing ones. The choice hangs on the generated value, so a seed still gives the
  same run. Values the schema forbids (negative cases: NUL) are kept.
- The harness's own key (``MNEME_FUZZ_KEY_ID``) is never revoked: the stateful phase lists
  the workspace's keys and deletes what it finds, which would turn every later case into
  a 401. Any other key may go.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import schemathesis

PROTECTED = os.environ.get("MNEME_FUZZ_KEY_ID", "")
REAL: dict[str, list[str]] = json.loads(os.environ.get("MNEME_FUZZ_IDS", "{}"))


@schemathesis.hook
def map_path_parameters(
    context: Any, path_parameters: dict[str, Any] | None
) -> dict[str, Any] | None:
    if path_parameters is None:
        return None
    for name, value in path_parameters.items():
        choices = REAL.get(name)
        if not choices or not isinstance(value, str) or "\x00" in value:
            continue
        pick = zlib.crc32(value.encode("utf-8", "replace"))
        if pick % 2 == 0:
            path_parameters[name] = choices[(pick // 2) % len(choices)]
    return path_parameters


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if case.method.upper() == "DELETE" and (case.path_parameters or {}).get("key_id") == PROTECTED:
        case.path_parameters["key_id"] = "key_0000000000aaaaaaaaaa"  # no such key: a 404
