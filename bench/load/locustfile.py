"""Locust users for ``python -m bench.load``: agents of several workspaces on one Mneme.

Each user is an agent of one workspace, with that workspace's API key, and does, by
task weight: 70 % searches (a LoCoMo question of one of the workspace's stores), 20 %
browse windows of one store, 5 % Memory Store lists, 5 % writes (a LoCoMo turn of one of
the stores, as a new memory). Any non-2xx answer is a failure. Requests are named by
endpoint, so Locust's statistics are per endpoint, not per URL.

This file does no setup. ``python -m bench.load`` writes the workspaces, keys, stores,
questions and turns to a JSON file and names it in ``MNEME_LOAD_SETUP``; the pace of
each user (tasks per second) is in ``MNEME_LOAD_USER_RATE``.

Searches ask questions the service has not just seen: its query-vector cache (an LRU
of 1,024 texts) would answer a repeat without the model. Each workspace asks its
questions in one shuffled order, continued from one Locust run to the next through the
file named in ``MNEME_LOAD_STATE``, and users are spread over the workspaces in
proportion to their questions, so a question comes back only after about every other
question of the run (all of LoCoMo's: 1,557) has been asked.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from locust import FastHttpUser, events, task
from locust.user.wait_time import constant_throughput

SETUP_ENV = "MNEME_LOAD_SETUP"
RATE_ENV = "MNEME_LOAD_USER_RATE"
STATE_ENV = "MNEME_LOAD_STATE"

SEARCH = "/api/v1/memory/search"
BROWSE = "/api/v1/memories"
STORES = "/api/v1/forward/memory_stores"
WRITE = "/api/v1/memories"


@dataclass
class Workspace:
    name: str
    key: str
    stores: list[str]
    questions: list[tuple[str, str]]  # (store, question), in the order they are asked
    turns: list[dict[str, str]]  # store, text, speaker, eventDate
    asked: int = 0
    # Smooth weighted round robin (users in proportion to questions): running credit.
    credit: float = 0.0

    def next_question(self) -> tuple[str, str]:
        store, question = self.questions[self.asked % len(self.questions)]
        self.asked += 1
        return store, question


@dataclass
class Plan:
    workspaces: list[Workspace]
    user_rate: float
    state: Path | None
    users: int = field(default=0)

    def assign(self) -> Workspace:
        """The next user's workspace: any first n users are spread in proportion to the
        workspaces' questions, as closely as n allows."""
        total = sum(len(w.questions) for w in self.workspaces)
        for w in self.workspaces:
            w.credit += len(w.questions)
        chosen = max(self.workspaces, key=lambda w: w.credit)
        chosen.credit -= total
        self.users += 1
        return chosen


_plan: Plan | None = None


def plan() -> Plan:
    """The setup written by ``python -m bench.load``, read once per Locust process."""
    global _plan
    if _plan is None:
        setup = json.loads(Path(os.environ[SETUP_ENV]).read_text())
        state_path = Path(os.environ[STATE_ENV]) if os.environ.get(STATE_ENV) else None
        asked: dict[str, int] = {}
        if state_path is not None and state_path.exists():
            asked = json.loads(state_path.read_text())
        workspaces = [
            Workspace(w["name"], w["key"], w["stores"], [(s, q) for s, q in w["questions"]],
                      w["turns"], asked.get(w["name"], 0))
            for w in setup["workspaces"]
        ]  # fmt: skip
        _plan = Plan(workspaces, float(os.environ[RATE_ENV]), state_path)
    return _plan


def save_state(**_: Any) -> None:
    """Where each workspace's questions stopped, for the next run to go on from."""
    if _plan is not None and _plan.state is not None:
        _plan.state.write_text(json.dumps({w.name: w.asked for w in _plan.workspaces}))


events.test_stop.add_listener(save_state)  # type: ignore[no-untyped-call]


class Agent(FastHttpUser):
    workspace: Workspace
    headers: dict[str, str]

    def on_start(self) -> None:
        p = plan()
        self.workspace = p.assign()
        self.headers = {"Authorization": f"Bearer {self.workspace.key}"}
        self.pace = constant_throughput(p.user_rate)
        # A random phase: users started together would otherwise fire together, in
        # bursts of every user at once. (Locust patches time.sleep to yield to others.)
        time.sleep(random.uniform(0, 1 / p.user_rate))
        # constant_pacing's clock (set when the user was made) starts now: counting the
        # sleep as task time would send the first two tasks back to back.
        self._cp_last_run = time.perf_counter()

    def wait_time(self) -> float:
        return float(self.pace(self))

    def call(self, method: str, path: str, name: str, body: dict[str, Any] | None = None) -> None:
        with self.client.request(
            method, path, name=name, headers=self.headers, json=body, catch_response=True
        ) as resp:
            if 200 <= resp.status_code < 300:
                resp.success()
            elif resp.status_code == 0:  # no answer: refused, reset, timed out
                resp.failure(f"no response: {resp.error!r}")
            else:
                resp.failure(f"HTTP {resp.status_code}: {(resp.text or '')[:160]}")

    @task(14)
    def search(self) -> None:
        store, question = self.workspace.next_question()
        body = {"user_id": store, "query": question, "max_results": 10}
        self.call("POST", SEARCH, SEARCH, body)

    @task(4)
    def browse(self) -> None:
        store = random.choice(self.workspace.stores)
        self.call("GET", f"{BROWSE}?store={store}&limit=20", BROWSE)

    @task(1)
    def list_stores(self) -> None:
        self.call("GET", STORES, STORES)

    @task(1)
    def write(self) -> None:
        turn = random.choice(self.workspace.turns)
        # A providerRef of its own: a new memory each time, where the same text without
        # one would be folded into the stored turn as a duplicate.
        body = {**turn, "provider": "load", "providerRef": uuid.uuid4().hex}
        self.call("POST", WRITE, WRITE, body)
