/** The Memory Store face: `/api/v1/forward/memory_stores` (seed 003). */

import { type Call, type Page, done, seg } from "./call.js";
import { type Json, type Store, type StoreMemory, store, storeMemory } from "./records.js";

const BASE = "/api/v1/forward/memory_stores";
const STORES_PAGE = "100";

const memories = (storeId: string): string => `${BASE}/${seg(storeId)}/memories`;

/** The next page's call, from the seed's `has_more` and `last_id`. */
function nextOf<T>(body: Json, make: (afterId: string) => Call<Page<T>>): Call<Page<T>> | null {
  return body.has_more && typeof body.last_id === "string" ? make(body.last_id) : null;
}

export interface StoreOptions {
  description?: string;
  /** Up to 16 string keys and values. */
  metadata?: Record<string, string>;
  /** Its searches leave out `created_at` and `time_bucket`. */
  stripTemporal?: boolean;
}

export function create(name: string, options: StoreOptions): Call<Store> {
  const body = {
    name, description: options.description, metadata: options.metadata,
    strip_temporal: options.stripTemporal,
  };
  return { method: "POST", path: BASE, parse: store, body, write: true };
}

export function listPage(afterId?: string): Call<Page<Store>> {
  const parse = (body: Json): Page<Store> => ({
    items: (body.data as Json[]).map(store),
    next: nextOf(body, listPage),
  });
  const params: Record<string, string> = { limit: STORES_PAGE };
  if (afterId !== undefined) params.after_id = afterId;
  return { method: "GET", path: BASE, parse, params };
}

export function get(storeId: string): Call<Store> {
  return { method: "GET", path: `${BASE}/${seg(storeId)}`, parse: store };
}

export function remove(storeId: string, force: boolean): Call<void> {
  const params = force ? { force: "true" } : undefined;
  return { method: "DELETE", path: `${BASE}/${seg(storeId)}`, parse: done, params, write: true };
}

export function write(
  storeId: string,
  path: string,
  content: string,
  metadata?: Record<string, string>,
): Call<StoreMemory> {
  const body = { path, content, metadata };
  return { method: "POST", path: memories(storeId), parse: storeMemory, body, write: true };
}

export function read(storeId: string, memoryId: string): Call<StoreMemory> {
  return { method: "GET", path: `${memories(storeId)}/${seg(memoryId)}`, parse: storeMemory };
}

export interface StoreMemoryUpdate {
  content?: string;
  /** A path never changes: a different one is refused (`InvalidRequestError`). */
  path?: string;
  /** Update only if the stored content still has this hash (`ConflictError` if not). */
  contentSha256?: string;
  /** Up to 16 string keys and values, replacing the stored ones. */
  metadata?: Record<string, string>;
}

export function update(
  storeId: string,
  memoryId: string,
  change: StoreMemoryUpdate,
): Call<StoreMemory> {
  const body = {
    content: change.content, path: change.path, content_sha256: change.contentSha256,
    metadata: change.metadata,
  };
  const path = `${memories(storeId)}/${seg(memoryId)}`;
  return { method: "POST", path, parse: storeMemory, body, write: true };
}

export interface ListMemoriesOptions {
  /** A plain string prefix: `a/b` also matches `a/bc.md`. */
  pathPrefix?: string;
  /** Memories per page, 1 to 100 (default 20). */
  limit?: number;
}

/** A page of a store's path memories, by path; items carry no content. */
export function listMemories(
  storeId: string,
  options: ListMemoriesOptions,
  afterId?: string,
): Call<Page<StoreMemory>> {
  const parse = (body: Json): Page<StoreMemory> => ({
    items: (body.data as Json[]).map(storeMemory),
    next: nextOf(body, (after) => listMemories(storeId, options, after)),
  });
  const params: Record<string, string> = {};
  if (options.pathPrefix !== undefined) params.path_prefix = options.pathPrefix;
  if (options.limit !== undefined) params.limit = String(options.limit);
  if (afterId !== undefined) params.after_id = afterId;
  return { method: "GET", path: memories(storeId), parse, params };
}
