/** One API request as data, with how to read its answer: built by the modules of each
 * face, sent by the transport (which alone does I/O and retries). */

import type { Json } from "./records.js";

export interface Call<T> {
  readonly method: "GET" | "POST" | "PATCH" | "DELETE";
  readonly path: string;
  /** Reads the answer's JSON (`{}` for an empty body). */
  readonly parse: (body: Json) => T;
  readonly params?: Record<string, string>;
  /** JSON-encoded as the request body; none when undefined. */
  readonly body?: unknown;
  readonly headers?: Record<string, string>;
  /** Carries an Idempotency-Key, the same on every retry. */
  readonly write?: boolean;
}

/** One page of a listing and the call for the next (null on the last). */
export interface Page<T> {
  readonly items: T[];
  readonly next: Call<Page<T>> | null;
}

/** An id or name as one path segment. */
export const seg = (value: string): string => encodeURIComponent(value);

/** Parse for calls whose answer the SDK does not return. */
export const done = (): void => undefined;
