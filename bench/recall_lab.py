"""Issue 36's levers that change what is retrieved, measured offline before any is built.

``--fetch`` writes LoCoMo through the HTTP API of a fresh ``mneme serve`` (as
bench.quality_bench does), then reads, with the service's own code, every question's
candidates at full depth (both SQL arms ``DEEP`` deep: every memory of the store with its
cosine, and every full-text match with its BM25 rank), each question's vector (the
service's int8 query model) and every memory's stored vector. It caches them under /tmp
(the data's licence keeps them out of the repository). Without ``--fetch`` the cache is
read and the levers are scored (``--part``, default all):

- a retrieval is simulated exactly as the service makes it: the ``PER_ARM`` best of each
  arm, fused and ranked by ``service.retrieval.ranking.scored``; a simulation of today's
  ranking must reproduce bench.quality_bench's figure;
- ``keys``: each memory also owns a vector of another text (the turn before it and
  itself; its speaker and date and itself) or a mix of its neighbours' vectors; the
  vector arm ranks a memory by its best key (``bench.context_lab`` goes on from here);
- ``verify``: verify's passes against plain retrieval of as many results: the shipped
  ones (``service.retrieval.verify``), Rocchio feedback on the query vector, MMR, the
  found days favoured or spread, the named speaker favoured, the speaker's own retrieval;
- ``verify-folds``: the passes' weights tuned leave one conversation out;
- ``fusion``: a learned fusion (logistic regression, trees) leave one conversation out.

    .venv/bin/python -m bench.recall_lab --fetch   # once: a few minutes
    .venv/bin/python -m bench.recall_lab [--part keys|verify|verify-folds|fusion]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import pickle
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench import ranking_folds
from bench.common import load_turns
from bench.quality_bench import KEY, load_queries, locomo_written, turn_text
from service.ops.embedding import load_embedder
from service.queries.named import NamedSQL
from service.queries.search import Candidate
from service.retrieval import ranking
from service.retrieval.verify import pass_order, verify_passes
from service.settings import Settings

CACHE = Path(tempfile.gettempdir()) / "mneme-recall-lab.pickle"
KEYS_CACHE = Path(tempfile.gettempdir()) / "mneme-recall-lab-keys.pickle"
DEEP = 2000  # more than any LoCoMo conversation's turns: every memory is a candidate
PER_ARM = 80
Matrix = npt.NDArray[np.float32]


@dataclass
class Q:
    store: str
    category: int
    evidence: set[str]
    text: str
    vector: Matrix
    text_ranks: dict[str, float]  # memory id -> BM25, every full-text match
    speaker: str | None
    period: ranking.Period | None


@dataclass
class Store:
    ids: list[str]  # memory ids, in write order
    dia: dict[str, str]  # memory id -> dia_id
    rows: dict[str, Candidate]  # memory id -> its candidate row (cosine unset)
    own: Matrix  # the memories' stored vectors, in ``ids`` order


async def fetch() -> None:
    queries = load_queries({t.store for t in load_turns()})
    async with locomo_written("mneme-recall-") as (server, data_dir, ids):
        stores: dict[str, Store] = {}
        questions: list[Q] = []
        async for r, conn in ranking_folds.retrievals(
            server.database_url(), data_dir, KEY, queries, per_arm=DEEP
        ):
            q = r.query
            if q["store"] not in stores:
                stores[q["store"]] = await _store(conn, r.store_id, r.candidates, ids[q["store"]])
            questions.append(Q(
                q["store"], q["category"], set(q["evidence"]), q["question"], r.vector,
                {c.id: c.fts_rank for c in r.candidates if c.fts_rank is not None},
                ranking.named_speaker(q["question"], r.speakers),
                ranking.named_period(q["question"]),
            ))  # fmt: skip
    CACHE.write_bytes(pickle.dumps({"questions": questions, "stores": stores}))
    print(f"cached {len(questions)} questions in {CACHE}")


def load_cache() -> tuple[list[Q], dict[str, Store]]:
    """The questions and stores ``fetch`` cached (also from a cache made before this
    module pickled its classes under its own name: then they were ``__main__``'s)."""
    main = sys.modules["__main__"]
    for cls in (Q, Store):
        if not hasattr(main, cls.__name__):
            setattr(main, cls.__name__, cls)
    data = pickle.loads(CACHE.read_bytes())  # noqa: S301 (this script's own cache)
    return data["questions"], data["stores"]


STORE_VECTORS = NamedSQL("SELECT id, embedding FROM memories WHERE store_id = :store ORDER BY id")


async def _store(conn: Any, store_id: str, cands: list[Candidate], dia: dict[str, str]) -> Store:
    rows = await STORE_VECTORS.fetch(conn, store=store_id)
    by_id = {c.id: replace(c, cosine=None, in_vec=False, fts_rank=None) for c in cands}
    assert len(by_id) == len(rows), "a deep retrieval must bring every memory"
    own = np.array([np.asarray(r["embedding"].to_numpy()) for r in rows], dtype=np.float32)
    return Store([r["id"] for r in rows], dia, by_id, own)


# --- keys ----------------------------------------------------------------------------------


def key_texts(store: Store, turns: dict[str, Any], kind: str) -> list[str]:
    """The text of each memory's second key, in ``store.ids`` order: the turn before it
    and itself (``previous``), itself and the turn after it (``next``), both
    (``window``), or itself with its speaker and date (``speaker-date``)."""
    said = [turns[store.dia[m]] for m in store.ids]
    lines = [f"{t.speaker}: {turn_text(t.text, t.image_caption)}" for t in said]

    def joined(i: int, before: int, after: int) -> str:
        return "\n".join(lines[max(0, i - before) : i + after + 1])

    if kind == "speaker-date":
        return [f"{t.speaker} on {t.timestamp[:10]}: {turn_text(t.text, t.image_caption)}"
                for t in said]  # fmt: skip
    before, after = {"previous": (1, 0), "next": (0, 1), "window": (1, 1)}[kind]
    return [joined(i, before, after) for i in range(len(lines))]


KEY_KINDS = ("previous", "next", "speaker-date", "window")


def make_keys(stores: dict[str, Store]) -> dict[str, dict[str, Matrix]]:
    if KEYS_CACHE.exists():
        cached: dict[str, dict[str, Matrix]] = pickle.loads(KEYS_CACHE.read_bytes())  # noqa: S301
        return cached
    turns: dict[str, dict[str, Any]] = {}
    for t in load_turns():
        turns.setdefault(t.store, {})[t.dia_id] = t
    with tempfile.TemporaryDirectory() as tmp:
        embedder = load_embedder(Settings.from_env({"MNEME_DATA_DIR": tmp}))
        out: dict[str, dict[str, Matrix]] = {}
        for name, store in stores.items():
            out[name] = {
                kind: np.asarray(embedder.encode_documents(key_texts(store, turns[name], kind)))
                for kind in KEY_KINDS
            }
            print("keys for", name, flush=True)
    KEYS_CACHE.write_bytes(pickle.dumps(out))
    return out


def mixed(store: Store, w: float, kinds: Sequence[str]) -> Matrix:
    """A key made of vectors alone: the memory's own plus ``w`` x its neighbours'."""
    index = {m: i for i, m in enumerate(store.ids)}
    out = store.own.copy()
    for i, mid in enumerate(store.ids):
        before = store.rows[mid].written_after
        if "prev" in kinds and before in index:
            out[i] += w * store.own[index[before]]
        if (
            "next" in kinds
            and i + 1 < len(store.ids)
            and store.rows[store.ids[i + 1]].written_after == mid
        ):
            out[i] += w * store.own[i + 1]
    normalized: Matrix = out / np.linalg.norm(out, axis=1, keepdims=True)
    return normalized


# --- a simulated retrieval -----------------------------------------------------------------


def retrieve(
    q: Q, store: Store, vector: Matrix, extra: Sequence[Matrix] = (), per_arm: int = PER_ARM,
    text_ranks: dict[str, float] | None = None, speaker: str | None = None,
    sims: Matrix | None = None, weights: ranking.Weights = ranking.DEFAULT_WEIGHTS,
) -> list[tuple[Candidate, float]]:  # fmt: skip
    """Both arms ``per_arm`` deep, ranked as the service ranks them (under ``weights``);
    ``speaker``: only that speaker's memories (the search's ``speaker`` filter); ``sims``:
    each memory's cosine, if not its best key's."""
    if sims is None:
        sims = store.own @ vector
        for keys_ in extra:
            sims = np.maximum(sims, keys_ @ vector)
    allowed = [speaker is None or store.rows[m].speaker == speaker for m in store.ids]
    order = [i for i in np.lexsort((np.array(store.ids), -sims)) if allowed[i]][:per_arm]
    vec = {store.ids[i]: float(sims[i]) for i in order}
    ranks = q.text_ranks if text_ranks is None else text_ranks
    if speaker is not None:
        ranks = {m: r for m, r in ranks.items() if store.rows[m].speaker == speaker}
    text = sorted(ranks, key=lambda m: (-ranks[m], m))[:per_arm]
    index = {m: i for i, m in enumerate(store.ids)}
    cands = []
    for mid in set(vec) | set(text):
        cosine = vec.get(mid, float(sims[index[mid]]))
        cands.append(replace(store.rows[mid], cosine=cosine, in_vec=mid in vec,
                             fts_rank=ranks[mid] if mid in text else None))  # fmt: skip
    return ranking.scored(
        cands, fuse_text=True, use_features=True, now=NOW, weights=weights, speaker=q.speaker,
        period=q.period,
    )  # fmt: skip


NOW = datetime.now(UTC)


def recall(q: Q, store: Store, found: Sequence[Candidate]) -> float:
    got = {store.dia.get(c.id, "?") for c in found}
    return len(got & q.evidence) / len(q.evidence)


def by_category(questions: Sequence[Q], values: Sequence[float]) -> dict[str, float]:
    groups: dict[str, list[float]] = defaultdict(list)
    for q, v in zip(questions, values, strict=True):
        groups[str(q.category)].append(v)
        if q.category <= 4:
            groups["1-4"].append(v)
    return {k: round(statistics.fmean(v), 4) for k, v in sorted(groups.items())}


# --- verify --------------------------------------------------------------------------------

Verifier = Callable[[Q, Store, list[tuple[Candidate, float]], int], list[Candidate]]


def shipped_verify(
    q: Q, store: Store, ranked: list[tuple[Candidate, float]], k: int
) -> list[Candidate]:
    """The service's own verify (``service.retrieval.verify``)."""
    order = pass_order(ranked, now=NOW, speaker=q.speaker, period=q.period)
    return verify_passes([c for c, _ in ranked[:5]], order, 5, k)[0]


def rocchio(alpha: float, beta: float, mix: float = 0.0, decay: float = 1.0) -> Verifier:
    """Pass k: the query vector plus ``beta`` x the mean of the vectors found so far
    (each pass's finds weighted ``decay`` ** age); ``mix``: the new ranking's score plus
    ``mix`` x the first ranking's."""

    def run(q: Q, store: Store, ranked: list[tuple[Candidate, float]], k: int) -> list[Candidate]:
        index = {m: i for i, m in enumerate(store.ids)}
        out = [c for c, _ in ranked[:5]]
        first = {c.id: s for c, s in ranked}
        for _ in range(k):
            found = store.own[[index[c.id] for c in out]]
            moved = alpha * q.vector + beta * found.mean(axis=0)
            moved = moved / np.linalg.norm(moved)
            again = retrieve(q, store, moved.astype(np.float32))
            returned = {c.id for c in out}
            scored = sorted(
                ((c, s + mix * first.get(c.id, 0.0)) for c, s in again if c.id not in returned),
                key=lambda cs: (-cs[1], cs[0].id),
            )
            out += [c for c, _ in scored[:5]]
        return out

    return run


def days(weight: float) -> Verifier:
    def run(q: Q, store: Store, ranked: list[tuple[Candidate, float]], k: int) -> list[Candidate]:
        from service.retrieval import verify as v

        covered: dict[Any, int] = {}
        out = [c for c, _ in ranked[:5]]
        for c in out:
            covered[v.day_of(c)] = covered.get(v.day_of(c), 0) + 1
        for _ in range(k):
            returned = {c.id for c in out}
            fresh = [(c, s) for c, s in ranked if c.id not in returned]
            out += ranking.spread(fresh, covered, v.day_of, 5, weight, cap=1)
        return out

    return run


def reweighted_passes(weights: ranking.Weights, then: Verifier | None = None) -> Verifier:
    """Passes ranked again under other ``weights`` (the first pass keeps today's), then
    picked by ``then`` (default: in that order)."""

    def run(q: Q, store: Store, ranked: list[tuple[Candidate, float]], k: int) -> list[Candidate]:
        out = [c for c, _ in ranked[:5]]
        again = ranking.scored(
            [c for c, _ in ranked], fuse_text=True, use_features=True, now=NOW,
            weights=weights, speaker=q.speaker, period=q.period,
        )  # fmt: skip
        if then is not None:
            first = {c.id for c in out}
            return (
                out
                + [c for c in then(q, store, first_then(again, first), k) if c.id not in first][
                    : 5 * k
                ]
            )
        returned = {c.id for c in out}
        return out + [c for c, _ in again if c.id not in returned][: 5 * k]

    return run


def away_then_shipped(beta: float) -> Verifier:
    """The shipped passes, drawn from a retrieval again with the query moved ``beta`` x
    the mean of the first pass's vectors (beta < 0: away from what was found)."""

    def run(q: Q, store: Store, ranked: list[tuple[Candidate, float]], k: int) -> list[Candidate]:
        first = [c for c, _ in ranked[:5]]
        index = {m: i for i, m in enumerate(store.ids)}
        found = np.mean([store.own[index[c.id]] for c in first], axis=0)
        moved = q.vector + np.float32(beta) * found
        again = retrieve(q, store, moved / np.linalg.norm(moved))
        order = pass_order(again, now=NOW, speaker=q.speaker, period=q.period)
        return verify_passes(first, order, 5, k)[0]

    return run


def speaker_retrieval(weight: float, share: float) -> Verifier:
    """Passes from a retrieval of the named speaker's memories alone (80 per arm of them:
    past the first retrieval's pool), merged with the first ranking (the speaker's
    memories' scores times ``1 / share``...: ``share`` 1 takes the speaker's ranking
    alone), then picked by found days x ``weight``; without a named speaker, today's."""

    def run(q: Q, store: Store, ranked: list[tuple[Candidate, float]], k: int) -> list[Candidate]:
        if q.speaker is None:
            return days(weight)(q, store, ranked, k)
        own = retrieve(q, store, q.vector, speaker=q.speaker)
        if share < 1:
            top_own = max((s for _, s in own), default=1.0) or 1.0
            top_all = max((s for _, s in ranked), default=1.0) or 1.0
            merged = {c.id: (c, share * s / top_own) for c, s in own}
            for c, s in ranked:
                mine = merged.get(c.id)
                score = (1 - share) * s / top_all + (mine[1] if mine else 0.0)
                merged[c.id] = (c, score)
            pool = sorted(merged.values(), key=lambda cs: (-cs[1], cs[0].id))
        else:
            pool = own
        first = {c.id for c, _ in ranked[:5]}
        out = [c for c, _ in ranked[:5]]
        pooled = {c.id for c, _ in pool}
        pool += [(c, s) for c, s in ranked[:5] if c.id not in pooled]
        picked = days(weight)(q, store, first_then(pool, first), k)
        return out + [c for c in picked if c.id not in first][: 5 * k]

    return run


def first_then(
    again: list[tuple[Candidate, float]], first: set[str]
) -> list[tuple[Candidate, float]]:
    """``again`` with the first pass's memories moved to the top (so that ``then`` sees them
    as found)."""
    top = max((s for _, s in again), default=0.0) + 1.0
    return sorted(((c, top if c.id in first else s) for c, s in again),
                  key=lambda cs: (-cs[1], cs[0].id))  # fmt: skip


def mmr(mu: float) -> Verifier:
    """Each further memory by its score minus ``mu`` x its best cosine to one returned."""

    def run(q: Q, store: Store, ranked: list[tuple[Candidate, float]], k: int) -> list[Candidate]:
        index = {m: i for i, m in enumerate(store.ids)}
        top = max(s for _, s in ranked)
        out = [c for c, _ in ranked[:5]]
        for _ in range(5 * k):
            found = store.own[[index[c.id] for c in out]]
            returned = {c.id for c in out}
            fresh = [(c, s) for c, s in ranked if c.id not in returned]
            if not fresh:
                break
            sims = store.own[[index[c.id] for c, _ in fresh]] @ found.T
            best = max(
                range(len(fresh)), key=lambda i: fresh[i][1] / top - mu * float(sims[i].max())
            )
            out.append(fresh[best][0])
        return out

    return run


def top(q: Q, store: Store, extra: Sequence[Matrix] = (), n: int = 10) -> list[Candidate]:
    return [c for c, _ in retrieve(q, store, q.vector, extra)][:n]


def keys_part(questions: list[Q], stores: dict[str, Store]) -> None:
    extra = make_keys(stores)
    print("| second key (the vector arm takes a memory's best) | R@10 by category |")
    print("|---|---|")
    arms: dict[str, dict[str, list[Matrix]]] = {}  # name -> store -> its memories' keys
    for kinds in (("previous",), ("next",), ("previous", "next"), ("window",), ("speaker-date",)):
        arms[f"text: {' + '.join(kinds)}"] = {s: [extra[s][k] for k in kinds] for s in stores}
    for w in (0.3, 0.5, 1.0):
        for near in (("prev",), ("prev", "next")):
            arms[f"vectors: own + {w} x {' + '.join(near)}"] = {
                s: [mixed(store, w, near)] for s, store in stores.items()
            }
    for name, keys_of in arms.items():
        r = [recall(q, stores[q.store], top(q, stores[q.store], keys_of[q.store]))
             for q in questions]  # fmt: skip
        print(f"| {name} | {by_category(questions, r)} |", flush=True)


def verify_part(questions: list[Q], stores: dict[str, Store]) -> None:
    multi = [q for q in questions if q.category == 1]
    ranked = {id(q): retrieve(q, stores[q.store], q.vector) for q in multi}
    arms: dict[str, Verifier] = {
        "before issue 36 (same days x 1.1)": days(1.1),
        "shipped (service.retrieval.verify)": shipped_verify,
    }
    for beta in (-0.4, -0.2, 0.5, 1.0, 2.0):
        arms[f"Rocchio, beta {beta}"] = rocchio(1.0, beta)
    for beta, mix in ((1.0, 0.5), (1.0, 1.0)):
        arms[f"Rocchio, beta {beta}, + {mix} x first score"] = rocchio(1.0, beta, mix)
    for w in (0.5, 0.8, 0.9, 1.3):
        arms[f"same days x {w}"] = days(w)
    for mu in (0.1, 0.2, 0.4, 0.7):
        arms[f"MMR, mu {mu}"] = mmr(mu)
    for speaker in (0.8, 1.5, 3.0):
        arms[f"passes: named speaker x {1 + speaker}"] = reweighted_passes(
            replace(ranking.DEFAULT_WEIGHTS, speaker=speaker)
        )
    for text, neighbour in itertools.product((0.5, 1.0, 1.5), (0.0, 0.3, 0.6)):
        arms[f"passes: named speaker x 2.5, text {text}, neighbour {neighbour}"] = (
            reweighted_passes(ranking.Weights(text, 1.5, neighbour))
        )
    favoured = replace(ranking.DEFAULT_WEIGHTS, speaker=1.5)
    for w in (1.1, 1.3):
        arms[f"passes: named speaker x 2.5, then same days x {w}"] = reweighted_passes(
            favoured, days(w)
        )
    for mu in (0.2, 0.4):
        arms[f"passes: named speaker x 2.5, then MMR mu {mu}"] = reweighted_passes(
            favoured, mmr(mu)
        )
    for w, share in itertools.product((1.0, 1.1, 1.3), (1.0, 0.6)):
        arms[f"passes: the named speaker's own retrieval, same days x {w}, share {share}"] = (
            speaker_retrieval(w, share)
        )
    for beta in (-0.1, -0.2, -0.3, -0.5):
        arms[f"shipped passes over a retrieval moved away from the first pass, beta {beta}"] = (
            away_then_shipped(beta)
        )
    print("| verify on multi-hop, 5 per pass | k=1 (10 results) | k=2 (15 results) |")
    print("|---|---|---|")
    plain = [
        statistics.fmean(recall(q, stores[q.store], [c for c, _ in ranked[id(q)][:n]])
                         for q in multi)
        for n in (10, 15)
    ]  # fmt: skip
    print(f"| plain retrieval of as many | {plain[0]:.4f} | {plain[1]:.4f} |")
    for name, verifier in arms.items():
        got = [
            statistics.fmean(
                recall(q, stores[q.store], verifier(q, stores[q.store], ranked[id(q)], k))
                for q in multi
            )
            for k in (1, 2)
        ]
        print(f"| {name} | {got[0]:.4f} | {got[1]:.4f} |", flush=True)


def verify_folds(questions: list[Q], stores: dict[str, Store]) -> None:
    """The re-weighted passes, tuned leave one conversation out: for each conversation,
    the setting with the best mean gain over plain retrieval (k = 1 and 2) on the other
    seven is scored on it."""
    multi = [q for q in questions if q.category == 1]
    ranked = {id(q): retrieve(q, stores[q.store], q.vector) for q in multi}
    grid = {
        (speaker, text, w): reweighted_passes(
            replace(ranking.DEFAULT_WEIGHTS, speaker=speaker, text=text), days(w)
        )
        for speaker, text, w in itertools.product(
            (0.8, 1.5, 3.0, 5.0), (1.0, 1.5), (1.0, 1.1, 1.3, 1.6, 2.0)
        )
    }
    ks = (1, 2, 3)

    def gains(verifier: Verifier) -> dict[int, list[float]]:
        return {
            k: [recall(q, stores[q.store], verifier(q, stores[q.store], ranked[id(q)], k))
                - recall(q, stores[q.store], [c for c, _ in ranked[id(q)][: 5 * (k + 1)]])
                for q in multi]
            for k in ks
        }  # fmt: skip

    scored = {setting: gains(verifier) for setting, verifier in grid.items()}
    names = sorted(stores)
    held: dict[int, list[float]] = {k: [] for k in ks}
    chosen = []
    for name in names:
        train = [i for i, q in enumerate(multi) if q.store != name]
        test = [i for i, q in enumerate(multi) if q.store == name]
        best = max(grid, key=lambda s: sum(scored[s][k][i] for k in (1, 2) for i in train))
        chosen.append(f"{name} {best}")
        for k in ks:
            held[k] += [scored[best][k][i] for i in test]
    plain = {k: statistics.fmean(
        recall(q, stores[q.store], [c for c, _ in ranked[id(q)][: 5 * (k + 1)]]) for q in multi)
        for k in ks}  # fmt: skip
    print("| verify, re-weighted passes, LOO | k=1 | k=2 | k=3 |")
    print("|---|---|---|---|")
    print("| plain retrieval of as many | " + " | ".join(f"{plain[k]:.4f}" for k in ks) + " |")
    print(
        "| gain, held-out folds | "
        + " | ".join(f"{statistics.fmean(held[k]):+.4f}" for k in ks)
        + " |"
    )
    for setting in ((1.5, 1.0, 1.1), (1.5, 1.0, 1.3), (3.0, 1.0, 1.3)):
        gained = " | ".join(f"{statistics.fmean(scored[setting][k]):+.4f}" for k in ks)
        print(f"| gain in-sample, speaker {setting[0]} text {setting[1]} days {setting[2]} | "
              f"{gained} |")  # fmt: skip
    print("\nchosen (speaker, text, days):", "; ".join(chosen))


PARTS = ("keys", "verify", "verify-folds", "fusion")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fetch", action="store_true", help="write LoCoMo and cache it")
    parser.add_argument("--part", choices=PARTS, action="append", help="default: all")
    args = parser.parse_args()
    if args.fetch:
        asyncio.run(fetch())
        return
    questions, stores = load_cache()
    today = [recall(q, stores[q.store], top(q, stores[q.store])) for q in questions]
    print("today's ranking, simulated: R@10", by_category(questions, today), "\n")
    parts = {"keys": keys_part, "verify": verify_part, "verify-folds": verify_folds,
             "fusion": fusion_lab}  # fmt: skip
    for name in args.part or PARTS:
        parts[name](questions, stores)
        print()


# --- learned fusion ------------------------------------------------------------------------

FEATURES = ("cos", "bm25", "in_vec", "in_text", "speaker", "period", "borrowed", "rvec", "rtext",
            "cos_raw")  # fmt: skip


def feature_rows(q: Q, store: Store) -> tuple[list[Candidate], npt.NDArray[np.float64]]:
    """The pool of a 20-result retrieval and each candidate's features."""
    ranked = retrieve(q, store, q.vector)
    cands = [c for c, _ in ranked]
    fused = dict((c.id, s) for c, s in ranking.fused(cands, fuse_text=True))
    borrowed = ranking._borrowed([(c, fused[c.id]) for c in cands], ranking.DEFAULT_WEIGHTS)
    cosines = [c.cosine or 0.0 for c in cands]
    low, high = min(cosines), max(cosines)
    best = max((c.fts_rank or 0.0 for c in cands), default=0.0) or 1.0
    vec_order = sorted((c for c in cands if c.in_vec), key=lambda c: -(c.cosine or 0))
    txt_order = sorted((c for c in cands if c.fts_rank), key=lambda c: -(c.fts_rank or 0))
    rv = {c.id: i for i, c in enumerate(vec_order)}
    rt = {c.id: i for i, c in enumerate(txt_order)}
    rows = []
    for c in cands:
        rows.append([
            ((c.cosine or 0) - low) / (high - low or 1), (c.fts_rank or 0) / best,
            float(c.in_vec), float(c.fts_rank is not None),
            float(q.speaker is not None and c.speaker == q.speaker),
            float(q.period is not None and q.period.holds(c.event_date)),
            borrowed.get(c.id, 0.0), 1 / (5 + rv[c.id]) if c.id in rv else 0.0,
            1 / (5 + rt[c.id]) if c.id in rt else 0.0, c.cosine or 0.0,
        ])  # fmt: skip
    return cands, np.array(rows)


def fusion_lab(questions: list[Q], stores: dict[str, Store]) -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression

    pools = [feature_rows(q, stores[q.store]) for q in questions]
    labels = [np.array([stores[q.store].dia.get(c.id) in q.evidence for c in cands])
              for q, (cands, _) in zip(questions, pools, strict=True)]  # fmt: skip
    names = sorted(stores)
    makers: dict[str, Callable[[], Any]] = {
        "logistic regression": lambda: LogisticRegression(C=1.0, max_iter=2000),
        "gradient-boosted trees (depth 3, 100)": lambda: HistGradientBoostingClassifier(
            max_depth=3, max_iter=100, learning_rate=0.1
        ),
    }
    print("| learned fusion over the ranking's features | LOO R@10 by category |")
    print("|---|---|")
    for model_name, make in makers.items():
        got = [0.0] * len(questions)
        for held in names:
            train = [i for i, q in enumerate(questions) if q.store != held and q.category <= 4]
            x = np.vstack([pools[i][1] for i in train])
            y = np.concatenate([labels[i] for i in train])
            model = make().fit(x, y)
            for i, q in enumerate(questions):
                if q.store != held:
                    continue
                cands, feats = pools[i]
                p = model.predict_proba(feats)[:, 1]
                order = sorted(range(len(cands)), key=lambda j: (-p[j], cands[j].id))
                got[i] = recall(q, stores[q.store], [cands[j] for j in order[:10]])
        print(f"| {model_name} | {by_category(questions, got)} |", flush=True)


if __name__ == "__main__":
    # Run as the module bench.recall_lab, not as __main__: the classes in a cache are pickled by
    # their module's name, and so load from any script that imports this one.
    from bench import recall_lab

    recall_lab.main()
