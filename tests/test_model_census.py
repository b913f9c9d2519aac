"""The start-up census of other models' vectors (``service.queries.embedding_models``) gives up
after ``CENSUS_TIMEOUT_MS``, and the limit holds for its own transaction only. (What it
counts is pinned through ``mneme serve`` in ``test_second_model``.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from service.queries import embedding_models
from service.queries.named import NamedSQL

# As long as a count over a large database: longer than the limit set below.
SLOW_CENSUS = NamedSQL("SELECT :model AS model, 1 AS memories FROM pg_sleep(2)")


async def _keep_settings(conn: asyncpg.Connection) -> None:
    """A pool's reset that leaves a returned connection's settings as they are (the
    default, RESET ALL, would hide a limit that outlived the census's transaction)."""


@pytest.fixture
async def one_connection(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool of one connection: the census's and the next caller's are the same."""
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=1, reset=_keep_settings)
    yield pool
    await pool.close()


async def test_a_fresh_database_has_no_other_models(one_connection: asyncpg.Pool) -> None:
    assert await embedding_models.other_models(one_connection, "all-MiniLM-L6-v2") == {}


async def test_the_limit_ends_with_the_census(one_connection: asyncpg.Pool) -> None:
    await embedding_models.other_models(one_connection, "all-MiniLM-L6-v2")
    # The same connection, back in the pool untouched: the server's default, no limit.
    assert await one_connection.fetchval("SHOW statement_timeout") == "0"


async def test_the_census_gives_up_past_its_limit(
    one_connection: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedding_models, "OTHER_MODELS", SLOW_CENSUS)
    monkeypatch.setattr(embedding_models, "CENSUS_TIMEOUT_MS", 100)
    with pytest.raises(asyncpg.QueryCanceledError):
        await embedding_models.other_models(one_connection, "all-MiniLM-L6-v2")
