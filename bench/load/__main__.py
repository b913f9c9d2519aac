"""Load test (issue 12): the highest request rate Mneme sustains under a mixed load.

Starts a real `mneme serve` (embedded PostgreSQL in a temporary directory, worker on),
creates workspaces with `mneme workspaces create` (tier scale, whose rate limit
bench.common.Server raises), and in each, through the HTTP API, one store per LoCoMo
conversation with its speakers and every turn (batch writes), and a read/write key for
the load. Once the worker has embedded every memory, Locust (bench/load/locustfile.py)
runs headless as a subprocess, in steps of increasing target rate: U users, each paced
with ``constant_throughput`` so that together they start U x pace tasks per second, one
request a task: 70 % searches, 20 % browse windows, 5 % store lists, 5 % writes.

A step passes when it reached its target rate (at least 90 % of it), had no failures
(any non-2xx or connection error) and an aggregated p99 under 250 ms. The steps stop at
the first that does not pass; the report is the highest rate that passed, with its
per-endpoint percentiles. Each step also records the CPU each process used (service,
PostgreSQL, Locust: they share the machine's cores) and the statuses the service
counted per route (its /metrics).

    .venv/bin/python -m bench.load [--quick] [--step-seconds 30] [--rates 10,20,30]
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import importlib.metadata
import json
import math
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bench.common import LOCOMO, ROOT, Server, Turn, load_turns, machine, write_results

KEY = "bench-bootstrap-key-0123456789abcdef"
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
P99_LIMIT_MS = 250.0
REACHED = 0.9  # of the target rate, for a step to count as having reached it
BATCH = 500  # memories per write while loading (the API's maximum)
RATES = "20,40,60,80,90,100,110,120,130,140,150,160,180,200,250"
QUICK_RATES = "20,40,60,80,100,120,140"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n")[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"a smoke run: 10 s steps at {QUICK_RATES} req/s, 5 s warm-up",
    )
    p.add_argument("--rates", help=f"target req/s per step, comma-separated (default {RATES})")
    p.add_argument("--step-seconds", type=int, help="seconds per step (default 30; quick 10)")
    p.add_argument(
        "--warmup-seconds",
        type=int,
        help="an unjudged first run at the lowest rate (default 15; quick 5)",
    )
    p.add_argument(
        "--workspaces",
        type=int,
        default=4,
        help="workspaces; LoCoMo's conversations are dealt among them (default 4)",
    )
    p.add_argument(
        "--max-user-rate",
        type=float,
        default=2.0,
        help="tasks/s one Locust user may be asked for; U = rate / this (default 2)",
    )
    p.add_argument(
        "--conversations", type=int, help="the first N LoCoMo conversations only (default all)"
    )
    p.add_argument("--seed", type=int, default=12, help="order of the questions")
    p.add_argument("--no-write", action="store_true", help="print the report; write nothing")
    return p


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the defaults that depend on --quick."""
    out = argparse.Namespace(**vars(args))
    if out.rates is None:
        out.rates = QUICK_RATES if out.quick else RATES
    if out.step_seconds is None:
        out.step_seconds = 10 if out.quick else 30
    if out.warmup_seconds is None:
        out.warmup_seconds = 5 if out.quick else 15
    return out


def command_of(args: argparse.Namespace) -> str:
    """The command line that repeats this run, every option spelled out."""
    return (
        f"python -m bench.load --rates {args.rates} --step-seconds {args.step_seconds} "
        f"--warmup-seconds {args.warmup_seconds} --workspaces {args.workspaces} "
        f"--max-user-rate {args.max_user_rate:g} --seed {args.seed}"
        + (f" --conversations {args.conversations}" if args.conversations else "")
    )


# --- setup --------------------------------------------------------------------------------


def turn_text(t: Turn) -> str:
    """As bench.quality_bench writes a turn: a shared image's caption is part of it."""
    return f"{t.text} [shared an image: {t.image_caption}]" if t.image_caption else t.text


