"""Search face (seed 002, SPEC §3.3): ``POST /api/v1/memory/search``, and the usage it bills.

``request`` parses and validates; ``handler`` makes one call into the search engine
(``service.retrieval.engine``: the store, the answer cache or retrieval, billing) and
renders its answer; ``usage`` is ``GET /api/v1/usage``.
"""

from service.faces.search.handler import prefetch, search
from service.faces.search.usage import get_usage

__all__ = ["get_usage", "prefetch", "search"]
