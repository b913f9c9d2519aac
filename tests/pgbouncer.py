"""Debian's PgBouncer (1.18) in transaction pooling mode in front of the tests' embedded
PostgreSQL: every database of it, by name, on 127.0.0.1. It runs as the embedded server's
system user (PgBouncer will not run as root)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CONFIG = """
[databases]
* = host={socket_dir} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {root}/users.txt
pool_mode = transaction
max_client_conn = 200
default_pool_size = {pool_size}
logfile = {root}/pgbouncer.log
pidfile = {root}/pgbouncer.pid
"""


def available() -> bool:
    return shutil.which("pgbouncer") is not None


def require() -> None:
    """Fail, not skip, without PgBouncer: one rule with Chromium (CI installs both)."""
    if not available():
        pytest.fail(
            "Debian's pgbouncer is not installed: `apt-get install pgbouncer` (.ci/run does)"
        )


class PgBouncer:
    def __init__(self, primary: Any, pool_size: int = 4) -> None:
        info = primary.get_postmaster_info()
        self.root = Path(tempfile.mkdtemp(prefix="mneme-pgbouncer-"))
        self.root.chmod(0o777)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        (self.root / "users.txt").write_text('"postgres" ""\n')
        config = self.root / "pgbouncer.ini"
        config.write_text(CONFIG.format(socket_dir=info.socket_dir, port=info.port,
                                        listen=self.port, root=self.root,
                                        pool_size=pool_size))  # fmt: skip
        self.proc = subprocess.Popen(
            ["pgbouncer", str(config)], user=primary.system_user,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port)):
                return
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.root / "pgbouncer.log"
                raise RuntimeError(f"pgbouncer did not start: {log.read_text()[-2000:]}")
            time.sleep(0.05)

    def uri_for(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def pgbouncer_for(primary: Any, pool_size: int = 4) -> Iterator[PgBouncer]:
    require()
    bouncer = PgBouncer(primary, pool_size)
    try:
        yield bouncer
    finally:
        bouncer.stop()