async def create_workspace(server: Server, name: str) -> str:
    """`mneme workspaces create NAME --tier scale` on the service's database; its key."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env["MNEME_DATABASE_URL"] = server.database_url()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "service.cli", "workspaces", "create", name, "--tier", "scale",
        env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"mneme workspaces create {name} failed: {err.decode()}")
    return out.decode().strip()


async def seed_workspace(
    base: str, admin_key: str, stores: list[str], turns: list[Turn]
) -> tuple[str, int]:
    """Stores, speakers and every turn, as the workspace's admin; then a key for the
    load (memory:read + memory:write). Returns (load key, memories written)."""
    written = 0
    headers = {"Authorization": f"Bearer {admin_key}"}
    async with aiohttp.ClientSession(base, headers=headers) as http:

        async def post(path: str, body: dict[str, Any], status: int) -> dict[str, Any]:
            async with http.post(path, json=body) as resp:
                out: dict[str, Any] = await resp.json()
                assert resp.status == status, (path, resp.status, out)
                return out

        for store in stores:
            await post("/api/v1/forward/memory_stores", {"name": store}, 201)
            mine = [t for t in turns if t.store == store]
            for speaker in sorted({t.speaker for t in mine}):
                await post(f"/api/v1/stores/{store}/speakers", {"name": speaker}, 201)
            for first in range(0, len(mine), BATCH):
                batch = [
                    {"text": turn_text(t), "store": store, "speaker": t.speaker,
                     "eventDate": t.timestamp, "providerRef": t.dia_id}
                    for t in mine[first : first + BATCH]
                ]  # fmt: skip
                out = await post("/api/v1/memories", {"memories": batch}, 200)
                written += len(out["memories"])
        key = await post(
            "/api/v1/keys",
            {"kind": "service", "scopes": ["memory:read", "memory:write"], "name": "load"},
            201,
        )
    return str(key["key"]), written


async def wait_embedded(base: str, within_s: float = 900) -> None:
    deadline = time.monotonic() + within_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            async with http.get(f"{base}/readyz") as resp:
                if (await resp.json())["embeddingQueue"] == 0:
                    return
            await asyncio.sleep(1)
    raise TimeoutError("the worker did not embed every memory in time")


async def prepare(server: Server, args: argparse.Namespace, setup_path: Path) -> dict[str, Any]:
    """Workspaces, stores, memories and keys; the locustfile's setup file. Returns facts."""
    turns = load_turns()
    conversations = sorted({t.store for t in turns})[: args.conversations]
    questions: dict[str, list[str]] = defaultdict(list)
    with (LOCOMO / "queries.jsonl").open() as f:
        for line in f:
            q = json.loads(line)
            questions[q["store"]].append(q["question"])
    rng = random.Random(args.seed)
    started = time.perf_counter()
    workspaces: list[dict[str, Any]] = []
    written = 0
    for i in range(args.workspaces):
        stores = conversations[i :: args.workspaces]
        if not stores:
            break
        name = f"load-{i + 1}"
        admin_key = await create_workspace(server, name)
        key, n = await seed_workspace(server.base, admin_key, stores, turns)
        written += n
        asked = [(s, q) for s in stores for q in questions[s]]
        rng.shuffle(asked)
        workspaces.append({
            "name": name, "key": key, "stores": stores, "questions": asked,
            "turns": [{"store": t.store, "text": turn_text(t), "speaker": t.speaker,
                       "eventDate": t.timestamp} for t in turns if t.store in stores],
        })  # fmt: skip
    written_s = time.perf_counter() - started
    await wait_embedded(server.base)
    text = json.dumps({"base": server.base, "workspaces": workspaces})
    await asyncio.to_thread(setup_path.write_text, text)
    return {
        "workspaces": [
            {"name": w["name"], "stores": w["stores"], "questions": len(w["questions"])}
            for w in workspaces
        ],
        "memories": written,
        "questions": sum(len(w["questions"]) for w in workspaces),
        "write_s": round(written_s, 1),
        "write_and_embed_s": round(time.perf_counter() - started, 1),
    }


# --- one step -----------------------------------------------------------------------------


async def scrape(base: str) -> dict[str, float]:
    """The service's request counts per (method, route, status) and its queue depth."""
    async with aiohttp.ClientSession() as http, http.get(f"{base}/metrics") as resp:
        text = await resp.text()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "mneme_http_requests_total" and s.labels["route"] != "/metrics":
                labels = s.labels
                out[f"{labels['method']} {labels['route']} {labels['status']}"] = s.value
            elif s.name == "mneme_embedding_queue_depth":
                out["embedding_queue"] = s.value
    return out


