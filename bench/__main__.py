"""``python -m bench``: the speed figures of issue 12 in one run, one dated report.

Runs, one after the other (each uses both cores): the side-by-side against mem0
(``bench.mem0_bench``), the write path (``bench.write_bench``), search at a 200k-memory
level with stores of 1,000 beside it (``bench.search_bench``), and the Locust load test
(``bench.load``). Each writes its own ``results/NAME.json`` and ``.md``; this then writes
``results/report-YYYY-MM-DD.md`` from those JSON files alone, with the machine they ran
on and every ratio as measured in its run. Nothing in the report is typed by hand.

    .venv/bin/pip install -e '.[dev,bench]'
    .venv/bin/python -m bench [--skip load,search] [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from bench.common import RESULTS, ROOT, machine

STEPS = {
    "mem0": ["-m", "bench.mem0_bench"],
    "write": ["-m", "bench.write_bench"],
    "search": ["-m", "bench.search_bench", "--levels", "200000"],
    "load": ["-m", "bench.load"],
}
QUICK = {
    "mem0": ["--stores", "conv-30"],
    "write": ["--singles", "300", "--total", "1300", "--lag-seconds", "5"],
    "search": ["--queries", "50", "--seconds", "5"],
    "load": ["--quick"],
}
RESULT_OF = {"mem0": "mem0", "write": "write", "search": "search", "load": "load"}


def run_step(name: str, quick: bool) -> float:
    started = time.monotonic()
    command = [sys.executable, *STEPS[name], *(QUICK[name] if quick else [])]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    subprocess.run(command, cwd=ROOT, check=True)
    return time.monotonic() - started


def load(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return result


def report(ran: dict[str, float], quick: bool) -> str:
    m = machine()
    lines = [
        f"# Speed report, {m['date'][:10]}",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python "
        f"{m['python']}, torch {m['torch']}. Every process (benchmark client, `mneme serve`, "
        "PostgreSQL, mem0, Locust) shares these cores; compare ratios, which each come from "
        "one run.",
        "",
        "Command: `.venv/bin/python -m bench"
        + (" --quick`" if quick else "`")
        + "; steps "
        + ", ".join(f"{n} ({s / 60:.1f} min)" for n, s in ran.items())
        + ".",
        "",
    ]
    if "mem0" in ran:
        r = load("mem0")
        z, n, ratio = r["mem0"], r["mneme"], r["ratios"]
        lines += [
            "## Against mem0 2.2.1 (bench.mem0_bench: same data, weights, machine, PostgreSQL)",
            "",
            f"LoCoMo {', '.join(r['stores'])}: {r['turns']} turns, {r['questions']} questions "
            "(categories 1-4), the two sides interleaved per operation.",
            "",
            "| figure | Mneme | mem0 | ratio | target |",
            "|---|---|---|---|---|",
            f"| search p50 ms | {n['search']['p50_ms']} | {z['search']['p50_ms']} "
            f"| {ratio['search_p50']} | ≤ 0.5 |",
            f"| search p95 ms | {n['search']['p95_ms']} | {z['search']['p95_ms']} "
            f"| {ratio['search_p95']} | ≤ 0.5 |",
            f"| write acknowledged p50 ms | {n['write']['p50_ms']} | {z['write']['p50_ms']} "
            f"| {ratio['write_p50']} | ≤ 0.2 |",
            f"| recall@10 | {n['recall_at_10']} | {z['recall_at_10']} | | above mem0 |",
            "",
        ]
    if "write" in ran:
        w = load("write")["writes"]
        lines += [
            "## Writes (bench.write_bench, HTTP, worker off)",
            "",
            f"Batch of 100: **{w['batch_per_memory_ms']} ms per memory** (target ≤ 0.5); "
            f"batch p50 {w['batch_of_100_write']['p50_ms']} ms; single write p50 "
            f"{w['single_write']['p50_ms']} ms.",
            "",
        ]
    if "search" in ran:
        s = load("search")
        for level, figures in s["levels"].items():
            lines += [
                f"## Search at {int(level):,} memories (bench.search_bench)",
                "",
                "| store | p50 ms | floor p50 ms | search / floor | 16 clients: searches/s "
                "| CPU ms per search |",
                "|---|---|---|---|---|---|",
            ]
            for label, key in (("1,000 memories", "small"), (f"{figures['big_store']:,}", "big")):
                f = figures[key]
                cpu = f["throughput"]["cpu_ms_per_search"]
                lines.append(
                    f"| {label} | {f['search']['p50_ms']} | {f['floor_p50_ms']} "
                    f"| {f['ratio_p50_search_over_floor']} "
                    f"| {f['throughput']['searches_per_s']} | {cpu.get('total', cpu)} |"
                )
            lines.append("")
    if "load" in ran:
        r = load("load")
        top = r["sustained"]
        lines += ["## Load (bench.load, Locust, headless)", ""]
        if top is None:
            lines += ["No step passed (p99 < 250 ms, no errors).", ""]
        else:
            lines += [
                f"Highest sustained rate with p99 < 250 ms and no errors: "
                f"**{top['achieved_rps']} requests/s** (target {top['target_rps']}).",
                "",
                "| endpoint | requests/s | p50 ms | p95 ms | p99 ms |",
                "|---|---|---|---|---|",
            ]
            for name, e in top["endpoints"].items():
                lines.append(
                    f"| {name} | {e['rps']} | {e['p50_ms']} | {e['p95_ms']} | {e['p99_ms']} |"
                )
            lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip", default="", help="steps to leave out: " + ",".join(STEPS))
    parser.add_argument("--quick", action="store_true", help="short runs (a smoke test)")
    args = parser.parse_args()
    skipped = {s for s in args.skip.split(",") if s}
    unknown = skipped - set(STEPS)
    if unknown:
        parser.error(f"unknown steps: {', '.join(sorted(unknown))}")
    ran = {name: run_step(name, args.quick) for name in STEPS if name not in skipped}
    text = report(ran, args.quick)
    path = RESULTS / f"report-{time.strftime('%Y-%m-%d', time.gmtime())}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
