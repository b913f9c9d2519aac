"""Identifier format and ordering; configuration parsing."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest

from service.ids import ALPHABET, id_pattern, new_id
from service.ops import db
from service.settings import Settings, SettingsError


def test_ids_have_the_documented_shape() -> None:
    ident = new_id("mem")
    assert id_pattern("mem").fullmatch(ident)
    assert len(ident) == len("mem_") + 20
    assert set(ident[4:]) <= set(ALPHABET)
    assert list(ALPHABET) == sorted(ALPHABET)  # why string order is time order


def test_ids_sort_by_creation_even_within_one_millisecond() -> None:
    ids = [new_id("mem") for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_id_time_part_is_the_millisecond_clock() -> None:
    import time

    before = time.time_ns() // 1_000_000
    ident = new_id("memstore")
    value = 0
    for ch in ident.split("_", 1)[1][:10]:
        value = value * 32 + ALPHABET.index(ch)
    assert before <= value <= before + 1000


def test_settings_defaults() -> None:
    s = Settings.from_env({})
    assert s.database_url is None and s.embedded
    assert (s.host, s.port, s.data_dir) == ("127.0.0.1", 8080, Path(".mneme"))
    assert s.worker is True
    assert dict(s.rate_limits) == {"free": 60, "pro": 600, "scale": 6000}


def test_settings_from_environment() -> None:
    s = Settings.from_env(
        {
            "MNEME_DATABASE_URL": "postgresql://db/mneme",
            "MNEME_PORT": "9000",
            "MNEME_WORKER": "off",
            "MNEME_RATE_LIMITS": "free=10, scale=20",
            "MNEME_BOOTSTRAP_KEY": "k" * 20,
            "MNEME_DATA_DIR": "",  # empty means unset
            "MNEME_PUBLIC_URL": "HTTPS://Mneme.Example.com/memory/",
            "MNEME_OAUTH_ACCESS_TOKEN_SECONDS": "600",
        }
    )
    assert s.public_url == "https://mneme.example.com/memory"  # no trailing slash
    assert s.oauth_access_ttl_s == 600
    assert not s.embedded
    assert s.port == 9000 and s.worker is False
    assert dict(s.rate_limits) == {"free": 10, "pro": 600, "scale": 20}
    assert s.data_dir == Path(".mneme")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MNEME_PORT", "http", "MNEME_PORT"),
        ("MNEME_PORT", "70000", "MNEME_PORT"),
        ("MNEME_WORKER", "maybe", "MNEME_WORKER"),
        ("MNEME_RATE_LIMITS", "gold=5", "MNEME_RATE_LIMITS"),
        ("MNEME_RATE_LIMITS", "free=0", "MNEME_RATE_LIMITS"),
        ("MNEME_BOOTSTRAP_KEY", "two words", "MNEME_BOOTSTRAP_KEY"),
        ("MNEME_BOOTSTRAP_KEY", "caf\u00e9", "MNEME_BOOTSTRAP_KEY"),
        # A placeholder left in (deploy/kubernetes/secret.yaml's), in any case, or an
        # example key the docs show: an admin key anyone who read them knows.
        ("MNEME_BOOTSTRAP_KEY", "CHANGE-ME-to-32-random-characters", "MNEME_BOOTSTRAP_KEY"),
        ("MNEME_BOOTSTRAP_KEY", "prod-change-me-0123456789abcdef", "MNEME_BOOTSTRAP_KEY"),
        ("MNEME_BOOTSTRAP_KEY", "your-key", "MNEME_BOOTSTRAP_KEY"),
        ("MNEME_LOG_LEVEL", "chatty", "MNEME_LOG_LEVEL"),
        ("MNEME_DATABASE_POOLER", "statement", "MNEME_DATABASE_POOLER"),
        ("MNEME_PUBLIC_URL", "mneme.example.com", "MNEME_PUBLIC_URL"),
        ("MNEME_PUBLIC_URL", "https://mneme.example.com/?x=1", "MNEME_PUBLIC_URL"),
        ("MNEME_PUBLIC_URL", "ftp://mneme.example.com", "MNEME_PUBLIC_URL"),
        ("MNEME_OAUTH_ACCESS_TOKEN_SECONDS", "7200", "MNEME_OAUTH_ACCESS_TOKEN_SECONDS"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({name: value})


GIB = 1024**3


@pytest.mark.parametrize(
    ("memory", "shared_buffers", "cache"),
    [
        (24 * GIB, "6144MB", "12288MB"),  # this project's machines
        (2 * GIB, "512MB", "1024MB"),
        (256 * 1024**2, "128MB", "512MB"),  # never below PostgreSQL's own default
        (128 * GIB, "8192MB", "65536MB"),  # shared buffers stop growing at 8 GB
    ],
)
def test_the_embedded_server_is_sized_to_the_machine(
    memory: int, shared_buffers: str, cache: str
) -> None:
    tuning = db.embedded_tuning(memory)
    assert tuning["shared_buffers"] == shared_buffers
    assert tuning["effective_cache_size"] == cache
    assert tuning["jit"] == "off"


async def test_the_embedded_server_runs_with_its_tuning(db_url: str) -> None:
    """The test server is started as `mneme serve` starts it: the settings are in force."""
    conn = await asyncpg.connect(db_url)
    try:
        for name, value in db.embedded_tuning(db.machine_memory()).items():
            shown = await conn.fetchval(f"SHOW {name}")
            assert shown == value or shown == _pg_units(value), name
    finally:
        await conn.close()


def _pg_units(value: str) -> str:
    """PostgreSQL shows 6144MB as 6GB."""
    if value.endswith("MB") and int(value[:-2]) % 1024 == 0:
        return f"{int(value[:-2]) // 1024}GB"
    return value


def test_the_tuning_is_included_once_however_often_the_server_starts(tmp_path: Path) -> None:
    conf = tmp_path / "postgresql.conf"
    conf.write_text("max_connections = 100\n")
    for _ in range(3):
        db._write_tuning(tmp_path)
    assert conf.read_text().count(db.INCLUDE_LINE) == 1
    written = (tmp_path / db.TUNING_FILE).read_text()
    assert "shared_buffers = '" in written and "jit = 'off'" in written


@pytest.mark.parametrize(
    ("cgroup", "files", "limit"),
    [
        # cgroup v2, a limit on the unit's own group and a lower one on its parent
        ("0::/system.slice/mneme.service\n",
         {"sys/fs/cgroup/system.slice/mneme.service/memory.max": "4294967296\n",
          "sys/fs/cgroup/system.slice/memory.max": "2147483648\n",
          "sys/fs/cgroup/memory.max": "max\n"},
         2 * GIB),
        # cgroup v1 (a container): the memory controller's file
        ("12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n",
         {"sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "1073741824\n"},
         1 * GIB),
        ("0::/\n", {"sys/fs/cgroup/memory.max": "max\n"}, None),  # no limit: the machine's
    ],
)  # fmt: skip
def test_memory_is_the_lowest_limit_above_this_process(
    tmp_path: Path, cgroup: str, files: dict[str, str], limit: int | None
) -> None:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    for name, content in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    machine = db.machine_memory(tmp_path / "nowhere")  # no cgroup files: the machine's
    assert db.machine_memory(tmp_path) == (machine if limit is None else limit)


def test_what_needs_a_session_bypasses_a_transaction_pooler() -> None:
    pooled = Settings.from_env({"MNEME_DATABASE_URL": "postgresql://bouncer/db",
                                "MNEME_DATABASE_POOLER": "transaction"})  # fmt: skip
    assert pooled.transaction_pooled and pooled.session_url("postgresql://bouncer/db") is None
    direct = pooled.with_overrides(direct_database_url="postgresql://primary/db")
    assert direct.session_url("postgresql://bouncer/db") == "postgresql://primary/db"
    plain = Settings.from_env({"MNEME_DATABASE_URL": "postgresql://primary/db"})
    assert plain.session_url("postgresql://primary/db") == "postgresql://primary/db"


@pytest.mark.parametrize(
    ("env", "url"),
    [
        ({}, "http://127.0.0.1:8080/readyz"),
        ({"MNEME_HOST": "0.0.0.0", "MNEME_PORT": "9000"}, "http://127.0.0.1:9000/readyz"),  # noqa: S104
        ({"MNEME_HOST": "::"}, "http://127.0.0.1:8080/readyz"),
        ({"MNEME_HOST": "::1", "MNEME_PORT": "81"}, "http://[::1]:81/readyz"),
        ({"MNEME_HOST": "10.1.2.3"}, "http://10.1.2.3:8080/readyz"),
    ],
)
def test_the_image_healthcheck_asks_where_serve_listens(env: dict[str, str], url: str) -> None:
    from service.ops.healthcheck import readyz_url

    assert readyz_url(env) == url
