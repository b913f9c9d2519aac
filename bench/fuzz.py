"""Schemathesis against a real `mneme serve`: every operation of /openapi.json, fuzzed.

Starts the service on embedded PostgreSQL in a temporary directory, seeds a little of
everything (memories, an image, a path memory, a store, a room, a throwaway key) so the
generated requests reach real objects as well as missing ones, then runs Schemathesis
with every check (tests/schemathesis.toml says which operations skip which check, and
why) and reads its JSON report.

    python -m bench.fuzz                      # 200 cases per operation, a random seed
    python -m bench.fuzz --examples 30 --seed 1 --write   # what CI runs, written to results/

tests/test_fuzz.py runs ``fuzz(examples=30, seed=1)`` in CI and fails on any failure.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import ROOT, Server, machine

KEY = "fuzz-harness-key-0123456789abcdef"
CONFIG = ROOT / "tests" / "schemathesis.toml"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(24)).decode()


@dataclass
class Outcome:
    seed: int
    examples: int
    generated: int
    failures: list[dict[str, Any]]
    errors: list[Any]
    exit_code: int
    seconds: float
    operations: int
    report: dict[str, Any]
    service_errors: list[str]  # error-level lines the service logged meanwhile
    output: str  # what Schemathesis printed: each failure with a curl to reproduce it

    @property
    def ok(self) -> bool:
        return (
            self.exit_code == 0
            and not self.failures
            and not self.errors
            and not self.service_errors
        )


async def seed_data(base: str) -> dict[str, list[str]]:
    """Objects for generated requests to find; their ids, by path parameter name."""
    headers = {"Authorization": f"Bearer {KEY}"}
    ids: dict[str, list[str]] = {}

    async with aiohttp.ClientSession(base, headers=headers) as http:

        async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            async with http.post(path, json=body) as resp:
                assert resp.status in (200, 201), (path, resp.status, await resp.text())
                out: dict[str, Any] = await resp.json()
                return out

        store = await post("/api/v1/forward/memory_stores", {"name": "fuzz"})
        memories = [
            await post("/api/v1/memories", {"text": "Alice drinks oat milk.", "speaker": "me"}),
            await post("/api/v1/memories", {"text": "A lake", "image": {"data": PNG,
                                                                        "mimeType": "image/png"}}),
            await post("/api/v1/memories", {"text": "In the fuzz store", "store": store["id"]}),
        ]  # fmt: skip
        path_memory = await post(
            f"/api/v1/forward/memory_stores/{store['id']}/memories",
            {"path": "notes/a.md", "content": "a note"},
        )
        await post("/api/v1/members", {"id": "m1", "kind": "human"})
        await post("/api/v1/rooms", {"id": "r1", "members": ["m1"]})
        await post(f"/api/v1/stores/{store['id']}/speakers", {"name": "Caroline"})
        # A public address nothing answers at here: its deliveries wait, retried.
        hook = await post("/api/v1/webhooks", {"url": "http://93.184.216.34/fuzz",
                                               "events": ["memory.created"]})  # fmt: skip
        await post("/api/v1/memories", {"text": "Told to the webhook."})
        async with http.get(f"/api/v1/webhooks/{hook['id']}/deliveries") as resp:
            events = [d["event"] for d in (await resp.json())["data"]]
        throwaway = await post("/api/v1/keys", {"kind": "service", "scopes": ["memory:read"]})
        async with http.get("/api/v1/keys") as resp:
            harness = next(
                k["id"] for k in (await resp.json())["data"] if k["id"] != throwaway["id"]
            )
    ids["memory_id"] = [m["id"] for m in memories] + [path_memory["id"]]
    ids["store_id"] = [store["id"], "default"]
    ids["store"] = [store["id"], "default"]
    ids["name"] = ["Caroline"]
    ids["room_id"] = ["r1"]
    ids["key_id"] = [throwaway["id"]]
    ids["webhook_id"] = [hook["id"]]
    ids["event_id"] = events
    ids["_harness_key_id"] = [harness]
    return ids


def fuzz(*, examples: int, seed: int, workers: int = 2) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="mneme-fuzz-") as tmp:
        log = Path(tmp) / "service.log"
        # Schemathesis registers OAuth clients by the thousand from one address: the
        # per-address limit (a 429 it would count as undocumented) is lifted here.
        server = Server(
            Path(tmp) / "data",
            KEY,
            log=log,
            MNEME_WORKER="off",
            MNEME_OAUTH_REGISTRATIONS_PER_HOUR="1000000000",
        )
        try:
            asyncio.run(server.ready())
            ids = asyncio.run(seed_data(server.base))
            report_path = Path(tmp) / "report.json"
            env = {
                **os.environ,
                "MNEME_FUZZ_KEY_ID": ids.pop("_harness_key_id")[0],
                "MNEME_FUZZ_IDS": json.dumps(ids),
                "PYTHONPATH": str(ROOT),
            }
            started = time.monotonic()
            done = subprocess.run(
                [
                    sys.executable, "-m", "bench.schemathesis_cli", "--config-file", str(CONFIG),
                    "run", f"{server.base}/openapi.json",
                    "-H", f"Authorization: Bearer {KEY}",
                    "--max-examples", str(examples), "--seed", str(seed),
                    "--workers", str(workers), "--no-color",
                    "--report", "json", "--report-json-path", str(report_path),
                ],
                env=env, cwd=ROOT, capture_output=True, text=True, check=False,
            )  # fmt: skip
            seconds = time.monotonic() - started
            if not report_path.exists():
                raise RuntimeError(f"schemathesis wrote no report:\n{done.stdout}\n{done.stderr}")
            report: dict[str, Any] = json.loads(report_path.read_text())
        finally:
            server.stop()
        service_errors = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if line.startswith("{") and json.loads(line).get("level") in ("error", "critical")
        ]
    return Outcome(
        seed=seed,
        examples=examples,
        generated=report["test_cases"]["generated"],
        failures=report["failures"],
        errors=report["errors"],
        exit_code=done.returncode,
        seconds=round(seconds, 1),
        operations=report["operations"]["tested"],
        report=report,
        service_errors=service_errors,
        output=done.stdout + done.stderr,
    )


def write(outcome: Outcome) -> None:
    from bench.common import RESULTS

    facts = machine()
    summary = {
        "machine": facts,
        "seed": outcome.seed,
        "max_examples_per_operation": outcome.examples,
        "operations_tested": outcome.operations,
        "test_cases_generated": outcome.generated,
        "failures": len(outcome.failures),
        "errors": len(outcome.errors),
        "service_error_lines": len(outcome.service_errors),
        "seconds": outcome.seconds,
        "schemathesis": outcome.report["schemathesis_version"],
        "phases": outcome.report["phases"],
        "warnings": {k: v for k, v in outcome.report["warnings"].items() if v},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "fuzz.json").write_text(json.dumps(summary, indent=2) + "\n")
    lines = [
        "# Fuzzing the API with Schemathesis",
        "",
        f"`python -m bench.fuzz --examples {outcome.examples} --seed {outcome.seed} --write`, "
        f"on {facts['cpu']} ({facts['cores']} cores), {facts['date']}, "
        f"Schemathesis {summary['schemathesis']}.",
        "",
        "| | |",
        "|---|---|",
        f"| operations tested | {outcome.operations} (all of /openapi.json) |",
        f"| test cases generated | {outcome.generated} |",
        f"| failures (any check) | {len(outcome.failures)} |",
        f"| errors | {len(outcome.errors)} |",
        f"| error lines in the service log | {len(outcome.service_errors)} |",
        f"| time | {outcome.seconds} s |",
        "",
        "Checks: every Schemathesis check (no 5xx; status codes, content types, headers and",
        "bodies as documented; schema-valid requests accepted and schema-violating ones",
        "refused; auth enforced), with the exceptions in `tests/schemathesis.toml`: rules",
        "JSON Schema cannot state, where only the acceptance of schema-valid data is not",
        "checked. Phases: coverage, fuzzing and stateful (links inferred from responses).",
    ]
    if summary["warnings"]:
        lines += ["", "Warnings Schemathesis raised (not failures):", ""]
        lines += [
            f"- {name}: {', '.join(map(str, ops))}" for name, ops in summary["warnings"].items()
        ]
    (RESULTS / "fuzz.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=200, help="cases per operation")
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--write", action="store_true", help="write results/fuzz.{md,json}")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    outcome = fuzz(examples=args.examples, seed=seed)
    print(
        f"seed {seed}: {outcome.generated} cases over {outcome.operations} operations, "
        f"{len(outcome.failures)} failures, {len(outcome.errors)} errors, "
        f"{len(outcome.service_errors)} service error lines, {outcome.seconds} s"
    )
    if not outcome.ok:
        print(outcome.output[outcome.output.find("FAILURES") - 40 :][:20000])
    for line in outcome.service_errors[:5]:
        print(line[:400])
    if args.write:
        write(outcome)
    sys.exit(0 if outcome.ok else 1)


if __name__ == "__main__":
    main()
