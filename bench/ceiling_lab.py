"""Issue 36: how far re-weighting can go, on recall_lab's cache: two ceilings.

- **A question-type gate, with the type known**: each category (1 multi-hop, 2 temporal,
  3 open-domain, 4 single-hop, 5 adversarial) gets the ranking weights
  (``service.retrieval.ranking.Weights``) best for it, chosen on the very questions it is
  scored on. No rule that guesses a question's type from its words can beat this; if it
  is far from a target, no gate is worth building.
- **A perfect order of today's pool**: the evidence among the candidates of both arms
  (``recall_lab.PER_ARM`` each) put first: what any re-ranking of the pool could reach.

``--part interaction`` tries to learn part of that order: a logistic regression, trained
on seven conversations and scored on the eighth, over the learned fusion's features
(``recall_lab.feature_rows``), today's score and rank, and the question's and the
memory's vectors multiplied dimension by dimension (a learned weighting of the cosine's
terms: which kinds of meaning answer a question).

``--part graph`` smooths today's scores over the pool's own similarity graph (score
regularisation, the cluster hypothesis): each candidate borrows ``lam`` x the score of each
of the ``lenders`` best, weighted by how far their cosine exceeds ``tau`` (the largest such
share, or their mean): the neighbours lever by meaning instead of write order.

    .venv/bin/python -m bench.recall_lab --fetch   # once, if /tmp has no cache
    .venv/bin/python -m bench.ceiling_lab [--part gate|interaction|graph]  # 5 / 10 / 3 min
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from bench import recall_lab as lab
from service.queries.search import Candidate
from service.retrieval import ranking

GRID = {
    "text": (0.6, 1.0, 1.5),
    "speaker": (0.0, 0.4, 1.0, 2.0, 3.0),
    "neighbour": (0.0, 0.15, 0.3, 0.5),
    "period": (0.0, 0.4, 1.0),
}


def recalls(questions: Sequence[lab.Q], stores: dict[str, lab.Store],
            weights: ranking.Weights) -> list[float]:  # fmt: skip
    out = []
    for q in questions:
        store = stores[q.store]
        ranked = lab.retrieve(q, store, q.vector, weights=weights)
        out.append(lab.recall(q, store, [c for c, _ in ranked][:10]))
    return out


def perfect(q: lab.Q, store: lab.Store) -> float:
    pool = [c for c, _ in lab.retrieve(q, store, q.vector)]
    hits = [c for c in pool if store.dia.get(c.id) in q.evidence]
    return lab.recall(q, store, hits[:10])


def gate(questions: list[lab.Q], stores: dict[str, lab.Store]) -> None:
    settings = [ranking.Weights(**dict(zip(GRID, v, strict=True)))
                for v in itertools.product(*GRID.values())]  # fmt: skip
    per_setting = {w: recalls(questions, stores, w) for w in settings}
    today = per_setting[ranking.Weights()]
    categories = sorted({q.category for q in questions})
    gated = list(today)
    print("| category | n | today | best weights for it alone | R@10 with them |")
    print("|---|---|---|---|---|")
    for cat in categories:
        idx = [i for i, q in enumerate(questions) if q.category == cat]
        best = max(settings, key=lambda w: statistics.fmean(per_setting[w][i] for i in idx))
        for i in idx:
            gated[i] = per_setting[best][i]
        mean = statistics.fmean(per_setting[best][i] for i in idx)
        print(f"| {cat} | {len(idx)} | {statistics.fmean(today[i] for i in idx):.4f} | "
              f"{best} | {mean:.4f} |")  # fmt: skip
    print("\ntoday:", lab.by_category(questions, today))
    print("each category with its own best weights:", lab.by_category(questions, gated))
    ceiling = [perfect(q, stores[q.store]) for q in questions]
    print("today's pool in a perfect order:", lab.by_category(questions, ceiling))


Pool = tuple[list[Candidate], npt.NDArray[np.float64], npt.NDArray[np.bool_]]
PLAIN = 12  # the columns before the vectors' products


def pool(q: lab.Q, store: lab.Store) -> Pool:
    """Today's pool, best first, with each candidate's features and whether it is evidence."""
    index = {m: i for i, m in enumerate(store.ids)}
    ranked = lab.retrieve(q, store, q.vector)
    cands = [c for c, _ in ranked]
    _, feats = lab.feature_rows(q, store)  # the same pool, in the same order
    today = np.array([[s, 1.0 / (5 + i)] for i, (_, s) in enumerate(ranked)])
    products = store.own[[index[c.id] for c in cands]] * q.vector[None, :] * 10
    evidence = np.array([store.dia.get(c.id) in q.evidence for c in cands])
    return cands, np.hstack([feats, today, products]), evidence


def interaction(questions: list[lab.Q], stores: dict[str, lab.Store]) -> None:
    from sklearn.linear_model import LogisticRegression

    pools = [pool(q, stores[q.store]) for q in questions]
    print("| features | C | LOO R@10 by category |")
    print("|---|---|---|")
    for c_reg, columns in itertools.product((0.1, 1.0, 10.0), (PLAIN, None)):
        got = [0.0] * len(questions)
        for held in sorted(stores):
            train = [i for i, q in enumerate(questions) if q.store != held and q.category <= 4]
            x = np.vstack([pools[i][1][:, :columns] for i in train])
            y = np.concatenate([pools[i][2] for i in train])
            model = LogisticRegression(C=c_reg, max_iter=3000).fit(x, y)
            for i in (i for i, q in enumerate(questions) if q.store == held):
                cands, feats, _ = pools[i]
                p = model.decision_function(feats[:, :columns])
                order = sorted(range(len(cands)), key=lambda j: (-p[j], cands[j].id))
                got[i] = lab.recall(questions[i], stores[held], [cands[j] for j in order[:10]])
        name = "features + today's score and rank" + ("" if columns else " + vector products")
        print(f"| {name} | {c_reg} | {lab.by_category(questions, got)} |", flush=True)


Scores = npt.NDArray[np.float64]


def smoothed(scores: Scores, cosines: npt.NDArray[np.float32],
             lenders: int, lam: float, tau: float, agg: str) -> Scores:  # fmt: skip
    """``scores`` plus what the ``lenders`` best lend by similarity (``--part graph``)."""
    k = min(lenders, len(scores))
    shares = np.maximum(cosines[:, :k] - tau, 0.0)
    np.fill_diagonal(shares[:k, :k], 0.0)  # a candidate lends nothing to itself
    lent = shares * scores[None, :k]
    out: Scores = scores + lam * (lent.max(axis=1) if agg == "max" else lent.sum(axis=1) / k)
    return out


def graph(questions: list[lab.Q], stores: dict[str, lab.Store]) -> None:
    pools = []
    for q in questions:
        store = stores[q.store]
        index = {m: i for i, m in enumerate(store.ids)}
        ranked = lab.retrieve(q, store, q.vector)  # best first
        vectors = store.own[[index[c.id] for c, _ in ranked]]
        pools.append(([c for c, _ in ranked], np.array([s for _, s in ranked]),
                      vectors @ vectors.T))  # fmt: skip
    print("| lenders | lam | tau | share | R@10 by category |")
    print("|---|---|---|---|---|")
    for lenders, lam, tau, agg in itertools.product(
        (5, 10, 30), (0.1, 0.3, 0.6, 1.0), (0.3, 0.5, 0.7), ("max", "mean")
    ):
        got = []
        for q, (cands, scores, cosines) in zip(questions, pools, strict=True):
            new = smoothed(scores, cosines, lenders, lam, tau, agg)
            order = sorted(range(len(cands)), key=lambda j: (-new[j], cands[j].id))
            got.append(lab.recall(q, stores[q.store], [cands[j] for j in order[:10]]))
        print(f"| {lenders} | {lam} | {tau} | {agg} | {lab.by_category(questions, got)} |",
              flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parts = {"gate": gate, "interaction": interaction, "graph": graph}
    parser.add_argument("--part", choices=tuple(parts), action="append")
    args = parser.parse_args()
    questions, stores = lab.load_cache()
    for part in args.part or tuple(parts):
        parts[part](questions, stores)
        print()


if __name__ == "__main__":
    main()
