"""Search face (seed 002, SPEC §3.3): ``POST /api/v1/memory/search``, and the usage it bills.

One module per job: ``models`` (the memory models and what each serves), ``request``
(parsing and validation), ``handler`` (the store, then the answer from the cache or by
retrieval, billed), ``cache`` (the answer cache), ``retrieve`` (the retrievals, through
``service.retrieval.snapshots`` or ``service.queries.search``, ranked by
``service.retrieval.ranking``, with ``service.retrieval.verify``'s passes, then rendered),
``render`` (the wire shape), ``billing`` (units), ``usage`` (``GET /api/v1/usage``).
"""

from service.faces.search.handler import prefetch, search
from service.faces.search.usage import get_usage

__all__ = ["get_usage", "prefetch", "search"]
