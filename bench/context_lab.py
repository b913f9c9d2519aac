"""Issue 36: a turn's key in the context of its conversation, cheaper than encoding pairs.

``bench.recall_lab`` found that a second key per memory, the turn encoded together with
the turn before it, adds 0.020 to LoCoMo recall@10 (1-4) but costs the worker one more
encoding of a text twice as long: about 31 % of today's memories per second. This lab
measures keys that carry the same context for less, on recall_lab's cached candidates:

- **late chunking**: consecutive turns of a session packed into one window of at most
  ``W`` tokens and encoded once; each turn's key is the mean of its own tokens' output
  vectors, which have seen the turns around it. About one encoding of each token, so about
  the cost of the turn's own key; ``+ctx``: each window also starts with the end of the
  turn before its first (up to 64 tokens, within the width: read for context, no key);
- **short context**: the turn with only the last ``C`` tokens of the turn before it.

Each variant is timed on one conversation against the turns' own keys (the worker's
encoder), fp32 and int8.

Parts (``--part``, default all; about 5 minutes each): ``costs`` (every kind of key, timed),
``refine`` (widths around 128, int8 one window per run, how the context key's cosine
counts against the own key's), ``design`` (windows across sessions, and verify on top).

    .venv/bin/python -m bench.recall_lab --fetch   # once, if /tmp has no cache
    .venv/bin/python -m bench.context_lab [--part costs|refine|design]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench import recall_lab as lab
from bench.common import load_turns
from bench.quality_bench import turn_text
from embeddings import onnx
from embeddings.model import bundled_model_path
from service.ops.embedding import load_embedder
from service.settings import Settings

Matrix = lab.Matrix
TIMED = "conv-26"
CONTEXT_TOKENS = 64  # of the turn before a window, with Late(context=True)
Span = tuple[int, int, int]  # a turn's index, and its first and end token in a window
Window = tuple[list[int], list[Span]]  # token ids (no special tokens), the turns keyed


class Lines:
    """A store's turns in write order: each one's text with its speaker, its session, and
    its tokens (no special tokens)."""

    def __init__(self, store: lab.Store, turns: dict[str, Any], tokenizer: Any) -> None:
        said = [turns[store.dia[m]] for m in store.ids]
        self.texts = [f"{t.speaker}: {turn_text(t.text, t.image_caption)}" for t in said]
        self.sessions = [t.dia_id.split(":")[0] for t in said]
        self.tokens: list[list[int]] = tokenizer(self.texts, add_special_tokens=False)["input_ids"]


@dataclass(frozen=True)
class Late:
    """Late-chunked keys: windows of at most ``width`` tokens; ``context``: each window
    starts with the end of the turn before its first (at most ``CONTEXT_TOKENS``, and
    only what the width leaves room for); ``sessions``: a window never crosses one;
    ``per_run``: windows per run of the model."""

    width: int
    context: bool = False
    sessions: bool = True
    per_run: int = 16


def windows(lines: Lines, late: Late) -> list[Window]:
    out: list[Window] = []
    ids: list[int] = []
    spans: list[Span] = []
    for i, toks in enumerate(lines.tokens):
        toks = toks[: late.width]
        new_session = late.sessions and i > 0 and lines.sessions[i] != lines.sessions[i - 1]
        if spans and (new_session or len(ids) + len(toks) > late.width):
            out.append((ids, spans))
            ids, spans = [], []
        if not spans and late.context and i > 0 and not new_session:
            room = min(CONTEXT_TOKENS, late.width - len(toks))
            ids = list(lines.tokens[i - 1][-room:]) if room > 0 else []
        spans.append((i, len(ids), len(ids) + len(toks)))
        ids.extend(toks)
    if spans:
        out.append((ids, spans))
    return out


def late_keys(twin: onnx.OnnxTransformer, lines: Lines, late: Late) -> Matrix:
    """Each turn's key: the mean of its tokens' output vectors in its window, normalized."""
    keys: Matrix | None = None
    ordered = sorted(windows(lines, late), key=lambda w: -len(w[0]))
    for start in range(0, len(ordered), late.per_run):
        batch = ordered[start : start + late.per_run]
        hidden = twin.session.run(None, _feed(twin, [ids for ids, _ in batch]))[0]
        if keys is None:
            keys = np.zeros((len(lines.texts), hidden.shape[-1]), dtype=np.float32)
        for row, (_, spans) in enumerate(batch):
            for i, first, end in spans:
                v = hidden[row, first + 1 : end + 1].mean(axis=0)  # +1: [CLS]
                keys[i] = v / np.linalg.norm(v)
    assert keys is not None, "a store with no turns"
    return keys


def _feed(twin: onnx.OnnxTransformer, rows: list[list[int]]) -> dict[str, Any]:
    # The special tokens around a text: what the tokenizer's post-processor adds to none.
    cls, sep = twin.special_ids()
    input_ids = np.zeros((len(rows), max(len(r) for r in rows) + 2), dtype=np.int64)
    mask = np.zeros_like(input_ids)
    for row, ids in enumerate(rows):
        full = [cls, *ids, sep]
        input_ids[row, : len(full)] = full
        mask[row, : len(full)] = 1
    return {"input_ids": input_ids, "attention_mask": mask,
            "token_type_ids": np.zeros_like(input_ids)}  # fmt: skip


def short_context_texts(lines: Lines, tokenizer: Any, context_tokens: int) -> list[str]:
    """Each turn after the last ``context_tokens`` tokens of the turn before it (in its
    session)."""
    out = []
    for i, text in enumerate(lines.texts):
        if i == 0 or lines.sessions[i] != lines.sessions[i - 1]:
            out.append(text)
            continue
        before = tokenizer.decode(lines.tokens[i - 1][-context_tokens:])
        out.append(f"{before}\n{text}")
    return out


@dataclass
class Lab:
    questions: list[lab.Q]
    stores: dict[str, lab.Store]
    embedder: Any
    twins: dict[str, onnx.OnnxTransformer]
    lines: dict[str, Lines]
    own_seconds: float  # conv-26's own keys, through the worker's encoder

    def keys(self, make: Callable[[str], Matrix]) -> tuple[float, dict[str, Matrix]]:
        """``make``'s keys for every store, and its time on conv-26 over the own keys'."""
        return _timed(lambda: make(TIMED)) / self.own_seconds, {s: make(s) for s in self.stores}

    def late(self, precision: str, late: Late) -> Callable[[str], Matrix]:
        return lambda store: late_keys(self.twins[precision], self.lines[store], late)

    def recall(self, keys: dict[str, Matrix]) -> dict[str, float]:
        r = [lab.recall(q, self.stores[q.store], lab.top(q, self.stores[q.store], [keys[q.store]]))
             for q in self.questions]  # fmt: skip
        return lab.by_category(self.questions, r)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--part", choices=tuple(PARTS), action="append", help="default: all")
    args = parser.parse_args()
    questions, stores = lab.load_cache()
    turns: dict[str, dict[str, Any]] = {}
    for t in load_turns():
        turns.setdefault(t.store, {})[t.dia_id] = t
    with tempfile.TemporaryDirectory() as tmp:
        embedder: Any = load_embedder(Settings.from_env({"MNEME_DATA_DIR": tmp}))
        int8 = onnx.load(embedder._model, bundled_model_path(), Path(tmp), 2, int8=True)
        assert embedder._onnx is not None and int8 is not None, "the lab needs ONNX twins"
        tokenizer = embedder._model.tokenizer
        lines = {name: Lines(store, turns[name], tokenizer) for name, store in stores.items()}
        # What the worker encodes for a turn: its speaker's name, then its text.
        own = lines[TIMED].texts
        seconds = _timed(lambda: embedder.encode_documents(own))
        print(f"own keys, {TIMED} ({len(own)} turns): {seconds:.2f} s (the worker's encoder)")
        state = Lab(questions, stores, embedder, {"fp32": embedder._onnx, "int8": int8}, lines,
                    seconds)  # fmt: skip
        today = [lab.recall(q, stores[q.store], lab.top(q, stores[q.store])) for q in questions]
        print(f"today: {lab.by_category(questions, today)}", flush=True)
        for part in args.part or PARTS:
            PARTS[part](state)


def costs(state: Lab) -> None:
    variants: dict[str, Callable[[str], Matrix]] = {}
    for precision in ("fp32", "int8"):
        for width, context in ((64, True), (128, False), (128, True), (254, False), (254, True)):
            name = f"late {precision} W{width}{' +ctx' if context else ''}"
            variants[name] = state.late(precision, Late(width, context))
    for c in (8, 16, 32, 10_000):
        variants[f"short context fp32 C{c}"] = _short_context(state, c)
    print("| key | cost vs own | R@10 by category |\n|---|---|---|")
    for name, make in variants.items():
        cost, keys = state.keys(make)
        print(f"| {name} | {cost:.2f} | {state.recall(keys)} |", flush=True)


def _short_context(state: Lab, c: int) -> Callable[[str], Matrix]:
    tokenizer = state.embedder._model.tokenizer
    return lambda s: np.asarray(
        state.embedder.encode_documents(short_context_texts(state.lines[s], tokenizer, c))
    )


RULES: dict[str, Callable[[Matrix, Matrix], Matrix]] = {
    "max": np.maximum,
    "max(own, ctx - 0.02)": lambda own, ctx: np.maximum(own, ctx - 0.02),
    "max(own, ctx - 0.05)": lambda own, ctx: np.maximum(own, ctx - 0.05),
    "max(own, 0.95 ctx)": lambda own, ctx: np.maximum(own, np.float32(0.95) * ctx),
    "mean(own, ctx) (replaces)": lambda own, ctx: (own + ctx) / np.float32(2),
    "max(own, mean(own, ctx))": lambda own, ctx: np.maximum(own, (own + ctx) / np.float32(2)),
}


def refine(state: Lab) -> None:
    made: dict[str, dict[str, Matrix]] = {}
    for name, precision, late in (
        ("fp32 W96", "fp32", Late(96)), ("fp32 W128", "fp32", Late(128)),
        ("fp32 W160", "fp32", Late(160)), ("int8 W128", "int8", Late(128)),
        ("int8 W128 one per run", "int8", Late(128, per_run=1)), ("int8 W96", "int8", Late(96)),
        ("int8 W160", "int8", Late(160)),
    ):  # fmt: skip
        cost, made[name] = state.keys(state.late(precision, late))
        print(f"{name}: cost {cost:.2f} x the own keys'", flush=True)
    print("| key | rule | R@10 by category |\n|---|---|---|")
    for name, keys in made.items():
        for rule, combine in RULES.items():
            if rule != "max" and not name.endswith("W128"):
                continue
            r = []
            for q in state.questions:
                store = state.stores[q.store]
                sims = combine(store.own @ q.vector, keys[q.store] @ q.vector)
                found = [c for c, _ in lab.retrieve(q, store, q.vector, sims=sims)][:10]
                r.append(lab.recall(q, store, found))
            print(f"| {name} | {rule} | {lab.by_category(state.questions, r)} |", flush=True)


def design(state: Lab) -> None:
    print("| key | R@10 by category | verify k=1/2/3 | plain 10/15/20 |\n|---|---|---|---|")
    for name, precision, late in (
        ("none", "", None),
        ("fp32 W128", "fp32", Late(128)),
        ("fp32 W128 across sessions", "fp32", Late(128, sessions=False)),
        ("fp32 W160", "fp32", Late(160)),
        ("fp32 W160 across sessions", "fp32", Late(160, sessions=False)),
        ("int8 W160 across sessions", "int8", Late(160, sessions=False)),
    ):
        make = None if late is None else state.late(precision, late)
        keys = {} if make is None else {s: make(s) for s in state.stores}  # untimed
        r: list[float] = []
        verified: dict[int, list[float]] = {1: [], 2: [], 3: []}
        plain: dict[int, list[float]] = {1: [], 2: [], 3: []}
        for q in state.questions:
            store = state.stores[q.store]
            ranked = lab.retrieve(q, store, q.vector, [keys[q.store]] if keys else [])
            r.append(lab.recall(q, store, [c for c, _ in ranked[:10]]))
            if q.category != 1:
                continue
            for k in (1, 2, 3):
                verified[k].append(lab.recall(q, store, lab.shipped_verify(q, store, ranked, k)))
                plain[k].append(lab.recall(q, store, [c for c, _ in ranked[: 5 * (k + 1)]]))
        v = "/".join(f"{statistics.fmean(verified[k]):.4f}" for k in (1, 2, 3))
        p = "/".join(f"{statistics.fmean(plain[k]):.4f}" for k in (1, 2, 3))
        print(f"| {name} | {lab.by_category(state.questions, r)} | {v} | {p} |", flush=True)


PARTS: dict[str, Callable[[Lab], None]] = {"costs": costs, "refine": refine, "design": design}


def _timed(run: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


if __name__ == "__main__":
    main()
