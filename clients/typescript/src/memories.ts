/** The write API and browse: `/api/v1/memories`. */

import { type Call, type Page, done, seg } from "./call.js";
import {
  type BrowseFilters,
  type MemoryFields,
  type MemoryInput,
  type MemoryUpdate,
  query,
} from "./fields.js";
import { type Json, type Memory, type Version, memory, version } from "./records.js";

const BASE = "/api/v1/memories";

export function add(text: string, fields: MemoryFields): Call<Memory> {
  return { method: "POST", path: BASE, parse: memory, body: { ...fields, text }, write: true };
}

export function addMany(items: readonly MemoryInput[]): Call<Memory[]> {
  const parse = (body: Json): Memory[] => (body.memories as Json[]).map(memory);
  return { method: "POST", path: BASE, parse, body: { memories: items }, write: true };
}

export function get(id: string): Call<Memory> {
  return { method: "GET", path: `${BASE}/${seg(id)}`, parse: memory };
}

export function update(id: string, fields: MemoryUpdate): Call<Memory> {
  return { method: "PATCH", path: `${BASE}/${seg(id)}`, parse: memory, body: fields, write: true };
}

export function remove(id: string, purge: boolean): Call<void> {
  const params = purge ? { purge: "true" } : undefined;
  return { method: "DELETE", path: `${BASE}/${seg(id)}`, parse: done, params, write: true };
}

/** A page of a memory's versions, newest first (at most 100 a page); the next by
 * `next_cursor`. */
export function versions(id: string, cursor?: string): Call<Page<Version>> {
  const parse = (body: Json): Page<Version> => {
    const next =
      body.has_more && typeof body.next_cursor === "string" ? body.next_cursor : undefined;
    return {
      items: (body.data as Json[]).map(version),
      next: next === undefined ? null : versions(id, next),
    };
  };
  const params: Record<string, string> = { limit: "100" };
  if (cursor !== undefined) params.cursor = cursor;
  return { method: "GET", path: `${BASE}/${seg(id)}/versions`, parse, params };
}

/** A page of browse. A page may hold fewer than `limit` memories (filters apply to the
 * scanned window) while more follow: paging goes by `hasMore` and `cursor` only. */
export function browse(filters: BrowseFilters, cursor?: string): Call<Page<Memory>> {
  const parse = (body: Json): Page<Memory> => {
    const next = body.hasMore && typeof body.cursor === "string" ? body.cursor : undefined;
    return {
      items: (body.data as Json[]).map(memory),
      next: next === undefined ? null : browse(filters, next),
    };
  };
  return { method: "GET", path: BASE, parse, params: query({ ...filters, cursor }) };
}
