/** Type-checked only (`tsc -p test/consumer.tsconfig.json`): the whole surface, imported
 * from the built package as a user imports it, with no Node or DOM types in scope. */

import {
  APIError,
  AuthenticationError,
  type BrowseFilters,
  type ClientOptions,
  ConflictError,
  type Hit,
  type HitKind,
  type Json,
  InvalidRequestError,
  type Memory,
  type MemoryInput,
  type MemoryUpdate,
  Mneme,
  MnemeError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  type SearchOptions,
  type SearchResult,
  type Store,
  type StoreMemory,
  type Stores,
  VERSION,
  type Version,
} from "mneme-client";

export async function everything(): Promise<void> {
  const options: ClientOptions = {
    apiKey: "k",
    baseUrl: "http://x",
    timeoutMs: 30_000,
    maxRetries: 2,
  };
  const m = new Mneme(options);
  new Mneme();

  const memory: Memory = await m.add("text", {
    store: "default", scope: "workspace", tier: "hindsight", factType: "world",
    provider: "sdk", providerRef: "r1", entityRefs: ["e"], proofCount: 1, importance: 0.5,
    category: "general", metadata: { a: "b" }, speaker: "me", eventDate: new Date(),
    expiresAt: "2030-01-01T00:00:00Z", transitory: false, supersedes: "mem_x", path: "p.md",
  });
  const memoryFields: (string | null)[] = [
    memory.id, memory.text, memory.store, memory.scope, memory.factType, memory.speaker,
    memory.embeddingStatus,
  ];
  const raw: Json = memory.raw;
  // @ts-expect-error: fields are camelCase, as the API has them
  await m.add("text", { fact_type: "world" });
  const items: MemoryInput[] = [{ text: "a" }, { text: "b", factType: null }];
  const many: Memory[] = await m.addMany(items);
  const change: MemoryUpdate = { text: "t", factType: null, eventDate: null, importance: 1 };
  const updated: Memory = await m.update((await m.get(memory.id)).id, change);
  // @ts-expect-error: a memory's store never changes
  await m.update(memory.id, { store: "other" });
  const none: void = await m.delete(updated.id, { purge: true });
  await m.delete(updated.id);
  const versions: Version[] = await m.versions(memory.id);
  const v = versions[0];
  const versionFields: (string | null)[] = v
    ? [v.id, v.operation, v.actor, v.contentSha256, v.path, v.status, v.createdAt]
    : [];

  const filters: BrowseFilters = {
    tier: ["core", "hindsight"], factType: "world", notFactType: ["observation"],
    status: "active", scope: "workspace", provider: "p", search: "s", limit: 10,
  };
  for await (const browsed of m.browse(filters)) browsed satisfies Memory;
  for await (const browsed of m.browse()) browsed satisfies Memory;

  const search: SearchOptions = {
    maxResults: 5, speaker: "me", verify: 1, maxImages: 0, form: "memoir", tz: 2,
    filters: { factType: ["world"], createdAfter: new Date(), minImportance: 0.1 },
    cacheControl: { type: "ephemeral", ttl: "1h" }, model: "Scroll 1.2",
  };
  const hits: Hit[] = await m.search("default", "q", search);
  const kind: HitKind | undefined = hits[0]?.kind;
  // @ts-expect-error: a hit is a memory, the agent's own words or an image
  const other: HitKind = "other";
  const hitFields = hits.map((h): [string, string, number, Json] => [
    h.id, h.content, h.similarity, h.raw,
  ]);
  const full: SearchResult = await m.searchFull("default", "q");
  const parts: Hit[][] = [full.memories, full.selfMemories, full.images];
  const verifyUsed: number | undefined = full.verifyUsed;
  // @ts-expect-error: undefined unless verify > 0 was sent
  const passes: number = full.verifyUsed;
  const own: Hit[] = await m.searchSelf("default", "q", { maxResults: 5 });

  const stores: Stores = m.stores;
  const store: Store = await stores.create("s", { description: "d" });
  await stores.create("t");
  const storeFields: [string, string, string, Json] = [
    store.id, store.name, store.description, store.raw,
  ];
  const listed: Store[] = await stores.list();
  const got: Store = await stores.get(store.id);
  const note: StoreMemory = await stores.write(got.id, "a.md", "c");
  const read: StoreMemory = await stores.read(store.id, note.id);
  const noteFields: [string, string, string | null, string, Json] = [
    read.id, read.path, read.content, read.contentSha256, read.raw,
  ];
  const sha = note.contentSha256;
  await stores.update(store.id, note.id, { content: "d", path: "a.md", contentSha256: sha });
  for await (const entry of stores.listMemories(store.id, { pathPrefix: "a", limit: 5 })) {
    entry satisfies StoreMemory;
  }
  for await (const entry of stores.listMemories(store.id)) entry satisfies StoreMemory;
  await stores.delete(store.id, { force: true });
  await stores.delete(store.id);

  try {
    await m.get("x");
  } catch (error) {
    if (error instanceof MnemeError) {
      const details: [number | undefined, string | undefined, string, string | undefined] = [
        error.status, error.type, error.message, error.requestId,
      ];
    }
    const classes: (typeof MnemeError)[] = [
      AuthenticationError, PermissionDeniedError, NotFoundError, ConflictError,
      RateLimitError, InvalidRequestError, APIError,
    ];
    const kinds: Error[] = classes.map((Class) => new Class("m", { status: 500 }));
  }
  const version: string = VERSION;
}
