/** Configuration, sending a call, the retry rule and reading the answer: the SDK's only
 * I/O, on the platform's `fetch` (Node 18+, Deno, Bun, Workers, browsers). */

import type { Call, Page } from "./call.js";
import { APIError, AuthenticationError, MnemeError, errorFor } from "./errors.js";
import type { Json } from "./records.js";

export const VERSION = "0.1.0";
const DEFAULT_URL = "http://127.0.0.1:8080";
// 429 is refused before anything runs; a 503 either wrote nothing or is replayed by its
// Idempotency-Key, so both are safe to retry.
const RETRIED = new Set([429, 503]);
const BACKOFF_MS = 500; // without Retry-After: 0.5 s, 1 s, 2 s, …

export interface ClientOptions {
  /** Default: `MNEME_API_KEY` from the environment, where there is a `process`. */
  apiKey?: string;
  /** Default: `MNEME_URL`, else `http://127.0.0.1:8080`. */
  baseUrl?: string;
  /** Per attempt, reading the answer included; then the call throws `APIError`. */
  timeoutMs?: number;
  /** How many times a 429 or 503 is retried. */
  maxRetries?: number;
}

interface Prepared {
  readonly url: string;
  readonly init: RequestInit;
}

interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly text: string;
}

export class Transport {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  readonly #headers: Record<string, string> | undefined;

  constructor(options: ClientOptions) {
    const key = options.apiKey || env("MNEME_API_KEY");
    this.baseUrl = (options.baseUrl || env("MNEME_URL") || DEFAULT_URL).replace(/\/+$/, "");
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.maxRetries = options.maxRetries ?? 2;
    this.#headers = key
      ? {
          Authorization: `Bearer ${key}`,
          Accept: "application/json",
          "User-Agent": `mneme-client-ts/${VERSION}`,
        }
      : undefined;
  }

  async send<T>(call: Call<T>): Promise<T> {
    const request = this.#prepare(call);
    for (let attempt = 0; ; attempt++) {
      const answer = await this.#attempt(request);
      const wait = this.#wait(answer, attempt);
      if (wait === undefined) return result(call, answer);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }

  /** Every item of every page, following `next`; an id an earlier page gave is skipped. */
  async *iterate<T extends { readonly id: string }>(
    first: Call<Page<T>>,
  ): AsyncGenerator<T, void, undefined> {
    const seen = new Set<string>();
    for (let call: Call<Page<T>> | null = first; call !== null; ) {
      const page: Page<T> = await this.send(call);
      for (const item of page.items) {
        if (seen.has(item.id)) continue;
        seen.add(item.id);
        yield item;
      }
      call = page.next;
    }
  }

  /** The request, built once: every retry sends the same bytes and Idempotency-Key. */
  #prepare(call: Call<unknown>): Prepared {
    if (this.#headers === undefined) {
      throw new AuthenticationError("No API key: pass apiKey or set MNEME_API_KEY", {
        type: "authentication_error",
      });
    }
    const headers = { ...this.#headers, ...call.headers };
    let body: string | undefined;
    if (call.body !== undefined) {
      body = JSON.stringify(call.body);
      headers["Content-Type"] = "application/json";
    }
    if (call.write) headers["Idempotency-Key"] = idempotencyKey();
    const params = call.params ? `?${new URLSearchParams(call.params)}` : "";
    return { url: this.baseUrl + call.path + params, init: { method: call.method, headers, body } };
  }

  /** One attempt, answer read in full, within `timeoutMs`. */
  async #attempt({ url, init }: Prepared): Promise<Answer> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), this.timeoutMs);
    try {
      const response = await fetch(url, { ...init, signal: controller.signal });
      return { status: response.status, headers: response.headers, text: await response.text() };
    } catch (cause) {
      if (controller.signal.aborted) {
        throw new APIError(`No answer from ${this.baseUrl} within ${this.timeoutMs} ms`, {
          type: "timeout_error",
          cause,
        });
      }
      throw new MnemeError(`No answer from ${this.baseUrl}: ${describe(cause)}`, {
        type: "connection_error",
        cause,
      });
    } finally {
      clearTimeout(timer);
    }
  }

  /** Milliseconds to wait before retrying, or undefined to answer now. */
  #wait(answer: Answer, attempt: number): number | undefined {
    if (!RETRIED.has(answer.status) || attempt >= this.maxRetries) return undefined;
    return retryAfterMs(answer.headers.get("Retry-After")) ?? BACKOFF_MS * 2 ** attempt;
  }
}

function result<T>(call: Call<T>, answer: Answer): T {
  if (answer.status >= 400) {
    throw errorFor(answer.status, answer.text, answer.headers.get("request-id") ?? undefined);
  }
  return call.parse(answer.text ? (JSON.parse(answer.text) as Json) : {});
}

/** `Retry-After` in milliseconds: a number of seconds, or an HTTP date. */
function retryAfterMs(value: string | null): number | undefined {
  if (value === null || value.trim() === "") return undefined;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** A fresh Idempotency-Key. Node 18 has no global `crypto` unless started with
 * --experimental-global-webcrypto: there it comes from `Math.random`, unique enough for
 * a key that is never a secret. */
function idempotencyKey(): string {
  const webCrypto = globalThis.crypto as Crypto | undefined;
  if (webCrypto?.randomUUID) return webCrypto.randomUUID();
  return "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx".replace(/[xy]/g, (c) => {
    const r = Math.floor(Math.random() * 16);
    return (c === "x" ? r : (r & 3) | 8).toString(16);
  });
}

/** A variable of the environment, where there is one (Node, Bun, Deno's `process`). */
function env(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } })
    .process;
  return proc?.env?.[name] || undefined;
}

/** A fetch failure in words: Node's "fetch failed" says why only in its `cause`. */
function describe(error: unknown): string {
  const message = error instanceof Error ? error.message : String(error);
  const cause = error instanceof Error ? error.cause : undefined;
  return cause instanceof Error ? `${message} (${cause.message})` : message;
}
