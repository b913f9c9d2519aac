"""SQL and the typed functions that run it, one module per area of the schema.

Query functions take a connection or the pool first (``Conn``) and return typed values;
"not found" is ``None``, which the faces turn into a 404.
"""

from __future__ import annotations

from typing import TypeAlias

import asyncpg

Conn: TypeAlias = "asyncpg.Connection | asyncpg.Pool"
