"""Search face (seed 002, SPEC §3.3): ``POST /api/v1/memory/search``, and the usage it bills.

One module per job: ``models`` (the memory models and what each serves), ``request``
(parsing and validation), ``handler`` (store, cache, retrieval through
``service.queries.search`` and ``service.retrieval.ranking``), ``verify`` (further passes),
``render`` (the wire shape), ``billing`` (units and the cache key), ``usage``
(``GET /api/v1/usage``).
"""

from service.faces.search.handler import prefetch, search
from service.faces.search.usage import get_usage

__all__ = ["get_usage", "prefetch", "search"]
