/** `Mneme`, the client, and `Stores`, its `stores`. */

import * as memories from "./memories.js";
import type {
  BrowseFilters,
  MemoryFields,
  MemoryInput,
  MemoryUpdate,
  SearchOptions,
} from "./fields.js";
import type { Hit, Memory, SearchResult, Store, StoreMemory, Version } from "./records.js";
import * as search from "./search.js";
import * as speakers from "./speakers.js";
import * as stores from "./stores.js";
import { type ClientOptions, Transport } from "./transport.js";

/** Memory stores and their path-addressed memories (`client.stores`). */
export class Stores {
  readonly #t: Transport;

  /** Made by `Mneme`, sharing its transport. */
  constructor(transport: Transport) {
    this.#t = transport;
  }

  /** Create a store (needs an admin key); `ConflictError` if the name is taken. */
  create(name: string, options: stores.StoreOptions = {}): Promise<Store> {
    return this.#t.send(stores.create(name, options));
  }

  /** Every store of the workspace. */
  async list(): Promise<Store[]> {
    const all: Store[] = [];
    for await (const s of this.#t.iterate(stores.listPage())) all.push(s);
    return all;
  }

  /** A store by its `memstore_…` id or its name. */
  get(storeId: string): Promise<Store> {
    return this.#t.send(stores.get(storeId));
  }

  /** Delete a store; one holding active memories needs `{ force: true }`. */
  delete(storeId: string, options: { force?: boolean } = {}): Promise<void> {
    return this.#t.send(stores.remove(storeId, options.force ?? false));
  }

  /** Write a memory at a path (`ConflictError` if an active memory holds it). */
  write(
    storeId: string,
    path: string,
    content: string,
    options: { metadata?: Record<string, string> } = {},
  ): Promise<StoreMemory> {
    return this.#t.send(stores.write(storeId, path, content, options.metadata));
  }

  /** A path memory, with its content. */
  read(storeId: string, memoryId: string): Promise<StoreMemory> {
    return this.#t.send(stores.read(storeId, memoryId));
  }

  /** Change a path memory's content; with `contentSha256`, only if the stored content
   * still has that hash (`ConflictError` otherwise). */
  update(
    storeId: string,
    memoryId: string,
    change: stores.StoreMemoryUpdate,
  ): Promise<StoreMemory> {
    return this.#t.send(stores.update(storeId, memoryId, change));
  }

  /** Every path memory of the store, by path and without content, page by page. */
  listMemories(
    storeId: string,
    options: stores.ListMemoriesOptions = {},
  ): AsyncGenerator<StoreMemory, void, undefined> {
    return this.#t.iterate(stores.listMemories(storeId, options));
  }
}

/** A store's registered speakers (`client.speakers`): a memory's or a search's `speaker`
 * must be one of them, or `me` (the agent itself, always there). */
export class Speakers {
  readonly #t: Transport;

  /** Made by `Mneme`, sharing its transport. */
  constructor(transport: Transport) {
    this.#t = transport;
  }

  /** The store's speakers' names, `me` among them. */
  list(store = "default"): Promise<string[]> {
    return this.#t.send(speakers.list(store));
  }

  /** Register a speaker (`ConflictError` if registered already). */
  add(name: string, store = "default"): Promise<string> {
    return this.#t.send(speakers.add(store, name));
  }

  /** Unregister a speaker (`me` cannot be: `ConflictError`). */
  delete(name: string, store = "default"): Promise<void> {
    return this.#t.send(speakers.remove(store, name));
  }
}

/** A Mneme client. 429 and 503 answers are retried up to `maxRetries` times, after
 * `Retry-After`; every write carries an Idempotency-Key, the same on each retry. */
export class Mneme {
  readonly stores: Stores;
  readonly speakers: Speakers;
  readonly #t: Transport;

  constructor(options: ClientOptions = {}) {
    this.#t = new Transport(options);
    this.stores = new Stores(this.#t);
    this.speakers = new Speakers(this.#t);
  }

  /** Write a memory (`store` defaults to `default`). */
  add(text: string, fields: MemoryFields = {}): Promise<Memory> {
    return this.#t.send(memories.add(text, fields));
  }

  /** Write 1 to 500 memories at once, all or nothing; answered in request order. */
  addMany(items: readonly MemoryInput[]): Promise<Memory[]> {
    return this.#t.send(memories.addMany(items));
  }

  /** A memory, with its `embeddingStatus`. */
  get(id: string): Promise<Memory> {
    return this.#t.send(memories.get(id));
  }

  /** Change a memory's text or fields. */
  update(id: string, fields: MemoryUpdate): Promise<Memory> {
    return this.#t.send(memories.update(id, fields));
  }

  /** Tombstone a memory; `{ purge: true }` (admin) erases it and its versions. */
  delete(id: string, options: { purge?: boolean } = {}): Promise<void> {
    return this.#t.send(memories.remove(id, options.purge ?? false));
  }

  /** A memory's whole audit trail, newest first (fetched page by page). */
  async versions(id: string): Promise<Version[]> {
    const all: Version[] = [];
    for await (const v of this.#t.iterate(memories.versions(id))) all.push(v);
    return all;
  }

  /** Every memory the filters let through, page by page of `limit` scanned memories
   * (default 25, at most 100), following the cursor while `hasMore`. */
  browse(filters: BrowseFilters = {}): AsyncGenerator<Memory, void, undefined> {
    return this.#t.iterate(memories.browse(filters));
  }

  /** Search store `userId`: memories, then the agent's own words, then images. */
  search(userId: string, query: string, options: SearchOptions = {}): Promise<Hit[]> {
    return this.#t.send(search.oneList(userId, query, options));
  }

  /** Search, keeping memories, own words, images and `verifyUsed` apart. */
  searchFull(userId: string, query: string, options: SearchOptions = {}): Promise<SearchResult> {
    return this.#t.send(search.full(userId, query, options));
  }

  /** Search only the agent's own words (speaker `me`). */
  searchSelf(userId: string, query: string, options: SearchOptions = {}): Promise<Hit[]> {
    return this.#t.send(search.ownWords(userId, query, options));
  }
}
