"""Issue 36: the question in the voice of the speaker it names, on recall_lab's cache.

A memory's vector is made from ``Speaker: what they said`` (``embeddings.document_text``);
a question about one registered speaker ("What books has John read?") is encoded as it
is. This lab encodes such questions again, as the service's query model would, in the
shape of a memory: ``John: What books has John read?``, or with the name moved to the
front (``John: What books has read?``), and ranks the vector arm by the new vector, or by
a mix of both. The full-text arm is left as it was (its words are the same).

    .venv/bin/python -m bench.recall_lab --fetch   # once, if /tmp has no cache
    .venv/bin/python -m bench.query_lab
"""

from __future__ import annotations

import re
import statistics
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np

from bench import recall_lab as lab
from service.ops.embedding import load_embedder
from service.settings import Settings

Matrix = lab.Matrix


def voiced(q: lab.Q, drop_name: bool) -> str:
    assert q.speaker is not None
    text = q.text
    if drop_name:
        text = re.sub(rf"\b{re.escape(q.speaker)}('s)?\b\s*", "", text).strip()
    return f"{q.speaker}: {text}"


def main() -> None:
    questions, stores = lab.load_cache()
    named = [q for q in questions if q.speaker is not None]
    print(f"{len(named)} of {len(questions)} questions name one registered speaker")
    with tempfile.TemporaryDirectory() as tmp:
        embedder: Any = load_embedder(Settings.from_env({"MNEME_DATA_DIR": tmp}))
        vectors = {
            drop: {id(q): np.asarray(embedder.encode_queries([voiced(q, drop)])[0]) for q in named}
            for drop in (False, True)
        }
    rules: dict[str, Callable[[lab.Q], Matrix]] = {"as asked (today)": lambda q: q.vector}
    for drop in (False, True):
        name = "name moved to the front" if drop else "name put in front"
        for w in (None, 0.5, 1.0):
            rule = name if w is None else f"as asked + {w} x {name}"
            rules[rule] = _rule(vectors[drop], w)
    print("| query vector, for questions naming a speaker | R@10 by category, all questions |"
          " 1-4 by conversation | multi-hop verify k=1/2/3 |")  # fmt: skip
    print("|---|---|---|---|")
    for rule, vector_of in rules.items():
        r = []
        verified: dict[int, list[float]] = {1: [], 2: [], 3: []}
        for q in questions:
            store = stores[q.store]
            v = vector_of(q) if q.speaker is not None else q.vector
            ranked = lab.retrieve(q, store, v)
            r.append(lab.recall(q, store, [c for c, _ in ranked][:10]))
            for k in (1, 2, 3) if q.category == 1 else ():
                verified[k].append(lab.recall(q, store, lab.shipped_verify(q, store, ranked, k)))
        by_store = {s: round(statistics.fmean(x for q, x in zip(questions, r, strict=True)
                                              if q.store == s and q.category != 5), 3)
                    for s in stores}  # fmt: skip
        v3 = "/".join(f"{statistics.fmean(verified[k]):.4f}" for k in (1, 2, 3))
        print(f"| {rule} | {lab.by_category(questions, r)} | {by_store} | {v3} |", flush=True)


def _rule(voiced: dict[int, Matrix], w: float | None) -> Callable[[lab.Q], Matrix]:
    """The voiced vector (``w`` None), or the asked one plus ``w`` x the voiced one."""

    def vector(q: lab.Q) -> Matrix:
        return voiced[id(q)] if w is None else _mix(q.vector, voiced[id(q)], w)

    return vector


def _mix(a: Matrix, b: Matrix, w: float) -> Matrix:
    v = a + np.float32(w) * b
    out: Matrix = v / np.linalg.norm(v)
    return out


if __name__ == "__main__":
    main()
