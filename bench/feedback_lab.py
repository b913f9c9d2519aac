"""Issue 36's last verify lever: relevance feedback for the full-text arm, on recall_lab's cache.

verify's pass k searches again with the query's words plus the rarest words of what the
first pass found (RM3-like: the found memories' lexemes not in the question, by tf x
idf), the full-text arm scored by BM25 exactly as the service scores it (k1 1.2, b 0.75,
``to_tsvector('english', text)`` of each memory, the store's document frequencies), then
the shipped passes (``service.retrieval.verify``) on that ranking. Recall_lab measured
the same for the vector arm (Rocchio: more of the same hop).

The lexemes come from an embedded PostgreSQL (``to_tsvector`` of every LoCoMo turn as
written and of every question), cached under /tmp. The BM25 re-computed here must give
the service's score for every memory the service's arm returned (checked at start).

``--bm25`` instead sweeps BM25's own parameters for the first pass (k1, b: the service
uses 1.2, 0.75) with the text arm's weight, in-sample and leave one conversation out
(each fold takes the setting best on 1-4 of the other seven among those that lose no
category there by more than 0.01).

    .venv/bin/python -m bench.recall_lab --fetch   # once, if /tmp has no cache
    .venv/bin/python -m bench.feedback_lab [--bm25] # a few minutes
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import pickle
import statistics
import tempfile
from collections import Counter
from pathlib import Path

import asyncpg

from bench import recall_lab as lab
from bench.common import load_turns
from bench.quality_bench import turn_text
from service.ops import db
from service.queries.named import NamedSQL
from service.queries.search import Candidate
from service.retrieval import ranking
from service.retrieval.verify import pass_order, verify_passes

LEXEMES = Path(tempfile.gettempdir()) / "mneme-feedback-lexemes.pickle"
K1, B = 1.2, 0.75
TSV = NamedSQL(
    "SELECT lexeme, cardinality(positions) AS tf FROM unnest(to_tsvector('english', :t))"
)
Bag = dict[str, int]  # lexeme -> how often
Ranked = list[tuple[Candidate, float]]


async def _bags(texts: list[str]) -> list[Bag]:
    with tempfile.TemporaryDirectory() as tmp:
        server = db.start_embedded(Path(tmp) / "pg", cleanup_mode="delete")
        try:
            conn = await asyncpg.connect(server.get_uri())
            out = [{r["lexeme"]: r["tf"] for r in await TSV.fetch(conn, t=t)} for t in texts]
            await conn.close()
        finally:
            server.cleanup()
    return out


def lexemes(questions: list[lab.Q]) -> tuple[dict[tuple[str, str], Bag], list[Bag]]:
    """Each turn's lexemes by (store, dia_id), each question's, in order (cached)."""
    if LEXEMES.exists():
        cached: tuple[dict[tuple[str, str], Bag], list[Bag]] = pickle.loads(LEXEMES.read_bytes())  # noqa: S301
        return cached
    turns = list(load_turns())
    texts = [turn_text(t.text, t.image_caption) for t in turns] + [q.text for q in questions]
    bags = asyncio.run(_bags(texts))
    out = ({(t.store, t.dia_id): b for t, b in zip(turns, bags, strict=False)}, bags[len(turns) :])
    LEXEMES.write_bytes(pickle.dumps(out))
    return out


class Index:
    """One store's BM25: every memory's lexemes, document frequencies, mean length."""

    def __init__(self, store: lab.Store, name: str, bags: dict[tuple[str, str], Bag]) -> None:
        self.bags = {m: bags[(name, store.dia[m])] for m in store.ids}
        self.df = Counter(lex for bag in self.bags.values() for lex in bag)
        self.docs = len(self.bags)
        self.avgdl = max(1.0, sum(len(b) for b in self.bags.values()) / self.docs)

    def idf(self, lexeme: str) -> float:
        df = self.df[lexeme]
        return math.log(1 + (max(self.docs, df) - df + 0.5) / (df + 0.5))

    def scores(self, terms: dict[str, float]) -> dict[str, float]:
        """Memory id -> BM25 of the weighted ``terms``, for every memory holding one."""
        out: dict[str, float] = {}
        for mid, bag in self.bags.items():
            norm = K1 * (1 - B + B * len(bag) / self.avgdl)
            s = sum(w * self.idf(t) * bag[t] * (K1 + 1) / (bag[t] + norm)
                    for t, w in terms.items() if t in bag)  # fmt: skip
            if s > 0:
                out[mid] = s
        return out

    def expansion(self, found: list[str], question: Bag, n: int) -> dict[str, float]:
        """The ``n`` rarest words of the ``found`` memories not in the question (tf x idf)."""
        weight: dict[str, float] = {}
        for mid in found:
            for lex, tf in self.bags[mid].items():
                if lex not in question and self.df[lex] > 1:
                    weight[lex] = weight.get(lex, 0.0) + tf * self.idf(lex)
        return dict(sorted(weight.items(), key=lambda lw: (-lw[1], lw[0]))[:n])


def check(questions: list[lab.Q], indexes: dict[str, Index], asked: list[Bag]) -> None:
    worst = 0.0
    for q, bag in zip(questions, asked, strict=True):
        mine = indexes[q.store].scores(dict.fromkeys(bag, 1.0))
        for mid, rank in q.text_ranks.items():
            worst = max(worst, abs(mine.get(mid, 0.0) - rank))
    print(f"BM25 here against the service's, every match: largest difference {worst:.2g}")
    assert worst < 1e-3, "the lab's BM25 must be the service's"


def feedback(n: int, gamma: float, per: str) -> lab.Verifier:
    """Passes drawn from a retrieval again whose text arm adds ``gamma`` x the BM25 of the
    ``n`` expansion words of the first pass (``per``: "pass" re-expands from everything
    returned before each pass; "first" once, from the first pass)."""

    def run(q: lab.Q, store: lab.Store, ranked: Ranked, k: int) -> list[Candidate]:
        index, bag = CONTEXT[id(q)]
        out = [c for c, _ in ranked[:5]]
        for _ in range(k if per == "pass" else 1):
            extra = index.scores(index.expansion([c.id for c in out], bag, n))
            ranks = {m: q.text_ranks.get(m, 0.0) + gamma * extra.get(m, 0.0)
                     for m in set(q.text_ranks) | set(extra)}  # fmt: skip
            again = lab.retrieve(q, store, q.vector, text_ranks=ranks)
            order = pass_order(again, now=lab.NOW, speaker=q.speaker, period=q.period)
            if per == "first":
                return verify_passes(out, order, 5, k)[0]
            got = verify_passes(out, order, 5, 1)[0]
            if len(got) == len(out):
                break
            out = got
        return out

    return run


CONTEXT: dict[int, tuple[Index, Bag]] = {}


def row(name: str, recalls: dict[int, list[float]]) -> None:
    print(
        f"| {name} | " + " | ".join(f"{statistics.fmean(r):.4f}" for r in recalls.values()) + " |"
    )


Setting = tuple[float, float, float]  # k1, b, the text arm's weight
SHIPPED: Setting = (1.2, 0.75, 1.0)


def bm25_recalls(
    questions: list[lab.Q], stores: dict[str, lab.Store], indexes: dict[str, Index],
    asked: list[Bag], setting: Setting,
) -> list[float]:  # fmt: skip
    global K1, B
    K1, B = setting[0], setting[1]
    try:
        out = []
        for q, bag in zip(questions, asked, strict=True):
            ranks = indexes[q.store].scores(dict.fromkeys(bag, 1.0))
            ranked = lab.retrieve(q, stores[q.store], q.vector, text_ranks=ranks,
                                  weights=ranking.Weights(text=setting[2]))  # fmt: skip
            out.append(lab.recall(q, stores[q.store], [c for c, _ in ranked][:10]))
        return out
    finally:
        K1, B = SHIPPED[0], SHIPPED[1]


def bm25_part(questions: list[lab.Q], stores: dict[str, lab.Store],
              indexes: dict[str, Index], asked: list[Bag]) -> None:  # fmt: skip
    grid = itertools.product((0.6, 0.9, 1.2, 1.6), (0.1, 0.2, 0.3, 0.5, 0.75), (0.8, 1.0, 1.3))
    got = {s: bm25_recalls(questions, stores, indexes, asked, s) for s in grid}
    print("| k1 | b | text | R@10 by category (in-sample) |\n|---|---|---|---|")
    for s in sorted(got, key=lambda s: -lab.by_category(questions, got[s])["1-4"]):
        print(f"| {s[0]} | {s[1]} | {s[2]} | {lab.by_category(questions, got[s])} |")
    held_out = [0.0] * len(questions)
    for held in sorted(stores):
        seven = [i for i, q in enumerate(questions) if q.store != held]
        base = lab.by_category([questions[i] for i in seven], [got[SHIPPED][i] for i in seven])
        fine = []
        for s, values in got.items():
            mine = lab.by_category([questions[i] for i in seven], [values[i] for i in seven])
            if all(mine[c] >= base[c] - 0.01 for c in base):
                fine.append((mine["1-4"], s == SHIPPED, s))
        pick = max(fine)[2]
        print(f"fold {held}: {pick}")
        for i, q in enumerate(questions):
            if q.store == held:
                held_out[i] = got[pick][i]
    print("LOO:", lab.by_category(questions, held_out))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bm25", action="store_true")
    args = parser.parse_args()
    questions, stores = lab.load_cache()
    turns_bags, asked = lexemes(questions)
    indexes = {name: Index(store, name, turns_bags) for name, store in stores.items()}
    check(questions, indexes, asked)
    if args.bm25:
        bm25_part(questions, stores, indexes, asked)
        return
    multi = [q for q in questions if q.category == 1]
    for q, bag in zip(questions, asked, strict=True):
        CONTEXT[id(q)] = (indexes[q.store], bag)
    verifiers: dict[str, lab.Verifier] = {"shipped passes": lab.shipped_verify}
    for n, gamma, per in itertools.product((5, 10, 20), (0.3, 1.0), ("first", "pass")):
        verifiers[f"text feedback: {n} words x {gamma}, from the {per}"] = feedback(n, gamma, per)
    ks = (1, 2, 3)
    print("| passes | k=1 | k=2 | k=3 |\n|---|---|---|---|")
    ranked = {id(q): lab.retrieve(q, stores[q.store], q.vector) for q in multi}
    row("plain retrieval of as many", {
        k: [lab.recall(q, stores[q.store], [c for c, _ in ranked[id(q)]][: 5 * (k + 1)])
            for q in multi]
        for k in ks
    })  # fmt: skip
    for name, verifier in verifiers.items():
        row(name, {
            k: [lab.recall(q, stores[q.store], verifier(q, stores[q.store], ranked[id(q)], k))
                for q in multi]
            for k in ks
        })  # fmt: skip


if __name__ == "__main__":
    main()
