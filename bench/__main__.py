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
import shutil
import subprocess
import sys
import time
from typing import Any

from bench.common import RESULTS, ROOT, checkout, machine

STEPS = {
    "mem0": ["-m", "bench.mem0_bench"],
    "write": ["-m", "bench.write_bench"],
    # The levels the search benchmark had when issue 12 was filed (BASELINE).
    "search": ["-m", "bench.search_bench", "--levels", "100000,1000000"],
    "load": ["-m", "bench.load"],
}
QUICK = {
    "mem0": ["--stores", "conv-30"],
    "write": ["--singles", "300", "--total", "1300", "--lag-seconds", "5"],
    "search": ["--levels", "100000", "--queries", "50", "--seconds", "5"],
    "load": ["--quick"],
}
# The search benchmark's last run before issue 12's work (its CPU-per-search and 16-client
# figures are the "today"), read from the repository's history.
BASELINE = "b0a2ff3"
RESULT_OF = {"mem0": "mem0", "write": "write", "search": "search", "load": "load"}


def run_step(name: str, quick: bool) -> float:
    started = time.monotonic()
    command = [sys.executable, *STEPS[name], *(QUICK[name] if quick else [])]
    print(f"== {name}: {' '.join(command[1:])}", flush=True)
    subprocess.run(command, cwd=ROOT, check=True)
    return time.monotonic() - started


def run_baseline(quick: bool) -> float:
    """BASELINE's own search benchmark at the search step's levels, on this machine, in this run
    (a checkout in a temporary git worktree, the same virtualenv): results/
    search-baseline.json, so the search figures' "x" columns compare like with like."""
    started = time.monotonic()
    with checkout(BASELINE) as tree:
        # At the search step's own levels: every ratio compares like with like, on any
        # machine (the committed figures come from one kind of CPU).
        command = [sys.executable, *STEPS["search"], *(QUICK["search"] if quick else [])]
        print(f"== baseline ({BASELINE}): {' '.join(command[1:])}", flush=True)
        subprocess.run(command, cwd=tree, check=True)
        shutil.copy(tree / "bench/results/search.json", RESULTS / "search-baseline.json")
    return time.monotonic() - started


def baseline_search() -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """BASELINE's search figures: (measured in this run with ``--baseline``, as committed at
    BASELINE on another machine); either may be missing."""
    same_run = RESULTS / "search-baseline.json"
    here = json.loads(same_run.read_text()) if same_run.exists() else None
    shown = subprocess.run(
        ["git", "show", f"{BASELINE}:bench/results/search.json"], cwd=ROOT,
        capture_output=True, text=True,
    )  # fmt: skip
    committed = json.loads(shown.stdout) if shown.returncode == 0 else None
    return here, committed


def load(name: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text())
    return result


def _ran_at(name: str) -> str:
    return f"_Run {load(name)['machine']['date']}._"


def report(ran: dict[str, float], quick: bool) -> str:
    """Every step's latest results; the steps of this run and their times in the header,
    and each section's own date (a step not run here keeps its last run's figures)."""
    present = {n for n in STEPS if (RESULTS / f"{n}.json").exists()}
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
        + (", ".join(f"{n} ({s / 60:.1f} min)" for n, s in ran.items()) or "none (a report only)")
        + "."
        + (
            f" Sections of steps not run here ({', '.join(sorted(present - set(ran)))}) show "
            "their last run's figures, dated."
            if present - set(ran)
            else ""
        ),
        "",
    ]
    if "mem0" in present:
        r = load("mem0")
        z, n, ratio = r["mem0"], r["mneme"], r["ratios"]
        lines += [
            "## Against mem0 2.2.1 (bench.mem0_bench: same data, weights, machine, PostgreSQL)",
            "",
            _ran_at("mem0"),
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
    if "write" in present:
        w = load("write")["writes"]
        lines += [
            "## Writes (bench.write_bench, HTTP, worker off)",
            "",
            _ran_at("write"),
            "",
            f"Batch of 100: **{w['batch_per_memory_ms']} ms per memory** (target ≤ 0.5); "
            f"batch p50 {w['batch_of_100_write']['p50_ms']} ms; single write p50 "
            f"{w['single_write']['p50_ms']} ms.",
            "",
        ]
    if "search" in present:
        s = load("search")
        lines += ["## Search (bench.search_bench)", "", _ran_at("search"), ""]
        here, committed = baseline_search()
        for level, figures in s["levels"].items():
            # This machine's baseline where it ran at this level, else the committed one
            # (marked: another machine).
            then, mark = (here or {}).get("levels", {}).get(level), ""
            if then is None:
                then, mark = (committed or {}).get("levels", {}).get(level), " †"
            lines += [
                f"### {int(level):,} memories",
                "",
                "| store | p50 ms | floor p50 ms | search / floor | 16 clients: searches/s "
                f"(/ {BASELINE}'s) | CPU ms per search (/ {BASELINE}'s; target ≤ 0.5) |",
                "|---|---|---|---|---|---|",
            ]
            for label, key in (("1,000 memories", "small"), (f"{figures['big_store']:,}", "big")):
                f = figures[key]
                t = f["throughput"]
                qps, cpu = t["searches_per_s"], t["cpu_ms_per_search"]["total"]
                if then is not None:
                    old = then[key]["throughput"]
                    qps_vs = f" ({qps / old['searches_per_s']:.2f}x{mark})"
                    cpu_vs = f" ({cpu / old['cpu_ms_per_search']['total']:.2f}x{mark})"
                else:
                    qps_vs = cpu_vs = ""
                lines.append(
                    f"| {label} | {f['search']['p50_ms']} | {f['floor_p50_ms']} "
                    f"| {f['ratio_p50_search_over_floor']} | {qps}{qps_vs} | {cpu}{cpu_vs} |"
                )
            lines.append("")
        if here is not None:
            lines += [
                f"{BASELINE}'s figures: its own search benchmark, run beside this one on this "
                f"machine (`--baseline`, levels {', '.join(here['levels'])}).",
                "",
            ]
        if committed is not None:
            b = committed["machine"]
            lines += [
                f"†: {BASELINE}'s figures as committed, from {b['cpu']}, {b['cores']} cores "
                f"({b['date'][:10]}): a ratio across two machines is a guide, not a same-run "
                "measurement.",
                "",
            ]
    if "load" in present:
        r = load("load")
        top = r["sustained"]
        lines += ["## Load (bench.load, Locust, headless)", "", _ran_at("load"), ""]
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
    parser.add_argument(
        "--baseline", action="store_true",
        help=f"also run {BASELINE}'s search benchmark here, for same-machine ratios",
    )  # fmt: skip
    args = parser.parse_args()
    skipped = {s for s in args.skip.split(",") if s}
    unknown = skipped - set(STEPS)
    if unknown:
        parser.error(f"unknown steps: {', '.join(sorted(unknown))}")
    if "search" not in skipped:  # the baseline pairs with the search run it ran beside
        (RESULTS / "search-baseline.json").unlink(missing_ok=True)
    ran = {name: run_step(name, args.quick) for name in STEPS if name not in skipped}
    if args.baseline and "search" in ran:
        ran["baseline"] = run_baseline(args.quick)
    text = report(ran, args.quick)
    path = RESULTS / f"report-{time.strftime('%Y-%m-%d', time.gmtime())}.md"
    path.write_text(text)
    print(text)
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
