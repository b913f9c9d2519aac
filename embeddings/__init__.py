"""Embeddings: the ``Embedder`` protocol that the service and the worker program against.

``embeddings`` never imports ``service``: the worker owns the few SQL statements of the
queue it drains, and everything else reaches it through this protocol.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


# How the model runs (SentenceTransformerEmbedder's ``backend``; MNEME_EMBEDDING_BACKEND).
BACKENDS = ("auto", "onnx", "onnx-int8", "torch")


@dataclass(frozen=True)
class Chunk:
    """A window of a text, as character offsets, that fits the model in one pass."""

    start: int
    end: int


class Embedder(Protocol):
    """Turns texts into unit-length vectors of a fixed dimension."""

    name: str
    dimension: int

    def encode_queries(self, texts: Sequence[str]) -> Vectors: ...

    def encode_queries_counted(self, texts: Sequence[str]) -> tuple[Vectors, list[int]]:
        """``encode_queries`` and ``count_tokens_many`` at once: what a search needs of
        its query, in as few tokenizer passes as the model allows."""
        ...

    def encode_documents(self, texts: Sequence[str]) -> Vectors: ...

    def chunk_many(self, texts: Sequence[str]) -> list[list[Chunk]]:
        """For each text, windows covering it: one when it fits the model's window."""
        ...

    def count_tokens(self, text: str) -> int: ...

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        """Token counts of several texts in one tokenizer call."""
        ...


def document_text(text: str, speaker: str | None) -> str:
    """What gets embedded for a memory: the speaker's name leads what they said.

    On conversational data "Caroline: I went to the support group" is found by
    "what did Caroline do" far more reliably than the bare sentence. The agent's own
    words (speaker ``me``) and untagged memories are embedded as they are.
    """
    if speaker and speaker != "me":
        return f"{speaker}: {text}"
    return text
