/** What the API answers, as small typed records; `raw` keeps the whole JSON object. */

export type Json = Readonly<Record<string, unknown>>;

/** A memory of the write API or browse (browse items carry no store, speaker or
 * embedding status: those are null). */
export interface Memory {
  readonly id: string;
  readonly text: string;
  readonly store: string | null;
  readonly scope: string;
  readonly factType: string | null;
  readonly speaker: string | null;
  /** `pending` until the worker has embedded it, then `ready` (or `failed`). */
  readonly embeddingStatus: string | null;
  readonly raw: Json;
}

/** One entry of a memory's audit trail. */
export interface Version {
  readonly id: string;
  readonly operation: string;
  readonly actor: string | null;
  readonly contentSha256: string | null;
  readonly path: string | null;
  readonly status: string;
  readonly createdAt: string;
  readonly raw: Json;
}

export type HitKind = "memory" | "self" | "image";

/** A search result: a memory, the agent's own words (`self`) or an image memory. Hits
 * come best first; `similarity` is not the ranking key. */
export interface Hit {
  readonly id: string;
  readonly content: string;
  readonly kind: HitKind;
  readonly similarity: number;
  readonly raw: Json;
}

/** A whole search answer; `verifyUsed` is undefined unless `verify` > 0 was sent. */
export interface SearchResult {
  readonly memories: Hit[];
  readonly selfMemories: Hit[];
  readonly images: Hit[];
  readonly verifyUsed: number | undefined;
  readonly raw: Json;
}

/** A memory store. */
export interface Store {
  readonly id: string;
  readonly name: string;
  readonly description: string;
  readonly raw: Json;
}

/** A path-addressed memory of a store; `content` is null in listings. */
export interface StoreMemory {
  readonly id: string;
  readonly path: string;
  readonly content: string | null;
  readonly contentSha256: string;
  readonly metadata: Record<string, string>;
  readonly raw: Json;
}

// The service's answers are trusted to have the documented shape; an absent field is null.
const str = (raw: Json, key: string): string => raw[key] as string;
const orNull = (raw: Json, key: string): string | null =>
  (raw[key] as string | null | undefined) ?? null;

export function memory(raw: Json): Memory {
  return {
    id: str(raw, "id"),
    text: str(raw, "text"),
    store: orNull(raw, "store"),
    scope: str(raw, "scope"),
    factType: orNull(raw, "factType"),
    speaker: orNull(raw, "speaker"),
    embeddingStatus: orNull(raw, "embeddingStatus"),
    raw,
  };
}

export function version(raw: Json): Version {
  return {
    id: str(raw, "id"),
    operation: str(raw, "operation"),
    actor: orNull(raw, "actor"),
    contentSha256: orNull(raw, "content_sha256"),
    path: orNull(raw, "path"),
    status: str(raw, "status"),
    createdAt: str(raw, "created_at"),
    raw,
  };
}

export function hit(raw: Json, kind: HitKind): Hit {
  return {
    id: str(raw, "id"),
    content: str(raw, "content"),
    kind,
    similarity: raw.similarity as number,
    raw,
  };
}

export function searchResult(raw: Json): SearchResult {
  const hits = (key: string, kind: HitKind): Hit[] =>
    ((raw[key] as Json[] | undefined) ?? []).map((h) => hit(h, kind));
  return {
    memories: hits("memories", "memory"),
    selfMemories: hits("self_memories", "self"),
    images: hits("images", "image"),
    verifyUsed: raw.verify_used as number | undefined,
    raw,
  };
}

export function store(raw: Json): Store {
  return {
    id: str(raw, "id"),
    name: str(raw, "name"),
    description: orNull(raw, "description") ?? "",
    raw,
  };
}

export function storeMemory(raw: Json): StoreMemory {
  return {
    id: str(raw, "id"),
    path: str(raw, "path"),
    content: orNull(raw, "content"),
    contentSha256: str(raw, "content_sha256"),
    metadata: (raw.metadata as Record<string, string> | null | undefined) ?? {},
    raw,
  };
}
