"""What a search costs (SPEC §3.3 usage and cache_control).

Query tokens at 1x (2x / 3x when writing a 5 m / 1 h cache entry, 0.1x on a hit), plus
the result tokens delivered (0.1x on a hit).
"""

from __future__ import annotations

from embeddings import Embedder
from embeddings.batcher import QueryEncoder
from service.queries.search import Candidate

WRITE_RATE = {"5m": 2.0, "1h": 3.0}
HIT_RATE = 0.1


def result_tokens_of(delivered: list[Candidate], embedder: Embedder) -> int:
    """Tokens of the delivered results' content: as the worker counted them when it
    embedded each memory, and counted here (one tokenizer call) for any it has not yet."""
    counted = sum(c.text_tokens for c in delivered if c.text_tokens is not None)
    uncounted = [c.text for c in delivered if c.text_tokens is None]
    return counted + sum(embedder.count_tokens_many(uncounted))


def query_tokens_of(queries: QueryEncoder, embedder: Embedder, query: str) -> int:
    """The query's tokens: counted with its encoding, off the event loop, if it was
    encoded; else here."""
    counted = queries.tokens(query)
    return embedder.count_tokens(query) if counted is None else counted


def hit_units(query_tokens: int, result_tokens: int) -> float:
    """A cache hit: the query and the cached results at the hit rate."""
    return HIT_RATE * (query_tokens + result_tokens)


def miss_units(query_tokens: int, result_tokens: int) -> float:
    """A search without cache_control."""
    return query_tokens + result_tokens


def write_units(ttl: str, query_tokens: int, result_tokens: int, prefix_tokens: int) -> float:
    """A search that writes a cache entry for ``ttl``: the query at the write rate but for
    ``prefix_tokens`` (the part a previous entry's query already held) at the hit rate. The
    tokenizer does not add up ("alice drin" is more tokens than "alice drink"), so the
    cached part is at most the whole query and the new part never below nothing."""
    cached = min(prefix_tokens, query_tokens)
    return HIT_RATE * cached + WRITE_RATE[ttl] * (query_tokens - cached) + result_tokens
