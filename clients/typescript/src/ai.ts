/**
 * Mneme's memory as Vercel AI SDK tools: `mnemeTools`.
 *
 * ```ts
 * import { generateText, stepCountIs } from "ai";
 * import { mnemeTools } from "mneme-client/ai";
 * await generateText({ model, tools: mnemeTools(), stopWhen: stepCountIs(3), prompt });
 * ```
 *
 * `remember` and `recall` (and, with `files: true`, the store's path-addressed files:
 * `list_files`, `read_file`, `write_file`), each one call to Mneme with the tools' key.
 * A tool that fails throws the SDK's typed error (`NotFoundError`, …): the AI SDK hands
 * its message to the model as the tool's error, and the error itself to the caller in the
 * step's `tool-error` part. `ai` (6.x) and `zod` are peer dependencies.
 */

import { type Tool, tool } from "ai";
import { z } from "zod";

import { Mneme } from "./client.js";
import { NotFoundError } from "./errors.js";
import type { ClientOptions } from "./transport.js";

const MIN_RESULTS = 5; // the search API's max_results bounds
const MAX_RESULTS = 20;

export interface MnemeToolsOptions extends ClientOptions {
  /** The store the tools read and write (default `default`). */
  store?: string;
  /** Given to what `remember` writes (`workspace` unless set; `pair:alice:bot` keeps a
   * memory between those two). */
  scope?: string;
  /** Also give the store's files: `list_files`, `read_file`, `write_file`. */
  files?: boolean;
  /** A client to use instead of one made from `apiKey` / `baseUrl` (`MNEME_API_KEY` /
   * `MNEME_URL` by default). */
  client?: Mneme;
}

/** What `recall` answers for one memory. */
export interface Recalled {
  id: string;
  text: string;
  similarity: number;
}

/** Type aliases, not interfaces: a `ToolSet` needs their implicit index signature. */
export type MemoryTools = {
  remember: Tool<{ text: string }, { id: string; text: string }>;
  recall: Tool<{ query: string; maxResults?: number | undefined }, Recalled[]>;
};

export type FileTools = {
  list_files: Tool<{ pathPrefix?: string | undefined }, string[]>;
  read_file: Tool<{ path: string }, string>;
  write_file: Tool<{ path: string; content: string }, string>;
};

/** Tools over one Mneme store, for `generateText` / `streamText`'s `tools`. */
export function mnemeTools(options?: MnemeToolsOptions & { files?: false }): MemoryTools;
export function mnemeTools(options: MnemeToolsOptions & { files: true }): MemoryTools & FileTools;
export function mnemeTools(options?: MnemeToolsOptions): MemoryTools & Partial<FileTools>;
export function mnemeTools(options: MnemeToolsOptions = {}): MemoryTools & Partial<FileTools> {
  const { store = "default", scope, files = false, client, ...clientOptions } = options;
  const m = client ?? new Mneme(clientOptions);
  const memory = memoryTools(m, store, scope);
  return files ? { ...memory, ...fileTools(m, store) } : memory;
}

function memoryTools(m: Mneme, store: string, scope: string | undefined): MemoryTools {
  return {
    remember: tool({
      description: "Remember a fact, preference or event for later conversations.",
      inputSchema: z.object({
        text: z.string().min(1).describe("The fact, in one self-contained sentence."),
      }),
      execute: async ({ text }) => {
        const written = await m.add(text, scope === undefined ? { store } : { store, scope });
        return { id: written.id, text: written.text };
      },
    }),
    recall: tool({
      description: "Recall what was remembered that bears on a question, best first.",
      inputSchema: z.object({
        query: z.string().min(1).describe("The question or topic, in words."),
        maxResults: z.number().int().optional().describe("How many memories (5-20, default 5)."),
      }),
      execute: async ({ query, maxResults }) => {
        const wanted = Math.max(MIN_RESULTS, Math.min(MAX_RESULTS, maxResults ?? MIN_RESULTS));
        const hits = await m.search(store, query, { maxResults: wanted });
        return hits.map((h) => ({ id: h.id, text: h.content, similarity: h.similarity }));
      },
    }),
  };
}

function fileTools(m: Mneme, store: string): FileTools {
  /** The id of the file at exactly `path`, if there is one. */
  async function find(path: string): Promise<string | undefined> {
    for await (const file of m.stores.listMemories(store, { pathPrefix: path, limit: 1 })) {
      return file.path === path ? file.id : undefined;
    }
    return undefined;
  }
  const path = z.string().min(1).describe("The file's path, e.g. notes/alice.md.");
  return {
    list_files: tool({
      description: "The paths of the store's files, in order.",
      inputSchema: z.object({
        pathPrefix: z.string().optional().describe("Only paths starting with this."),
      }),
      execute: async ({ pathPrefix }) => {
        const paths: string[] = [];
        const options = pathPrefix ? { pathPrefix } : {};
        for await (const file of m.stores.listMemories(store, options)) paths.push(file.path);
        return paths;
      },
    }),
    read_file: tool({
      description: "A file's content.",
      inputSchema: z.object({ path }),
      execute: async ({ path }) => {
        const id = await find(path);
        if (id === undefined) {
          throw new NotFoundError(`No file at ${JSON.stringify(path)}; list_files shows what there is`);
        }
        return (await m.stores.read(store, id)).content ?? "";
      },
    }),
    write_file: tool({
      description: "Create a file, or replace its content.",
      inputSchema: z.object({ path, content: z.string().describe("The whole new content.") }),
      execute: async ({ path, content }) => {
        const id = await find(path);
        if (id === undefined) await m.stores.write(store, path, content);
        else await m.stores.update(store, id, { content });
        return `wrote ${path}`;
      },
    }),
  };
}
