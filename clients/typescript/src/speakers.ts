/** A store's registered speakers: `/api/v1/stores/{store}/speakers`. A memory's `speaker`
 * (and a search's) must be one of them, or `me`, which always is. */

import { type Call, done, seg } from "./call.js";
import type { Json } from "./records.js";

const base = (store: string): string => `/api/v1/stores/${seg(store)}/speakers`;

export function list(store: string): Call<string[]> {
  const parse = (body: Json): string[] => (body.data as Json[]).map((s) => String(s.name));
  return { method: "GET", path: base(store), parse };
}

export function add(store: string, name: string): Call<string> {
  const parse = (body: Json): string => String(body.name);
  return { method: "POST", path: base(store), parse, body: { name }, write: true };
}

export function remove(store: string, name: string): Call<void> {
  return { method: "DELETE", path: `${base(store)}/${seg(name)}`, parse: done, write: true };
}
