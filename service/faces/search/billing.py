"""What a search costs and how its answer is cached (SPEC §3.3 usage and cache_control).

Query tokens at 1x (2x / 3x when writing a 5 m / 1 h cache entry, 0.1x on a hit), plus
the result tokens delivered.
"""

from __future__ import annotations

import hashlib

import msgspec

from embeddings import Embedder
from service.faces.search.request import SearchRequest
from service.queries.search import Candidate


def result_tokens_of(delivered: list[Candidate], embedder: Embedder) -> int:
    """Tokens of the delivered results' content: as the worker counted them when it
    embedded each memory, and counted here (one tokenizer call) for any it has not yet."""
    counted = sum(c.text_tokens for c in delivered if c.text_tokens is not None)
    uncounted = [c.text for c in delivered if c.text_tokens is None]
    return counted + sum(embedder.count_tokens_many(uncounted))


WRITE_RATE = {"5m": 2.0, "1h": 3.0}
TTL_S = {"5m": 300.0, "1h": 3600.0}


def options_key(req: SearchRequest) -> bytes:
    """Every request option except the query and cache_control."""
    options = {
        "max_results": req.max_results, "speaker": req.speaker, "filters": req.filters,
        "form": req.form, "tz": req.tz, "max_images": req.max_images, "verify": req.verify,
    }  # fmt: skip
    return hashlib.sha256(msgspec.json.encode(options, enc_hook=str)).digest()
