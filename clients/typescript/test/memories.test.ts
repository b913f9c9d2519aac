/** Writes and browse against the real service. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { type BrowseFilters, ConflictError, NotFoundError } from "mneme-client";

import { all, client, unique } from "./helpers.js";

const m = client();

test("add, get, update, versions, delete and purge round-trip with camelCase fields", async () => {
  const store = (await m.stores.create(unique("ts-crud"))).name;
  const when = new Date(Date.UTC(2026, 2, 1, 12, 30));
  const dave = await m.add("Dave prefers squash merges.", {
    store, factType: "world", importance: 0.8, entityRefs: ["dave"], eventDate: when,
    proofCount: 2, metadata: { src: "sdk" }, category: "preferences",
  });
  assert.match(dave.id, /^mem_/);
  assert.equal(dave.text, "Dave prefers squash merges.");
  assert.deepEqual([dave.scope, dave.factType, dave.speaker], ["workspace", "world", null]);
  assert.match(dave.store ?? "", /^memstore_/);
  assert.ok(["pending", "ready"].includes(dave.embeddingStatus ?? ""));
  assert.deepEqual(dave.raw.entityRefs, ["dave"]);
  assert.equal(dave.raw.proofCount, 2);
  assert.equal(dave.raw.category, "preferences");
  assert.deepEqual(dave.raw.metadata, { src: "sdk" });
  assert.match(String(dave.raw.eventDate), /^2026-03-01T12:30:00/);

  assert.equal((await m.get(dave.id)).text, dave.text);
  const changed = await m.update(dave.id, { text: "Dave prefers rebase merges.", factType: null });
  assert.deepEqual([changed.text, changed.factType], ["Dave prefers rebase merges.", null]);
  assert.equal((await m.get(dave.id)).text, "Dave prefers rebase merges.");

  const versions = await m.versions(dave.id);
  assert.deepEqual(versions.map((v) => v.operation), ["modified", "created"]); // newest first
  assert.ok(versions[0]!.createdAt >= versions[1]!.createdAt);
  assert.match(versions[0]!.id, /^memver_/);
  assert.equal(versions[0]!.status, "active");
  assert.equal(versions[0]!.raw.id, versions[0]!.id);
  // The whole trail, whatever its length: the service answers it 100 versions a page.
  for (let i = 0; i < 110; i++) await m.update(dave.id, { metadata: { n: String(i) } });
  const trail = await m.versions(dave.id);
  assert.equal(trail.length, 112);
  assert.equal(new Set(trail.map((v) => v.id)).size, 112);
  assert.deepEqual(trail.slice(-2).map((v) => v.operation), ["modified", "created"]);

  assert.equal(await m.delete(dave.id), undefined);
  assert.equal((await m.get(dave.id)).raw.status, "deleted"); // the tombstone
  await m.delete(dave.id, { purge: true });
  await assert.rejects(m.get(dave.id), NotFoundError);
});

test("a memory written with speaker me and a path keeps both", async () => {
  const store = (await m.stores.create(unique("ts-fields"))).name;
  const own = await m.add("I promised a review.", { store, speaker: "me", transitory: true });
  assert.equal(own.speaker, "me");
  const filed = await m.add("Squash only.", { store, path: "notes/merging.md", tier: "core" });
  assert.deepEqual([filed.raw.path, filed.raw.tier], ["notes/merging.md", "core"]);
});

test("addMany writes a batch, answered in request order", async () => {
  const store = (await m.stores.create(unique("ts-batch"))).name;
  const items = [0, 1, 2, 3, 4].map((i) => ({ text: `Batch fact ${i}`, store, factType: "world" }));
  const written = await m.addMany(items);
  assert.deepEqual(written.map((w) => w.text), items.map((i) => i.text));
  assert.ok(written.every((w) => w.factType === "world"));
  assert.equal(new Set(written.map((w) => w.id)).size, 5);
});

test("browse follows the cursor over many pages and never yields an id twice", async () => {
  const store = (await m.stores.create(unique("ts-browse"))).name;
  const texts = [...Array(9).keys()].map((i) => `note ${i} ${i % 2 === 0 ? "even" : "odd"}`);
  const written = await m.addMany(texts.map((text) => ({ text, store })));

  const seen = (await all(m.browse({ store, limit: 2 }))).map((x) => x.id);
  assert.equal(seen.length, 9);
  assert.equal(new Set(seen).size, 9);
  assert.deepEqual(new Set(seen), new Set(written.map((w) => w.id)));

  // A filter leaves pages short (even empty) while more follow: still every match.
  const evens = await all(m.browse({ store, limit: 2, search: "even" }));
  assert.deepEqual(evens.map((x) => x.text).sort(), texts.filter((t) => t.endsWith("even")));
  assert.ok(evens.every((x) => x.store === null && x.scope === "workspace")); // browse's shape
});

test("browse filters: a list of statuses, fact types kept and left out", async () => {
  const store = (await m.stores.create(unique("ts-filters"))).name;
  const [world, plain, gone] = await m.addMany([
    { text: "World fact", store, factType: "world" },
    { text: "Plain fact", store },
    { text: "Deleted fact", store },
  ]);
  await m.delete(gone!.id);
  const ids = async (filters: BrowseFilters): Promise<string[]> =>
    (await all(m.browse({ store, ...filters }))).map((x) => x.id).sort();

  assert.deepEqual(await ids({}), [world!.id, plain!.id].sort());
  const everyStatus = [world!.id, plain!.id, gone!.id].sort();
  assert.deepEqual(await ids({ status: ["active", "deleted"] }), everyStatus);
  assert.deepEqual(await ids({ factType: "world" }), [world!.id]);
  assert.deepEqual(await ids({ notFactType: ["world"] }), [plain!.id]);
  assert.deepEqual(await ids({ tier: "core" }), []);
});

test("speakers: registered, used by a write, listed, removed", async () => {
  const store = (await m.stores.create(unique("ts-speakers"))).name;
  const unknown = await m.add("I went to a support group.", { store, speaker: "Caroline" })
    .catch((e: unknown) => e);
  assert.ok(unknown instanceof NotFoundError && unknown.message.includes("Caroline"));
  assert.equal(await m.speakers.add("Caroline", store), "Caroline");
  const said = await m.add("I went to a support group.", { store, speaker: "Caroline" });
  assert.equal(said.speaker, "Caroline");
  assert.deepEqual(await m.speakers.list(store), ["me", "Caroline"]);
  assert.ok((await m.speakers.add("Caroline", store).catch((e: unknown) => e)) instanceof ConflictError);
  assert.ok((await m.speakers.delete("me", store).catch((e: unknown) => e)) instanceof ConflictError);
  await m.speakers.delete("Caroline", store);
  assert.deepEqual(await m.speakers.list(store), ["me"]);
});
