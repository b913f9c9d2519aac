"""First-run bootstrap, MNEME_BOOTSTRAP_KEY, and the key/workspace CLI flows."""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Awaitable, Callable

import asyncpg
import pytest

from service.ops.bootstrap import bootstrap
from service.queries import keys
from service.settings import Settings
from tests.helpers import Client, auth, repo_root

MakeClient = Callable[[Settings], Awaitable[Client]]


def mneme(db_url: str, command: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``mneme <command>`` against ``db_url`` in a subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env.update(MNEME_DATABASE_URL=db_url, **extra)
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *shlex.split(command)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", ["keys list", "migrate", "serve"])
async def test_a_database_out_of_reach_is_one_line_without_the_password(
    db_url: str, command: str
) -> None:
    wrong = [  # nothing listens on port 1; a real server with a wrong password
        "postgresql://mneme:hunter2-secret@127.0.0.1:1/mneme",
        re.sub(r"//[^@/]*@", "//nobody:hunter2-secret@", db_url),
    ]
    for url in wrong:
        result = mneme(url, command, MNEME_DATABASE_WAIT="0")
        assert result.returncode == 1, result.stderr
        [line] = [x for x in result.stderr.splitlines() if x.startswith("mneme: error:")]
        assert "cannot connect to the database" in line
        assert "Traceback" not in result.stderr and "hunter2" not in result.stderr


def test_serve_refuses_the_placeholder_bootstrap_key_of_the_kubernetes_secret() -> None:
    secret = (repo_root() / "deploy" / "kubernetes" / "secret.yaml").read_text()
    found = re.search(r'^\s*MNEME_BOOTSTRAP_KEY: "([^"]+)"', secret, re.M)
    assert found is not None
    # No database is reached: the key is refused before anything starts.
    unreachable = "postgresql://mneme:x@127.0.0.1:1/mneme"
    result = mneme(unreachable, "serve", MNEME_DATABASE_WAIT="0", MNEME_BOOTSTRAP_KEY=found[1])
    assert result.returncode == 1, result.stderr
    [line] = [x for x in result.stderr.splitlines() if x.startswith("mneme: error:")]
    assert "MNEME_BOOTSTRAP_KEY" in line and "CHANGE-ME" in line
    assert "Traceback" not in result.stderr and found[1] not in result.stderr


async def test_first_run_creates_default_workspace_and_announces_one_key(empty_db_url: str) -> None:
    from service.ops import migrations

    conn = await asyncpg.connect(empty_db_url)
    try:
        await migrations.migrate(conn)
        shown: list[str] = []
        await bootstrap(conn, None, shown.append)
        await bootstrap(conn, None, shown.append)  # a restart shows nothing new
        assert len(shown) == 1
        principal = await keys.authenticate(conn, shown[0])
        assert principal is not None and principal.is_service
        assert principal.scopes == {"memory:read", "memory:write", "admin"}
        assert principal.workspace_tier == "scale"
        stores = await conn.fetch(
            "SELECT name FROM stores WHERE workspace_id = $1", principal.workspace_id
        )
        assert [s["name"] for s in stores] == ["default"]
    finally:
        await conn.close()


async def test_concurrent_first_starts_create_one_workspace(empty_db_url: str) -> None:
    from service.ops import migrations

    conns = [await asyncpg.connect(empty_db_url) for _ in range(3)]
    try:
        await migrations.migrate(conns[0])
        shown: list[str] = []
        await asyncio.gather(*(bootstrap(c, None, shown.append) for c in conns))
        assert len(shown) == 1
        assert await conns[0].fetchval("SELECT count(*) FROM workspaces") == 1
    finally:
        for c in conns:
            await c.close()


async def test_replicas_starting_together_register_one_bootstrap_key(
    empty_db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # compose's api replicas: the same MNEME_BOOTSTRAP_KEY, one database, one moment. The
    # check and the insert were two statements, so a loser died on the unique index.
    from service.ops import migrations

    conns = [await asyncpg.connect(empty_db_url) for _ in range(4)]
    try:
        await migrations.migrate(conns[0])
        secret = "replicas-share-this-key-0123"
        with caplog.at_level(logging.INFO, logger="mneme.bootstrap"):
            for _ in range(3):  # each round: four starts racing on a fresh key
                secret += "x"
                await asyncio.gather(*(bootstrap(c, secret, print) for c in conns))
        rows = await conns[0].fetch("SELECT workspace_id FROM api_keys")
        assert len(rows) == 3 and len({r["workspace_id"] for r in rows}) == 1
        said = [r.getMessage() for r in caplog.records]
        assert (
            said.count("registered MNEME_BOOTSTRAP_KEY as the default workspace's service key") == 3
        )
        assert not [m for m in said if "another workspace" in m or "shorter" in m], said
    finally:
        for c in conns:
            await c.close()


async def test_bootstrap_key_is_registered_instead_of_a_printed_one(
    make_client: MakeClient, settings: Settings, conn: asyncpg.Connection
) -> None:
    client = await make_client(settings.with_overrides(bootstrap_key="my-compose-file-key-123"))
    assert (await client.get("/api/v1/keys", headers=auth("my-compose-file-key-123"))).status == 200
    # A second instance with the same key registers nothing new.
    await make_client(settings.with_overrides(bootstrap_key="my-compose-file-key-123"))
    rows = await conn.fetch("SELECT secret_sha256 FROM api_keys WHERE name = 'bootstrap'")
    assert [bytes(r["secret_sha256"]) for r in rows] == [keys.digest("my-compose-file-key-123")]


async def test_a_short_bootstrap_key_is_registered_with_a_warning(
    make_client: MakeClient, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    # The operator's choice stands (a test harness's "testkey"); the log says it is weak.
    with caplog.at_level(logging.WARNING, logger="mneme.bootstrap"):
        client = await make_client(settings.with_overrides(bootstrap_key="testkey"))
    assert (await client.get("/api/v1/keys", headers=auth("testkey"))).status == 200
    assert any("shorter than 16" in r.getMessage() for r in caplog.records)


async def test_keys_create_prints_only_a_working_key(client: Client, db_url: str) -> None:
    result = mneme(db_url, "keys create --kind service --scopes memory:read,memory:write,admin")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("mneme_sk_")
    assert (await client.get("/api/v1/members", headers=auth(lines[0]))).status == 200


async def test_personal_key_via_cli_needs_a_member(client: Client, db_url: str) -> None:
    result = mneme(db_url, "keys create --kind personal --member ghost --scopes memory:read")
    assert result.returncode == 1
    assert "ghost" in result.stderr and result.stdout == ""
    assert mneme(db_url, "members create alice --kind human").returncode == 0
    result = mneme(db_url, "keys create --kind personal --member alice --scopes memory:read")
    assert result.returncode == 0, result.stderr
    personal = result.stdout.strip()
    conn = await asyncpg.connect(db_url)
    try:
        principal = await keys.authenticate(conn, personal)
    finally:
        await conn.close()
    assert principal is not None
    assert (principal.kind, principal.member) == ("personal", "alice")
    assert principal.scopes == {"memory:read"}
    # Authenticated, but without the admin scope.
    assert (await client.get("/api/v1/members", headers=auth(personal))).status == 403


async def test_keys_list_and_revoke(client: Client, db_url: str) -> None:
    secret = mneme(db_url, "keys create --scopes admin --name to-revoke").stdout.strip()
    listing = mneme(db_url, "keys list").stdout
    assert secret not in listing
    line = next(row for row in listing.splitlines() if "to-revoke" in row)
    key_id = line.split()[0]
    result = mneme(db_url, f"keys revoke {key_id}")
    assert result.returncode == 0, result.stderr
    assert (await client.get("/api/v1/members", headers=auth(secret))).status == 401


async def test_workspaces_create_prints_its_service_key(client: Client, db_url: str) -> None:
    result = mneme(db_url, "workspaces create acme --tier pro")
    assert result.returncode == 0, result.stderr
    secret = result.stdout.strip()
    assert secret.startswith("mneme_sk_") and "\n" not in secret
    conn = await asyncpg.connect(db_url)
    try:
        principal = await keys.authenticate(conn, secret)
        assert principal is not None and principal.workspace_tier == "pro" and principal.is_service
    finally:
        await conn.close()
    # Its own space: nothing of the default workspace is visible.
    assert (await (await client.get("/api/v1/members", headers=auth(secret))).json())["data"] == []
    again = mneme(db_url, "workspaces create ACME")
    assert again.returncode == 1 and "already exists" in again.stderr


def test_migrate_status_lists_applied_files(db_url: str) -> None:
    result = mneme(db_url, "migrate --status")
    assert result.returncode == 0, result.stderr
    assert "0001_schema" in result.stdout and "applied" in result.stdout
    result = mneme(db_url, "migrate")
    assert result.returncode == 0 and "up to date" in result.stderr


def test_migrate_applies_to_an_empty_database(empty_db_url: str) -> None:
    result = mneme(empty_db_url, "migrate")
    assert result.returncode == 0, result.stderr
    assert "applied 0001_schema" in result.stderr


def test_version_is_the_installed_distributions() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "service.cli", "--version"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"mneme {importlib.metadata.version('mneme')}\n"
    assert re.fullmatch(r"mneme \d+\.\d+\.\d+\S*\n", result.stdout)


def test_cli_refuses_an_external_database_that_is_behind(empty_db_url: str) -> None:
    result = mneme(empty_db_url, "keys list")
    assert result.returncode == 1
    assert "mneme migrate" in result.stderr
