"""Embeddings: the ``Embedder`` protocol that the service and the worker program against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into unit-length vectors of a fixed dimension."""

    name: str
    dimension: int

    def encode_queries(self, texts: Sequence[str]) -> Vectors: ...

    def encode_documents(self, texts: Sequence[str]) -> Vectors: ...
