"""SQL with named parameters (service/queries/named.py)."""

from __future__ import annotations

import asyncpg
import pytest

from service.queries import search as sq
from service.queries.keys import Principal
from service.queries.named import NamedSQL


def test_names_become_numbered_parameters_once_each() -> None:
    q = NamedSQL("SELECT :a::int + :b, 'x:y :not_me' -- the caller's :comment\n, :a, ':quoted'")
    assert q.sql == "SELECT $1::int + $2, 'x:y :not_me' -- the caller's :comment\n, $1, ':quoted'"
    assert q.names == ["a", "b"]
    assert q.args({"b": 2, "a": 1}) == [1, 2]


def test_a_missing_or_unexpected_value_is_an_error() -> None:
    q = NamedSQL("SELECT :a, :b")
    with pytest.raises(KeyError, match="missing"):
        q.args({"a": 1})
    with pytest.raises(KeyError, match="unexpected"):
        q.args({"a": 1, "b": 2, "c": 3})


async def test_a_statement_runs_with_its_values_by_keyword(conn: asyncpg.Connection) -> None:
    q = NamedSQL("SELECT :a::int AS a, :b::text AS b, :a::int + 1 AS c")
    [row] = await q.fetch(conn, b="x", a=1)
    assert dict(row.items()) == {"a": 1, "b": "x", "c": 2}
    row = await q.fetchrow(conn, a=2, b="y")
    assert row is not None and (row["a"], row["b"], row["c"]) == (2, "y", 3)
    assert await q.fetchval(conn, a=3, b="z") == 3
    assert await NamedSQL("SELECT :x::int WHERE false").fetchrow(conn, x=1) is None
    # The connection is positional only: a parameter may be named "conn" (or "self").
    assert await NamedSQL("SELECT :conn::int + :self::int").fetchval(conn, conn=1, self=2) == 3
    await NamedSQL("CREATE TEMP TABLE t (v int)").execute(conn)
    assert await NamedSQL("INSERT INTO t VALUES (:v), (:v)").execute(conn, v=7) == "INSERT 0 2"
    with pytest.raises(KeyError, match="missing"):
        await q.fetchval(conn, a=1)


def test_every_search_statement_takes_its_values_by_name() -> None:
    first = sq.STATEMENTS[False, "all"]
    text, vector = set(first.text.names), set(first.vector.names)
    # statement_values gives every value either statement takes; the vector arm also
    # takes the text arm's ids.
    given = set(sq.statement_values(sq.RetrievalRequest(
        principal=Principal("k", "ws", "scale", "service", None, frozenset(), []), store_id="s",
        profile=sq.Profile(1, 1, 0, 0), query_text="q", vector=None, filters=sq.SearchFilters(),
        per_arm=1,
    ), budget=1))  # fmt: skip
    assert text | vector == given | {"text_ids"}
    assert "query_vector" not in text  # the text arm runs before the vector exists
    for retrieval in sq.STATEMENTS.values():
        for statement, names in ((retrieval.text, text), (retrieval.vector, vector)):
            assert set(statement.names) == names
            assert f"${len(names)}" in statement.sql and f"${len(names) + 1}" not in statement.sql
