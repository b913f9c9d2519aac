/**
 * TypeScript SDK for Mneme, the self-hostable long-term memory service for AI agents.
 *
 * ```ts
 * import { Mneme } from "mneme-client";
 * const m = new Mneme(); // MNEME_API_KEY, MNEME_URL
 * await m.add("Dave prefers squash merges.", { factType: "world" });
 * for (const hit of await m.search("default", "how does Dave merge?")) console.log(hit.content);
 * ```
 */

export { Mneme, type Speakers, type Stores } from "./client.js";
export {
  APIError,
  AuthenticationError,
  ConflictError,
  type ErrorDetails,
  InvalidRequestError,
  MnemeError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
} from "./errors.js";
export type {
  BrowseFilters,
  MemoryFields,
  MemoryInput,
  MemoryUpdate,
  OneOrMore,
  SearchFilters,
  SearchOptions,
  Time,
} from "./fields.js";
export type {
  Hit,
  HitKind,
  Json,
  Memory,
  SearchResult,
  Store,
  StoreMemory,
  Version,
} from "./records.js";
export type { ListMemoriesOptions, StoreMemoryUpdate, StoreOptions } from "./stores.js";
export { type ClientOptions, VERSION } from "./transport.js";
