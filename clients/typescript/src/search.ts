/** `POST /api/v1/memory/search` as seed 002's SDK methods: search, searchFull,
 * searchSelf. */

import type { Call } from "./call.js";
import { type SearchOptions, snakeKeys } from "./fields.js";
import { type Hit, type Json, type SearchResult, searchResult } from "./records.js";

const PATH = "/api/v1/memory/search";
const DEFAULT_MAX_RESULTS = 10; // the seed: SDKs send 10 unless told

function call<T>(
  userId: string,
  query: string,
  options: SearchOptions,
  parse: (body: Json) => T,
): Call<T> {
  const { model, maxResults, filters, ...rest } = options;
  const body = {
    user_id: userId,
    query,
    max_results: maxResults ?? DEFAULT_MAX_RESULTS,
    ...snakeKeys(rest),
    ...(filters === undefined ? {} : { filters: snakeKeys(filters) }),
  };
  const headers = model === undefined ? undefined : { "X-WOS-Model": model };
  return { method: "POST", path: PATH, parse, body, headers };
}

/** No id twice, the first kept. */
function unseen(hits: Hit[]): Hit[] {
  const seen = new Set<string>();
  return hits.filter((h) => {
    if (seen.has(h.id)) return false;
    seen.add(h.id);
    return true;
  });
}

export function full(userId: string, query: string, options: SearchOptions): Call<SearchResult> {
  return call(userId, query, options, searchResult);
}

/** Memories, then the agent's own words, then images; no id twice, no verifyUsed. */
export function oneList(userId: string, query: string, options: SearchOptions): Call<Hit[]> {
  return call(userId, query, options, (body) => {
    const r = searchResult(body);
    return unseen([...r.memories, ...r.selfMemories, ...r.images]);
  });
}

/** Only the agent's own words (speaker `me`). Tablet 2 answers them in `self_memories`;
 * models that keep them in `memories` answer only those there. */
export function ownWords(userId: string, query: string, options: SearchOptions): Call<Hit[]> {
  const narrowed: SearchOptions = { ...options, speaker: "me", maxImages: 0 };
  return call(userId, query, narrowed, (body) => {
    const r = searchResult(body);
    return unseen([...r.selfMemories, ...r.memories]).map((h) => ({ ...h, kind: "self" }));
  });
}
