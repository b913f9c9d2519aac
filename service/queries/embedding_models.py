"""Which embedding models made the stored vectors: a model change shows itself at start."""

from __future__ import annotations

import asyncpg

from service.queries.named import NamedSQL

# The count reads every memory (no index says which model made a vector): on a large
# database it is given up after this long rather than keep a connection busy at start.
CENSUS_TIMEOUT_MS = 10_000

# For this transaction only (set_config's third argument), as SET LOCAL would.
STATEMENT_TIMEOUT = NamedSQL("SELECT set_config('statement_timeout', :ms, true)")

# Every store of every workspace: this is the deployment's own account, logged, never
# served to a caller.
OTHER_MODELS = NamedSQL("""
SELECT embedding_model AS model, count(*) AS memories
FROM memories
WHERE embedding IS NOT NULL AND embedding_model IS DISTINCT FROM :model
GROUP BY embedding_model
ORDER BY embedding_model
""")


async def other_models(pool: asyncpg.Pool, model: str) -> dict[str, int]:
    """Model name -> how many memories carry a vector it made, for each model but
    ``model`` (the name of a vector made before names were stored: ``"unknown"``).
    Raises ``asyncpg.QueryCanceledError`` past ``CENSUS_TIMEOUT_MS``."""
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        await STATEMENT_TIMEOUT.fetchval(conn, ms=str(CENSUS_TIMEOUT_MS))
        rows = await OTHER_MODELS.fetch(conn, model=model)
    return {r["model"] or "unknown": r["memories"] for r in rows}
