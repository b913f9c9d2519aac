/** search, searchFull and searchSelf against a real store: facts, the agent's own words
 * (speaker `me`) and an image, embedded by the service's worker. */

import assert from "node:assert/strict";
import { before, test } from "node:test";

import type { HitKind } from "mneme-client";

import { api, client, embedded, unique } from "./helpers.js";

const PNG = "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAA="; // PNG magic, as tests/test_search.py
const ALICE = "Alice drinks oat milk flat whites every morning.";
const PROMISE = "I promised Alice a report on her coffee order.";
const m = client();
let store = "";

before(async () => {
  store = (await m.stores.create(unique("ts-search"))).name;
  const facts = [...Array(12).keys()].map(
    (i) => `Project fact ${i}: the build uses cache layer ${i}.`,
  );
  await m.addMany(facts.map((text) => ({ text, store })));
  await m.add(ALICE, { store, importance: 0.9, factType: "world" });
  await m.add(PROMISE, { store, speaker: "me" });
  const image = { data: PNG, mimeType: "image/png" };
  await api("POST", "/api/v1/memories", { text: "A photo of Alice's coffee cup", store, image });
  await embedded();
});

test("search answers one list: memories, then own words, then images, no id twice", async () => {
  const hits = await m.search(store, "What does Alice drink?");
  const order: HitKind[] = ["memory", "self", "image"];
  const kinds = hits.map((h) => h.kind);
  assert.deepEqual(kinds, [...kinds].sort((a, b) => order.indexOf(a) - order.indexOf(b)));
  assert.deepEqual(new Set(kinds), new Set(order));
  assert.equal(new Set(hits.map((h) => h.id)).size, hits.length);
  assert.equal(hits[0]!.content, ALICE);
  assert.ok(hits[0]!.similarity > 0 && hits[0]!.similarity <= 1);
  assert.equal(hits[0]!.raw.id, hits[0]!.id);
  assert.ok(hits.every((h) => !("verify_used" in h.raw)));
});

test("searchFull keeps the parts apart and sends max_results 10 unless told", async () => {
  const full = await m.searchFull(store, "Which cache layer does the build use?");
  assert.equal(full.memories.length, 10); // the SDK's default, not the service's 20
  assert.deepEqual(full.selfMemories.map((h) => [h.kind, h.content]), [["self", PROMISE]]);
  assert.deepEqual(full.images.map((h) => h.kind), ["image"]);
  assert.equal(full.verifyUsed, undefined);
  assert.equal((await m.searchFull(store, "build cache", { maxResults: 5 })).memories.length, 5);

  const verified = await m.searchFull(store, "build cache", { maxResults: 5, verify: 2 });
  assert.ok(Number.isInteger(verified.verifyUsed));
  assert.ok(verified.verifyUsed! >= 0 && verified.verifyUsed! <= 2);
  assert.ok(verified.memories.length >= 5);

  // model goes in X-WOS-Model: Scroll 1.2 keeps everything in memories.
  const scroll = await m.searchFull(store, "Alice coffee", { model: "Scroll 1.2" });
  assert.deepEqual([scroll.selfMemories, scroll.images], [[], []]);
  assert.ok(!("self_memories" in scroll.raw));
});

test("every option reaches the service under its API name", async () => {
  const full = await m.searchFull(store, "What does Alice drink?", {
    maxResults: 5, filters: { factType: "world", minImportance: 0.5 }, maxImages: 0,
    form: "memoir", tz: 2, cacheControl: { type: "ephemeral", ttl: "5m" },
  });
  assert.equal(full.raw.warnings, undefined); // no option or filter key was unknown
  assert.deepEqual(full.memories.map((h) => h.content), [ALICE]); // the filters applied
  assert.deepEqual(full.images, []); // max_images 0
  assert.match(String(full.memories[0]!.raw.created_at), /^[A-Z][a-z]+day, \d+ /); // memoir
  const again = await m.searchFull(store, "What does Alice drink?", {
    speaker: "me", maxResults: 5, maxImages: 0,
  });
  // speaker me: Tablet 2 answers the agent's own words, and only those, apart.
  assert.deepEqual([again.memories, again.selfMemories.map((h) => h.content)], [[], [PROMISE]]);
});

test("searchSelf answers only the agent's own words", async () => {
  const own = await m.searchSelf(store, "What did I promise Alice?");
  assert.deepEqual(own.map((h) => h.content), [PROMISE]);
  assert.equal(own[0]!.kind, "self");
  assert.equal(own[0]!.raw.speaker, "me");
  const scroll = await m.searchSelf(store, "promise", { model: "Scroll 1.2" });
  assert.deepEqual(scroll.map((h) => [h.id, h.kind]), [[own[0]!.id, "self"]]);
});
