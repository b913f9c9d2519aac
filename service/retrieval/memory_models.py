"""The memory models of the search face (SPEC §3.3) and what each may serve.

``X-WOS-Model`` picks one (case-insensitive, spaces or dashes); a feature a model cannot
serve is refused with a 403 naming it (``request.parse_request``).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.problems import Invalid


@dataclass(frozen=True)
class MemoryModel:
    name: str
    fuse_text: bool  # hybrid: vector + full text
    features: bool  # importance, recency, proof count, supersession
    default_max_results: int
    form: bool
    verify: bool
    images: bool
    self_apart: bool  # self_memories kept apart from memories


MODELS = {
    "tablet-2": MemoryModel("Tablet 2", True, True, 20, True, True, True, True),
    "scroll-1.2": MemoryModel("Scroll 1.2", True, False, 15, True, False, False, False),
    "scroll-1.1": MemoryModel("Scroll 1.1", False, False, 15, False, False, False, False),
}
DEFAULT_MODEL = "tablet-2"


def pick_model(header: str | None) -> MemoryModel:
    if header is None or not header.strip():
        return MODELS[DEFAULT_MODEL]
    key = "-".join(header.strip().lower().split())
    model = MODELS.get(key)
    if model is None:
        names = [m.name for m in MODELS.values()]
        # The header's value is not repeated: header values never appear in a body.
        raise Invalid(
            f"Unknown memory model in X-WOS-Model; known models: {', '.join(names)}", valid=names
        )
    return model