def cpu_now(server: Server, locust_pid: int) -> dict[str, float]:
    """CPU seconds used so far: the service, its PostgreSQL, this runner and Locust."""
    import psutil

    cpu = server.cpu_seconds()
    cpu["runner"] = cpu.pop("client")
    try:
        t = psutil.Process(locust_pid).cpu_times()
        cpu["locust"] = float(t.user + t.system)
    except psutil.Error:  # it has exited already
        cpu["locust"] = float("nan")
    # Everything the machine's cores did, whoever for (another job on them shows here).
    t = psutil.cpu_times()
    cpu["machine"] = float(t.user + t.nice + t.system + t.irq + t.softirq + t.steal)
    return cpu


def read_stats(prefix: Path) -> dict[str, dict[str, Any]]:
    """Locust's summary CSV: one entry per endpoint ("METHOD path") and "aggregated"."""
    out: dict[str, dict[str, Any]] = {}
    with Path(f"{prefix}_stats.csv").open() as f:
        for row in csv.DictReader(f):
            n = int(row["Request Count"])
            name = "aggregated" if row["Name"] == "Aggregated" else f"{row['Type']} {row['Name']}"

            def ms(column: str, row: dict[str, str] = row) -> float | None:
                return None if row[column] in ("N/A", "") else float(row[column])

            out[name] = {
                "requests": n,
                "failures": int(row["Failure Count"]),
                "rps": round(float(row["Requests/s"]), 2),
                "p50_ms": ms("50%"),
                "p95_ms": ms("95%"),
                "p99_ms": ms("99%"),
                "mean_ms": round(float(row["Average Response Time"]), 1),
                "max_ms": ms("Max Response Time"),
            }
    return out


def read_failures(prefix: Path) -> list[dict[str, Any]]:
    path = Path(f"{prefix}_failures.csv")
    if not path.exists():
        return []
    with path.open() as f:
        return [
            {"request": f"{r['Method']} {r['Name']}", "error": r["Error"][:300],
             "occurrences": int(r["Occurrences"])}
            for r in csv.DictReader(f)
        ]  # fmt: skip


async def step(
    server: Server,
    rate: float,
    seconds: int,
    args: argparse.Namespace,
    setup: Path,
    state: Path,
    prefix: Path,
) -> dict[str, Any]:
    """One Locust run at a target rate: its figures, CPU by process, and verdict.

    CPU is sampled over the window Locust's statistics cover: from its "Resetting stats"
    (every user started) to its run time's end (counted from "Ramping to"), less 0.5 s
    so that Locust is still there to be sampled."""
    users = max(2 * args.workspaces, math.ceil(rate / args.max_user_rate))
    env = {**os.environ, "MNEME_LOAD_SETUP": str(setup), "MNEME_LOAD_STATE": str(state),
           "MNEME_LOAD_USER_RATE": repr(rate / users)}  # fmt: skip
    before = await scrape(server.base)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
        "--host", server.base, "-u", str(users), "-r", str(users), "-t", f"{seconds}s",
        "--reset-stats", "--only-summary", "--csv", str(prefix), "--loglevel", "INFO",
        env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    output: list[str] = []
    seen: dict[str, float] = {}

    async def read(stream: asyncio.StreamReader) -> None:
        async for raw in stream:
            line = raw.decode(errors="replace")
            output.append(line)
            for marker in ("Ramping to", "Resetting stats"):
                if marker in line and marker not in seen:
                    seen[marker] = time.perf_counter()

    reader = asyncio.create_task(read(proc.stdout))
    try:
        deadline = time.perf_counter() + 60
        while "Resetting stats" not in seen and time.perf_counter() < deadline:
            if reader.done():
                break
            await asyncio.sleep(0.02)
        if "Resetting stats" not in seen or "Ramping to" not in seen:
            raise RuntimeError("locust did not start its users:\n" + "".join(output)[-3000:])
        window_start, cpu_start = time.perf_counter(), cpu_now(server, proc.pid)
        await asyncio.sleep(max(0.0, seen["Ramping to"] + seconds - 0.5 - time.perf_counter()))
        window_end, cpu_end = time.perf_counter(), cpu_now(server, proc.pid)
        await asyncio.wait_for(proc.wait(), timeout=120)
        await reader
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    after = await scrape(server.base)
    try:
        stats = read_stats(prefix)
    except FileNotFoundError:
        raise RuntimeError("locust wrote no statistics:\n" + "".join(output)[-3000:]) from None
    total = stats.pop("aggregated")
    window = window_end - window_start
    cpu = {k: round(cpu_end[k] - cpu_start[k], 2) for k in cpu_start}
    statuses = {
        k: int(v - before.get(k, 0))
        for k, v in sorted(after.items())
        if k != "embedding_queue" and v - before.get(k, 0) > 0
    }
    reasons = []
    if total["rps"] < REACHED * rate:
        reasons.append(f"reached {total['rps']} of {rate:g} req/s")
    if total["failures"]:
        reasons.append(f"{total['failures']} failures")
    if total["p99_ms"] is None or total["p99_ms"] >= P99_LIMIT_MS:
        reasons.append(f"p99 {total['p99_ms']} ms")
    return {
        "target_rps": rate,
        "users": users,
        "seconds": seconds,
        "achieved_rps": total["rps"],
        "aggregated": total,
        "endpoints": stats,
        "failures": read_failures(prefix),
        "server_statuses": statuses,
        "server_5xx": sum(n for k, n in statuses.items() if k.rsplit(" ", 1)[1].startswith("5")),
        "embedding_queue_after": int(after.get("embedding_queue", 0)),
        "cpu_window_s": round(window, 2),
        "cpu_s": cpu,
        "cores_busy": {k: round(v / window, 2) for k, v in cpu.items()}
        | {"total": round(sum(v for k, v in cpu.items() if k != "machine") / window, 2)},
        "passed": not reasons,
        "why_not": reasons,
    }


