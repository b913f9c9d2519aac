"""Python SDK for Mneme: ``Mneme`` (blocking) and ``AsyncMneme`` (asyncio).

from mneme_client import Mneme

with Mneme() as client:  # MNEME_API_KEY, MNEME_URL
    client.add("Dave prefers squash merges.", fact_type="world")
    for hit in client.search("default", "how does Dave merge?"):
        print(hit.kind, hit.content)
"""

from mneme_client._async import AsyncMneme, AsyncSpeakers, AsyncStores
from mneme_client._client import VERSION as __version__
from mneme_client._errors import (
    APIError,
    AuthenticationError,
    ConflictError,
    InvalidRequestError,
    MnemeError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
)
from mneme_client._sync import Mneme, Speakers, Stores
from mneme_client._types import Hit, Memory, SearchResult, Store, StoreMemory, Version

__all__ = [
    "APIError",
    "AsyncMneme",
    "AsyncSpeakers",
    "AsyncStores",
    "AuthenticationError",
    "ConflictError",
    "Hit",
    "InvalidRequestError",
    "Memory",
    "Mneme",
    "MnemeError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "SearchResult",
    "Speakers",
    "Store",
    "StoreMemory",
    "Stores",
    "Version",
    "__version__",
]
