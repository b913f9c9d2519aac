/** What callers pass, in the API's own camelCase, and how it goes on the wire. */

/** An ISO 8601 string, or a `Date` (sent as ISO 8601 by `JSON.stringify`). */
export type Time = string | Date;

/** One value, or any of several (sent comma-separated). */
export type OneOrMore = string | readonly string[];

interface Patchable {
  scope?: string;
  tier?: string;
  factType?: string | null;
  speaker?: string | null;
  category?: string;
  importance?: number;
  metadata?: Readonly<Record<string, string>>;
  entityRefs?: readonly string[];
  eventDate?: Time | null;
  expiresAt?: Time | null;
  proofCount?: number | null;
  transitory?: boolean;
  status?: string;
}

/** Fields of a new memory besides its text (the main README's "Writing memories"). */
export interface MemoryFields extends Patchable {
  store?: string;
  path?: string;
  supersedes?: string;
  provider?: string;
  providerRef?: string;
  firstSeenAt?: Time;
  lastUsedAt?: Time;
}

/** One item of `addMany`. */
export interface MemoryInput extends MemoryFields {
  text: string;
}

/** What `update` may change (`PATCH` cannot change store or path). */
export interface MemoryUpdate extends Patchable {
  text?: string;
}

/** Browse filters (seed 000); a list means any of its values. */
export interface BrowseFilters {
  store?: string;
  tier?: OneOrMore;
  factType?: OneOrMore;
  notFactType?: OneOrMore;
  status?: OneOrMore;
  scope?: string;
  provider?: string;
  search?: string;
  /** Memories scanned per page: default 25, at most 100. */
  limit?: number;
}

/** Search filters (seed 002), camelCase here and snake_case on the wire. Unknown keys
 * are dropped by the service and named in the answer's `warnings`. */
export interface SearchFilters {
  category?: OneOrMore;
  tier?: OneOrMore;
  factType?: OneOrMore;
  scope?: OneOrMore;
  entity?: OneOrMore;
  createdAfter?: Time;
  createdBefore?: Time;
  eventAfter?: Time;
  eventBefore?: Time;
  minImportance?: number;
  includeSuperseded?: boolean;
}

export interface SearchOptions {
  /** 5 to 20; the SDK sends 10 unless given. */
  maxResults?: number;
  speaker?: string;
  filters?: SearchFilters;
  verify?: number;
  maxImages?: number;
  form?: "memoir" | "archive";
  tz?: number;
  cacheControl?: { type: "ephemeral"; ttl?: "5m" | "1h" };
  /** The memory model, sent as `X-WOS-Model` ("Tablet 2", "Scroll 1.2", …). */
  model?: string;
}

/** `factType` → `fact_type`; a key already in snake_case stays as it is. */
export function snake(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** An object's defined entries with snake_case keys. */
export function snakeKeys(fields: object): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) {
    if (value !== undefined) out[snake(key)] = value;
  }
  return out;
}

/** Query parameters: lists comma-separated, undefined and null left out. */
export function query(fields: object): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [key, value] of Object.entries(fields)) {
    if (value === undefined || value === null) continue;
    out[key] = Array.isArray(value) ? value.join(",") : String(value);
  }
  return out;
}
