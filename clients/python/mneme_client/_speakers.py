"""A store's registered speakers: ``/api/v1/stores/{store}/speakers``. A memory's
``speaker`` (and search's) must be one of them, or ``me``, which always is."""

from __future__ import annotations

from mneme_client._call import Call, done, seg
from mneme_client._types import Json


def _base(store: str) -> str:
    return f"/api/v1/stores/{seg(store)}/speakers"


def list_(store: str) -> Call[list[str]]:
    def parse(body: Json) -> list[str]:
        return [str(s["name"]) for s in body["data"]]

    return Call("GET", _base(store), parse)


def add(store: str, name: str) -> Call[str]:
    return Call("POST", _base(store), lambda body: str(body["name"]), json={"name": name},
                write=True)  # fmt: skip


def remove(store: str, name: str) -> Call[None]:
    return Call("DELETE", f"{_base(store)}/{seg(name)}", done, write=True)
