/** Memory stores and their path-addressed memories against the real service. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { ConflictError, InvalidRequestError, NotFoundError } from "mneme-client";

import { all, client, unique } from "./helpers.js";

const m = client();

test("create, list, get, write, read, update with a precondition, delete with force", async () => {
  const name = unique("ts-store");
  const store = await m.stores.create(name, { description: "decisions" });
  assert.match(store.id, /^memstore_/);
  assert.deepEqual(
    [store.name, store.description, store.raw.type],
    [name, "decisions", "memory_store"],
  );
  const listed = await m.stores.list();
  assert.ok(listed.some((s) => s.id === store.id) && listed.some((s) => s.name === "default"));
  assert.equal(new Set(listed.map((s) => s.id)).size, listed.length);
  assert.equal((await m.stores.get(name)).id, store.id);
  assert.equal((await m.stores.get(store.id)).name, name);

  const note = await m.stores.write(store.id, "decisions/merging.md", "Squash merges only.");
  assert.deepEqual([note.path, note.content], ["decisions/merging.md", "Squash merges only."]);
  assert.match(note.contentSha256, /^[0-9a-f]{64}$/);
  assert.deepEqual(await m.stores.read(store.id, note.id), note);

  const newer = await m.stores.update(store.id, note.id, {
    content: "Squash; rebase one-commit PRs.",
    contentSha256: note.contentSha256,
  });
  assert.notEqual(newer.contentSha256, note.contentSha256);
  assert.equal(newer.content, "Squash; rebase one-commit PRs.");

  const stale = await m.stores
    .update(store.id, note.id, { content: "lost", contentSha256: note.contentSha256 })
    .catch((e: unknown) => e);
  assert.ok(stale instanceof ConflictError);
  assert.deepEqual([stale.status, stale.type], [409, "conflict_error"]);
  assert.match(stale.message, /content_sha256 does not match/);
  assert.equal((await m.stores.read(store.id, note.id)).content, "Squash; rebase one-commit PRs.");

  // A path never changes; a taken path and a store still holding memories are conflicts.
  await assert.rejects(
    m.stores.update(store.id, note.id, { path: "elsewhere.md" }),
    InvalidRequestError,
  );
  await assert.rejects(m.stores.write(store.id, "decisions/merging.md", "again"), ConflictError);
  await assert.rejects(m.stores.create(name), ConflictError);
  await assert.rejects(m.stores.delete(store.id), ConflictError);
  assert.equal(await m.stores.delete(store.id, { force: true }), undefined);
  await assert.rejects(m.stores.get(store.id), NotFoundError);
});

test("listMemories pages through a path prefix in path order, without content", async () => {
  const store = await m.stores.create(unique("ts-paths"));
  for (let i = 0; i < 5; i++) await m.stores.write(store.id, `notes/${i}.md`, `note ${i}`);
  await m.stores.write(store.id, "notesX.md", "beside the prefix");
  await m.stores.write(store.id, "other/a.md", "elsewhere");

  const listed = await all(m.stores.listMemories(store.id, { pathPrefix: "notes/", limit: 2 }));
  assert.deepEqual(listed.map((x) => x.path), [0, 1, 2, 3, 4].map((i) => `notes/${i}.md`));
  assert.ok(listed.every((x) => x.content === null && x.contentSha256.length === 64));
  const everything = (await all(m.stores.listMemories(store.id, { limit: 3 }))).map((x) => x.path);
  assert.deepEqual(everything, [...everything].sort());
  assert.equal(everything.length, 7);
  await m.stores.delete(store.id, { force: true });
});

test("store metadata and stripTemporal; a path memory's metadata written and changed", async () => {
  const store = await m.stores.create(unique("ts-meta"), {
    metadata: { team: "infra" }, stripTemporal: true,
  });
  assert.deepEqual([store.raw.metadata, store.raw.strip_temporal], [{ team: "infra" }, true]);
  const note = await m.stores.write(store.id, "runbook.md", "Restart the worker.", {
    metadata: { owner: "dana" },
  });
  assert.deepEqual(note.metadata, { owner: "dana" });
  const moved = await m.stores.update(store.id, note.id, { metadata: { owner: "eve" } });
  assert.deepEqual([moved.metadata, moved.content], [{ owner: "eve" }, "Restart the worker."]);
  const [listed] = await all(m.stores.listMemories(store.id));
  assert.deepEqual(listed?.metadata, { owner: "eve" });
});
