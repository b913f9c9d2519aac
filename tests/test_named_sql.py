"""SQL with named parameters (service/queries/named.py)."""

from __future__ import annotations

import pytest

from service.queries import search as sq
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


def test_every_search_statement_takes_the_same_named_values() -> None:
    names = set(sq.STATEMENTS[False, "all"].names)
    assert len(names) == 25
    for statement in sq.STATEMENTS.values():
        assert set(statement.names) == names
        assert "$25" in statement.sql and "$26" not in statement.sql
