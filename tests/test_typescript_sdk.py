"""The TypeScript SDK (clients/typescript) against a real ``mneme serve``: npm builds it
and runs its own suites (``npm test``: the consumer type check, then ``node --test``),
pointed at a server started here.

The Node side needs only the server's URL and keys: its retry tests run their own small
proxy in front of the server. A key of a ``free`` workspace (60 requests a minute) is
made here, where the database is at hand, for its real 429.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.common import Server
from tests.helpers import BOOTSTRAP_KEY, free_workspace_key, repo_root, serving

pytestmark = pytest.mark.slow  # pyproject.toml: markers

PACKAGE = repo_root() / "clients" / "typescript"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(tmp_path_factory.mktemp("ts-sdk")) as srv:
        yield srv


def _stale(package: Path) -> bool:
    """Whether ``npm ci`` is needed: npm writes node_modules/.package-lock.json on every
    install, so one older than package-lock.json is an install of other versions."""
    installed = package / "node_modules" / ".package-lock.json"
    lock = package / "package-lock.json"
    return not installed.exists() or installed.stat().st_mtime < lock.stat().st_mtime


def _npm(*args: str, env: dict[str, str], timeout: float) -> None:
    """Run npm in the package, showing its output (pytest prints it on a failure)."""
    out = subprocess.run(
        ["npm", *args], cwd=PACKAGE, env=env, capture_output=True, text=True, timeout=timeout
    )
    print(out.stdout, out.stderr, sep="\n")
    assert out.returncode == 0, f"npm {' '.join(args)} exited {out.returncode}"


def test_the_typescript_sdk_passes_its_suites_against_a_real_server(server: Server) -> None:
    if shutil.which("npm") is None:
        pytest.fail("Node.js 18+ and npm are needed for the TypeScript SDK's tests")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    if _stale(PACKAGE):
        _npm("ci", "--no-audit", "--no-fund", env=env, timeout=300)
    env.update(
        MNEME_URL=server.base,
        MNEME_API_KEY=BOOTSTRAP_KEY,
        MNEME_FREE_API_KEY=asyncio.run(free_workspace_key(server.database_url(), "ts-sdk-free")),
    )
    _npm("test", env=env, timeout=600)
