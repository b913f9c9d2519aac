"""SQL with named parameters, for statements with many of them.

asyncpg takes positional ``$n`` parameters only. A statement written with ``:name``
placeholders is compiled once (at import) into ``$n`` form, and ``args`` lays out the
values by name, so a statement with twenty-odd parameters is read and edited by name
rather than by keeping ``$17`` straight in a comment. A name used twice is one
parameter. Casts (``::vector``), quoted literals and comments are left alone.

``fetch``, ``fetchrow``, ``fetchval`` and ``execute`` run the statement on a connection or
the pool with its values given by keyword: ``await SELECT_ROOM.fetchrow(conn, room=...)``.
A name given that the statement does not use is an error too, except through
``args_among``/``fetch_among``, for statements that share one set of values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import asyncpg

from service.queries import Conn

# A comment or a quoted literal (both kept as they are), or a :name that is not the second
# colon of a ``::`` cast.
_TOKEN = re.compile(r"--[^\n]*|'(?:[^']|'')*'|(?<![:\w]):([a-z_][a-z0-9_]*)")


class NamedSQL:
    def __init__(self, sql: str) -> None:
        self.names: list[str] = []

        def number(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:  # a comment or a literal
                return match.group(0)
            if name not in self.names:
                self.names.append(name)
            return f"${self.names.index(name) + 1}"

        self.sql = _TOKEN.sub(number, sql)

    def args(self, values: Mapping[str, object]) -> list[object]:
        """The values in parameter order; every name must be given, and nothing else."""
        missing = [n for n in self.names if n not in values]
        extra = sorted(set(values) - set(self.names))
        if missing or extra:
            raise KeyError(f"SQL parameters: missing {missing}, unexpected {extra}")
        return [values[n] for n in self.names]

    def args_among(self, values: Mapping[str, object]) -> list[object]:
        """The values in parameter order, from ``values``, which may name more: one set of
        values shared by several statements (a retrieval's two arms). Every name this
        statement uses must still be given."""
        return self.args({n: values[n] for n in self.names if n in values})

    async def fetch_among(self, conn: Conn, values: Mapping[str, object]) -> list[asyncpg.Record]:
        """``fetch`` with the values ``args_among`` takes."""
        rows: list[asyncpg.Record] = await conn.fetch(self.sql, *self.args_among(values))
        return rows

    async def fetch(self, conn: Conn, /, **values: object) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await conn.fetch(self.sql, *self.args(values))
        return rows

    async def fetchrow(self, conn: Conn, /, **values: object) -> asyncpg.Record | None:
        row: asyncpg.Record | None = await conn.fetchrow(self.sql, *self.args(values))
        return row

    async def fetchval(self, conn: Conn, /, **values: object) -> Any:
        return await conn.fetchval(self.sql, *self.args(values))

    async def execute(self, conn: Conn, /, **values: object) -> str:
        status: str = await conn.execute(self.sql, *self.args(values))
        return status
