/** Each error class from a real refusal of the service (5xx: from a proxy in front of
 * it, which is what a client meets when the service is away). */

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  APIError,
  AuthenticationError,
  ConflictError,
  InvalidRequestError,
  Mneme,
  MnemeError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
} from "mneme-client";

import { BASE, client, keyWith, unique } from "./helpers.js";
import { FaultProxy } from "./proxy.js";

const m = client();
const MISSING = "mem_0000000000000000";

/** The error a call rejects with (it must reject). */
async function refusal(call: Promise<unknown>): Promise<MnemeError> {
  const error = await call.then(
    () => assert.fail("the call succeeded"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof MnemeError && error instanceof Error);
  assert.equal(error.name, error.constructor.name);
  return error;
}

test("401: an unknown key is an AuthenticationError with the request id", async () => {
  const bad = new Mneme({ apiKey: "not-a-key-0123456789", baseUrl: BASE });
  const error = await refusal(bad.get(MISSING));
  assert.ok(error instanceof AuthenticationError);
  assert.deepEqual([error.status, error.type], [401, "authentication_error"]);
  assert.match(error.requestId ?? "", /^req_/);
});

test("no key at all: AuthenticationError on the first call, nothing sent", async () => {
  const saved = process.env.MNEME_API_KEY;
  delete process.env.MNEME_API_KEY;
  try {
    const keyless = new Mneme({ baseUrl: "http://127.0.0.1:9" }); // nothing listens there
    const error = await refusal(keyless.get(MISSING));
    assert.ok(error instanceof AuthenticationError);
    assert.equal(error.status, undefined);
    assert.match(error.message, /MNEME_API_KEY/);
  } finally {
    if (saved !== undefined) process.env.MNEME_API_KEY = saved;
  }
});

test("403: a read-only key that writes, a key without admin that purges", async () => {
  const reader = client({ apiKey: await keyWith("memory:read") });
  const denied = await refusal(reader.add("not allowed"));
  assert.ok(denied instanceof PermissionDeniedError);
  assert.deepEqual([denied.status, denied.type], [403, "permission_error"]);

  const writer = client({ apiKey: await keyWith("memory:read", "memory:write") });
  const written = await writer.add(unique("purge me"));
  const purge = await refusal(writer.delete(written.id, { purge: true }));
  assert.ok(purge instanceof PermissionDeniedError);
});

test("404: NotFoundError, with the service's message", async () => {
  const error = await refusal(m.get(MISSING));
  assert.ok(error instanceof NotFoundError);
  assert.deepEqual([error.status, error.type], [404, "not_found_error"]);
  assert.match(error.message, /not found/);
  const noStore = await refusal(m.search(unique("no-such-store"), "anything"));
  assert.ok(noStore instanceof NotFoundError);
});

test("409: ConflictError for a taken store name", async () => {
  const name = unique("ts-taken");
  await m.stores.create(name);
  const error = await refusal(m.stores.create(name));
  assert.ok(error instanceof ConflictError);
  assert.deepEqual([error.status, error.type], [409, "conflict_error"]);
});

test("400: InvalidRequestError for values out of range", async () => {
  const error = await refusal(m.search("default", "anything", { maxResults: 50 }));
  assert.ok(error instanceof InvalidRequestError);
  assert.deepEqual([error.status, error.type], [400, "invalid_request_error"]);
  assert.match(error.message, /max_results/);
  assert.ok((await refusal(m.add("x", { importance: 7 }))) instanceof InvalidRequestError);
});

test("429: a workspace over its rate limit is a RateLimitError", async (t) => {
  const freeKey = process.env.MNEME_FREE_API_KEY; // a key of a "free" workspace: 60 a minute
  if (!freeKey) return t.skip("set MNEME_FREE_API_KEY (tests/test_typescript_sdk.py does)");
  const free = client({ apiKey: freeKey, maxRetries: 0 });
  for (let i = 0; i < 70; i++) {
    const error = await refusal(free.get(MISSING));
    if (error instanceof RateLimitError) {
      assert.deepEqual([error.status, error.type], [429, "rate_limit_error"]);
      return;
    }
    assert.ok(error instanceof NotFoundError);
  }
  assert.fail("70 requests in a row were not rate limited");
});

test("5xx: APIError, also for a proxy's plain-text answer", async () => {
  const proxy = await FaultProxy.start(BASE);
  try {
    const page = "<h1>Bad gateway</h1>";
    proxy.before.push({ status: 502, headers: { "Content-Type": "text/html" }, body: page });
    const error = await refusal(client({ baseUrl: proxy.url }).get(MISSING));
    assert.ok(error instanceof APIError);
    assert.deepEqual([error.status, error.type, error.message], [502, undefined, page]);
    assert.equal(proxy.seen.length, 1); // a 502 is not retried
  } finally {
    await proxy.close();
  }
});

test("a timeout aborts the request and throws APIError", async () => {
  const proxy = await FaultProxy.start(BASE);
  proxy.hang = true;
  try {
    const started = performance.now();
    const error = await refusal(client({ baseUrl: proxy.url, timeoutMs: 300 }).get(MISSING));
    assert.ok(error instanceof APIError);
    assert.deepEqual([error.status, error.type], [undefined, "timeout_error"]);
    assert.ok(performance.now() - started < 5_000);
    assert.equal(proxy.seen.length, 1);
  } finally {
    await proxy.close();
  }
});

test("no answer at all is a MnemeError without a status", async () => {
  const gone = client({ baseUrl: "http://127.0.0.1:9", maxRetries: 0 });
  const error = await refusal(gone.get(MISSING));
  assert.ok(!(error instanceof APIError));
  assert.deepEqual([error.status, error.type], [undefined, "connection_error"]);
  assert.match(error.message, /127\.0\.0\.1:9/);
});
