"""Issue 36: how far re-weighting can go, on recall_lab's cache: two ceilings.

- **A question-type gate, with the type known**: each category (1 multi-hop, 2 temporal,
  3 open-domain, 4 single-hop, 5 adversarial) gets the ranking weights
  (``service.retrieval.ranking.Weights``) best for it, chosen on the very questions it is
  scored on. No rule that guesses a question's type from its words can beat this; if it
  is far from a target, no gate is worth building.
- **A perfect order of today's pool**: the evidence among the candidates of both arms
  (``recall_lab.PER_ARM`` each) put first: what any re-ranking of the pool could reach.

    .venv/bin/python -m bench.recall_lab --fetch   # once, if /tmp has no cache
    .venv/bin/python -m bench.ceiling_lab          # about five minutes
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from bench import recall_lab as lab
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


def main() -> None:
    questions, stores = lab.load_cache()
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


if __name__ == "__main__":
    main()
