/** The retry rule, with a proxy in front of the real service replacing some answers:
 * 429 and 503 are retried up to maxRetries, after Retry-After, and a retried write
 * carries the same Idempotency-Key, so the service answers it with the first result. */

import assert from "node:assert/strict";
import { after, beforeEach, test } from "node:test";

import { APIError } from "mneme-client";

import { BASE, all, client, unique } from "./helpers.js";
import { FaultProxy, unavailable } from "./proxy.js";

const proxy = await FaultProxy.start(BASE);
const direct = client();
const viaProxy = client({ baseUrl: proxy.url });
beforeEach(() => proxy.reset());
after(() => proxy.close());

test("a write answered 503 after the service wrote it is retried, not written twice", async () => {
  const store = (await direct.stores.create(unique("ts-retry"))).name;
  proxy.after.push(unavailable("0")); // written, but the client hears a 503
  const written = await viaProxy.add("Written once, acknowledged on the retry.", { store });

  const [first, second] = proxy.seen;
  assert.equal(proxy.seen.length, 2);
  assert.match(String(first!.headers["idempotency-key"]), /^[0-9a-f-]{36}$/);
  assert.equal(first!.headers["idempotency-key"], second!.headers["idempotency-key"]);
  assert.equal(first!.body, second!.body);
  assert.equal(first!.upstream?.status, 201); // the first attempt wrote it
  assert.equal(second!.upstream?.headers.get("idempotent-replayed"), "true");
  // A second real write of the same text would have been deduplicated: proofCount 2.
  const stored = await all(direct.browse({ store }));
  assert.deepEqual(stored.map((x) => x.id), [written.id]);
  assert.equal(stored[0]!.raw.proofCount, null);
});

test("every write carries an Idempotency-Key of its own; reads carry none", async () => {
  const store = await viaProxy.stores.create(unique("ts-keys"));
  const memory = await viaProxy.add(unique("keyed"), { store: store.id });
  await viaProxy.update(memory.id, { importance: 0.4 });
  await viaProxy.get(memory.id);
  const note = await viaProxy.stores.write(store.id, "a.md", "first");
  await viaProxy.stores.update(store.id, note.id, { content: "second" });
  await viaProxy.delete(memory.id);
  await viaProxy.stores.delete(store.id, { force: true });

  const keys = proxy.seen.map((s) => [s.method, s.headers["idempotency-key"]] as const);
  const methods = ["POST", "POST", "PATCH", "GET", "POST", "POST", "DELETE", "DELETE"];
  assert.deepEqual(keys.map(([method]) => method), methods);
  const writes = keys.filter(([method]) => method !== "GET").map(([, key]) => key);
  assert.ok(writes.every((key) => typeof key === "string" && key.length > 0));
  assert.equal(new Set(writes).size, writes.length);
  assert.equal(keys[3]![1], undefined);
});

test("a 429 is retried after its Retry-After seconds", async () => {
  const limited = {
    status: 429,
    headers: { "Retry-After": "1", "Content-Type": "application/json" },
    body: JSON.stringify({ type: "error", error: { type: "rate_limit_error", message: "slow" } }),
  };
  proxy.before.push(limited);
  const started = performance.now();
  const written = await viaProxy.add(unique("after a 429"));
  assert.ok(performance.now() - started >= 950);
  assert.equal(proxy.seen.length, 2);
  assert.equal((await direct.get(written.id)).id, written.id);
});

test("Retry-After may be an HTTP date", async () => {
  const written = await direct.add(unique("dated"));
  proxy.before.push(unavailable(new Date(Date.now() + 2_000).toUTCString()));
  const started = performance.now();
  assert.equal((await viaProxy.get(written.id)).id, written.id);
  // The date has whole seconds: 1 to 2 s from now, more than the 0.5 s backoff.
  assert.ok(performance.now() - started >= 900);
  assert.equal(proxy.seen.length, 2);
});

test("retries stop after maxRetries, backing off without Retry-After", async () => {
  proxy.before.push(unavailable(), unavailable(), unavailable());
  const once = client({ baseUrl: proxy.url, maxRetries: 1 });
  const started = performance.now();
  const error = await once.get("mem_0000000000000000").catch((e: unknown) => e);
  assert.ok(error instanceof APIError);
  assert.deepEqual([error.status, error.type, error.message], [503, "api_error", "unavailable"]);
  assert.equal(proxy.seen.length, 2);
  assert.ok(performance.now() - started >= 450); // the first backoff: 0.5 s
});

test("maxRetries 0 answers the first 503", async () => {
  proxy.before.push(unavailable("0"));
  const never = client({ baseUrl: proxy.url, maxRetries: 0 });
  const error = await never.get("mem_0000000000000000").catch((e: unknown) => e);
  assert.ok(error instanceof APIError && error.status === 503);
  assert.equal(proxy.seen.length, 1);
});
