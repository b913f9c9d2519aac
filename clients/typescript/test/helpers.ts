/** What every test file needs: the server under test (MNEME_URL, MNEME_API_KEY: an admin
 * key), clients for it, and raw calls for what the SDK does not do (keys, images). */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";

import { type ClientOptions, Mneme } from "mneme-client";

export const BASE = process.env.MNEME_URL ?? "http://127.0.0.1:8080";
export const KEY = process.env.MNEME_API_KEY ?? "";
assert.ok(KEY, "set MNEME_API_KEY (an admin key of the server at MNEME_URL)");

export function client(options: ClientOptions = {}): Mneme {
  return new Mneme({ apiKey: KEY, baseUrl: BASE, ...options });
}

export function unique(prefix: string): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

/** A request the SDK does not make, as the admin key; answers its JSON. */
export async function api(
  method: string,
  path: string,
  body?: unknown,
): Promise<Record<string, unknown>> {
  const response = await fetch(BASE + path, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  assert.ok(response.ok, `${method} ${path}: ${response.status} ${text}`);
  return JSON.parse(text);
}

/** A new service key of the workspace with only these scopes. */
export async function keyWith(...scopes: string[]): Promise<string> {
  return (await api("POST", "/api/v1/keys", { kind: "service", scopes })).key as string;
}

/** Wait until the worker has embedded everything written so far. */
export async function embedded(withinMs = 120_000): Promise<void> {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const ready = (await (await fetch(`${BASE}/readyz`)).json()) as { embeddingQueue: number };
    if (ready.embeddingQueue === 0) return;
    assert.ok(Date.now() < deadline, "the embedding queue did not drain");
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

/** Every item of an async iterator, in order. */
export async function all<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const item of items) out.push(item);
  return out;
}