def brief(s: dict[str, Any]) -> str:
    a = s["aggregated"]
    verdict = "ok" if s["passed"] else "; ".join(s["why_not"])
    return (
        f"target {s['target_rps']:g} req/s, {s['users']} users: {s['achieved_rps']} req/s, "
        f"{a['failures']} failures, p50/p95/p99 {a['p50_ms']}/{a['p95_ms']}/{a['p99_ms']} ms, "
        f"{s['cores_busy']['total']} cores busy: {verdict}"
    )


# --- the run ------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole load test; writes results/load.json and load.md unless ``no_write``.

    ``args`` as ``build_parser()`` makes them (``build_parser().parse_args([...])``)."""
    try:
        # From the metadata: importing locust here would monkey-patch this process.
        locust_version = importlib.metadata.version("locust")
    except importlib.metadata.PackageNotFoundError:
        raise SystemExit("bench.load needs Locust: pip install -e '.[bench]'") from None
    args = resolve(args)
    rates = [float(r) for r in str(args.rates).split(",") if r.strip()]
    results: dict[str, Any] = {
        "machine": machine(),
        "command": command_of(args),
        "args": vars(args),
        "locust": locust_version,
        "criterion": {"p99_ms_below": P99_LIMIT_MS, "failures": 0, "reached_at_least": REACHED},
    }
    with tempfile.TemporaryDirectory(prefix="mneme-load-") as tmp:
        tmp_path = Path(tmp)
        log = tmp_path / "service.log"
        server = Server(tmp_path / "data", KEY, log=log)
        try:
            await server.ready()
            setup, state = tmp_path / "setup.json", tmp_path / "state.json"
            results["setup"] = await prepare(server, args, setup)
            args.workspaces = len(results["setup"]["workspaces"])
            print(f"setup: {results['setup']}", flush=True)
            if args.warmup_seconds > 0:
                warm = await step(server, rates[0], args.warmup_seconds, args, setup, state,
                                  tmp_path / "warmup")  # fmt: skip
                results["warmup"] = warm
                print(f"warm-up: {brief(warm)}", flush=True)
            results["steps"] = []
            for i, rate in enumerate(rates):
                s = await step(
                    server, rate, args.step_seconds, args, setup, state, tmp_path / f"step{i}"
                )
                results["steps"].append(s)
                print(brief(s), flush=True)
                if not s["passed"]:
                    break
        finally:
            server.stop()
        results["service_errors"] = [
            line[:500]
            for line in log.read_text(errors="replace").splitlines()
            if line.startswith("{") and json.loads(line).get("level") in ("error", "critical")
        ][:50]
    passed = [s for s in results["steps"] if s["passed"]]
    best = max(passed, key=lambda s: s["achieved_rps"]) if passed else None
    last = results["steps"][-1]
    results["stopped"] = (
        "every step passed"
        if last["passed"]
        else f"at {last['target_rps']:g} req/s: " + "; ".join(last["why_not"])
    )
    results["sustained"] = None if best is None else {
        "target_rps": best["target_rps"], "achieved_rps": best["achieved_rps"],
        "users": best["users"], "aggregated": best["aggregated"], "endpoints": best["endpoints"],
    }  # fmt: skip
    if args.no_write:
        print(render(results))
    else:
        path = write_results("load", results)
        (path.parent / "load.md").write_text(render(results))
        print(f"wrote {path} and load.md", flush=True)
    return results


def render(results: dict[str, Any]) -> str:
    """The committed summary, made from the JSON of the same run."""
    m, setup, best = results["machine"], results["setup"], results["sustained"]
    lines = [
        "# Load test",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}, "
        f"torch {m['torch']} ({m['torch_threads']} threads), CPU only; Locust "
        f"{results['locust']}. Run {m['date']}.",
        "Locust, `mneme serve` (its worker on), and embedded PostgreSQL share these cores: "
        "the load generator's CPU is taken from the service's.",
        "",
        f"Command: `.venv/bin/python -m {results['command'].removeprefix('python -m ')}`",
        "",
        f"{len(setup['workspaces'])} workspaces (tier scale, each its own key), one store per "
        f"LoCoMo conversation ({sum(len(w['stores']) for w in setup['workspaces'])} stores), "
        f"{setup['memories']} memories written and embedded before the load "
        f"({setup['write_and_embed_s']} s); {setup['questions']} questions.",
        "Mix by task weight: 70 % `POST /api/v1/memory/search` (a question of the store, "
        "`max_results` 10), 20 % `GET /api/v1/memories?store=…&limit=20`, 5 % "
        "`GET /api/v1/forward/memory_stores`, 5 % `POST /api/v1/memories` (a turn of the "
        "store, as a new memory).",
        "",
    ]
    if best is None:
        lines.append(
            f"**No step passed** (p99 < {P99_LIMIT_MS:g} ms, no failures, target reached)."
        )
    else:
        a = best["aggregated"]
        lines.append(
            f"**Highest sustained rate: {best['achieved_rps']} req/s** (target "
            f"{best['target_rps']:g}, {best['users']} users): aggregated p50/p95/p99 "
            f"{a['p50_ms']:g}/{a['p95_ms']:g}/{a['p99_ms']:g} ms, no failures."
        )
    lines += [
        "",
        "## Steps",
        "",
        "| target req/s | users | achieved req/s | failures | p50 ms | p95 ms | p99 ms "
        "| cores busy (service / PostgreSQL / Locust) | machine's cores busy | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in results["steps"]:
        a, c = s["aggregated"], s["cores_busy"]
        busy = (
            f"{c['total']} ({c['service_loop'] + c['service_model']:.2f} / {c['postgres']} / "
            f"{c['locust']})"
        )
        verdict = "pass" if s["passed"] else "; ".join(s["why_not"])
        lines.append(
            f"| {s['target_rps']:g} | {s['users']} | {s['achieved_rps']} | {a['failures']} | "
            f"{a['p50_ms']:g} | {a['p95_ms']:g} | {a['p99_ms']:g} | {busy} | {c['machine']} | "
            f"{verdict} |"
        )
    if best is not None:
        lines += [
            "",
            f"## Per endpoint at {best['achieved_rps']} req/s",
            "",
            "| request | n | req/s | p50 ms | p95 ms | p99 ms |",
            "|---|---|---|---|---|---|",
        ]
        for name, e in sorted(best["endpoints"].items(), key=lambda kv: -kv[1]["requests"]):
            lines.append(
                f"| `{name}` | {e['requests']} | {e['rps']} | {e['p50_ms']:g} | "
                f"{e['p95_ms']:g} | {e['p99_ms']:g} |"
            )
    lines += [
        "",
        f"Stopped {results['stopped']}.",
        "",
        "Latency is Locust's, client-side, from its summary CSV (its percentiles are "
        "rounded: to 10 ms above 100 ms, to 100 ms above 1 s). Each step is its own Locust "
        "run; statistics start once every user is started. A pass: at least "
        f"{REACHED:.0%} of the target rate, no failure (any non-2xx or connection error), "
        f"aggregated p99 under {P99_LIMIT_MS:g} ms. Cores busy: CPU seconds of the "
        "service (event loop, model and worker threads), of PostgreSQL and of Locust "
        "(and this runner, in the total), over the window the statistics cover; the "
        "machine's: all its cores' non-idle time over that window, whatever ran.",
    ]
    errors = results["service_errors"]
    if errors or any(s["server_5xx"] for s in results["steps"]):
        n_5xx = sum(s["server_5xx"] for s in results["steps"])
        lines += ["", f"The service logged {len(errors)} error line(s) and answered {n_5xx} "
                      "5xx: see load.json."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(run(build_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
