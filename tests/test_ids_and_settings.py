"""Identifier format and ordering; configuration parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.ids import ALPHABET, id_pattern, new_id
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
        }
    )
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
        ("MNEME_BOOTSTRAP_KEY", "short", "MNEME_BOOTSTRAP_KEY"),
        ("MNEME_LOG_LEVEL", "chatty", "MNEME_LOG_LEVEL"),
    ],
)
def test_bad_settings_name_the_variable(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        Settings.from_env({name: value})
