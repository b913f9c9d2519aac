"""The registered speaker a search's query names (``ranking.named_speaker``), in time that
depends on the query and not on how many speakers the store has.

Matching each speaker's name with a regex of its own took 5.1 s a search at 20,000
speakers (issue 59). ``SpeakerMatcher`` is one dictionary from each name, case-folded, to
its speakers, and looks up the runs of the query's words; ``SpeakerNames`` keeps each
store's matcher in this process for as long as the store's set of speakers is unchanged
(its ``speakers_version``, 0027_speakers_version.sql), so a memory written to the store
does not make the next search read every speaker again.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import re
from collections import OrderedDict
from collections.abc import Iterable

import asyncpg

from service.queries import search as search_sql

# A speaker every store has: the agent itself. "me" in a question is the asker, not it.
SELF = "me"

# A word (a run of \w, as the regex's (?<!\w) and (?!\w) bound a name) or one other
# character: a name occurs in a query only as a run of whole tokens.
_TOKEN = re.compile(r"\w+|\W")
_WORD = re.compile(r"\w")
# Matchers held in all (in speakers' names); the least recently used store goes first.
MAX_NAMES = 200_000
# A matcher of more names than this is built off the event loop.
BUILD_INLINE = 1_000


def _regex_equivalents() -> dict[str, str]:
    """Characters that re.IGNORECASE takes as one beyond their lower case (the Greek
    sigmas, s and the long s, i and the dotless i…), each to one of its class: the regex
    engine's own table, where it has one."""
    try:
        extra = importlib.import_module("re._casefix")._EXTRA_CASES
    except (ImportError, AttributeError):  # another Python: only lower case then
        return {}
    return {chr(low): chr(min(low, *others)) for low, others in dict(extra).items()}


_EQUIVALENT = str.maketrans(_regex_equivalents())


@functools.lru_cache(maxsize=4096)
def _fold_char(c: str) -> str:
    # The simple lower case, as the regex compares (İ's full one is i and a combining dot).
    return c.lower()[:1].translate(_EQUIVALENT)


def _fold(token: str) -> str:
    """``token`` as re.IGNORECASE compares it: one character for each of its characters."""
    if token.isascii():
        return token.lower()
    return "".join(_fold_char(c) for c in token)


class SpeakerMatcher:
    """The one speaker of ``speakers`` a query names, found as the regex
    ``(?<!\\w)NAME(?!\\w)`` with re.IGNORECASE would find each: whole words in any case,
    the characters between them (spaces, dots) as written, a name of several words too."""

    def __init__(self, speakers: Iterable[str]) -> None:
        self._named: dict[str, list[str]] = {}  # a folded name -> the speakers it names
        self._starts: set[str] = set()  # the first tokens of a name of several, folded
        self.size = 0
        for speaker in speakers:
            if speaker == SELF or not speaker:
                continue
            tokens = [_fold(t) for t in _TOKEN.findall(speaker)]
            self._named.setdefault("".join(tokens), []).append(speaker)
            self._starts.update("".join(tokens[:n]) for n in range(1, len(tokens)))
            self.size += 1

    def named(self, query: str) -> str | None:
        """The speaker ``query`` names, or ``None`` when it names none or several ("me"
        never counts: in a question it is the asker)."""
        tokens = _TOKEN.findall(query)
        folded = [_fold(t) for t in tokens]
        word = [_WORD.match(t) is not None for t in tokens]
        found: dict[str, None] = {}  # the folded names found, each once
        named = 0
        for start in range(len(tokens)):
            if not word[start] and start > 0 and word[start - 1]:
                continue  # (?<!\w): a name that starts with a sign, right after a word
            key = ""
            for end in range(start, len(tokens)):
                key += folded[end]
                ends = word[end] or end + 1 == len(tokens) or not word[end + 1]  # (?!\w)
                if ends and key in self._named and key not in found:
                    found[key] = None
                    named += len(self._named[key])
                    if named > 1:
                        return None
                if key not in self._starts:
                    break
        return self._named[next(iter(found))][0] if named == 1 else None


class SpeakerNames:
    """Each store's ``SpeakerMatcher``, at the version of its speakers it was built for;
    ``max_names`` names held in all."""

    def __init__(self, max_names: int = MAX_NAMES) -> None:
        self.max_names = max_names
        self._held: OrderedDict[tuple[str, str], tuple[int, SpeakerMatcher]] = OrderedDict()
        self._building: dict[tuple[str, str, int], asyncio.Future[SpeakerMatcher]] = {}

    async def matcher(
        self, pool: asyncpg.Pool, workspace_id: str, store_id: str, version: int
    ) -> SpeakerMatcher:
        """The store's matcher for speakers at ``version``: held, or read and built once
        however many searches ask for it at the same time."""
        key = (workspace_id, store_id)
        held = self._held.get(key)
        if held is not None and held[0] == version:
            self._held.move_to_end(key)
            return held[1]
        at = (workspace_id, store_id, version)
        building = self._building.get(at)
        if building is None:
            building = asyncio.ensure_future(self._build(pool, key))
            self._building[at] = building
            building.add_done_callback(functools.partial(self._built, at))
        # Shielded: a search that goes away does not cancel the build others wait for.
        return await asyncio.shield(building)

    def _built(self, at: tuple[str, str, int], building: asyncio.Future[SpeakerMatcher]) -> None:
        del self._building[at]
        if not building.cancelled():
            building.exception()  # retrieved: the searches that waited have raised it

    def held(self, workspace_id: str, store_id: str) -> tuple[int, SpeakerMatcher] | None:
        """The store's matcher held now, with the version of its speakers."""
        return self._held.get((workspace_id, store_id))

    async def _build(self, pool: asyncpg.Pool, key: tuple[str, str]) -> SpeakerMatcher:
        version, names = await search_sql.speaker_set(pool, *key)
        if len(names) > BUILD_INLINE:
            matcher = await asyncio.to_thread(SpeakerMatcher, names)
        else:
            matcher = SpeakerMatcher(names)
        self._keep(key, version, matcher)
        return matcher

    def _keep(self, key: tuple[str, str], version: int, matcher: SpeakerMatcher) -> None:
        self._held[key] = (version, matcher)
        self._held.move_to_end(key)
        total = sum(m.size for _, m in self._held.values())
        while total > self.max_names and len(self._held) > 1:
            _, (_, gone) = self._held.popitem(last=False)
            total -= gone.size
