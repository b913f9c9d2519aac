/** A tiny HTTP proxy in front of the real service that can replace its answers, so the
 * retry rules are tested against real writes: `before` answers instead of forwarding
 * (the service never sees the request), `after` answers once the service has answered
 * (it did the work; the client hears the fault instead), `hang` never answers. */

import { type IncomingHttpHeaders, type Server, createServer } from "node:http";
import type { AddressInfo } from "node:net";

export interface Fault {
  status: number;
  headers?: Record<string, string>;
  body?: string;
}

export interface Seen {
  method: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** What the service answered, when the request reached it. */
  upstream?: { status: number; headers: Headers };
}

// Hop-by-hop and framing headers: each side sets its own.
const SKIP = new Set(["host", "connection", "keep-alive", "content-length", "transfer-encoding"]);

export function unavailable(retryAfter?: string): Fault {
  const body = { type: "error", error: { type: "api_error", message: "unavailable" } };
  const headers: Record<string, string> = { "Content-Type": "application/json" };
  if (retryAfter !== undefined) headers["Retry-After"] = retryAfter;
  return { status: 503, headers, body: JSON.stringify(body) };
}

export class FaultProxy {
  readonly seen: Seen[] = [];
  readonly before: Fault[] = [];
  readonly after: Fault[] = [];
  hang = false;
  readonly #server: Server;

  private constructor(upstream: string) {
    this.#server = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const seen: Seen = {
        method: req.method ?? "GET",
        headers: req.headers,
        body: Buffer.concat(chunks).toString(),
      };
      this.seen.push(seen);
      if (this.hang) return; // until close()
      const path = req.url ?? "/";
      const { status, headers, body } =
        this.before.shift() ?? (await this.#forward(upstream + path, seen));
      res.writeHead(status, headers).end(body);
    });
  }

  /** The service's answer to the request, or the `after` fault that replaces it. */
  async #forward(url: string, seen: Seen): Promise<Fault> {
    const headers: [string, string][] = [];
    for (const [name, value] of Object.entries(seen.headers)) {
      if (!SKIP.has(name) && value !== undefined) headers.push([name, String(value)]);
    }
    const response = await fetch(url, {
      method: seen.method,
      headers,
      body: seen.body === "" ? undefined : seen.body,
    });
    seen.upstream = { status: response.status, headers: response.headers };
    const answer: Fault = {
      status: response.status,
      // fetch has already decoded the body, whatever its content-encoding said
      headers: Object.fromEntries(
        [...response.headers].filter(([name]) => !SKIP.has(name) && name !== "content-encoding"),
      ),
      body: await response.text(),
    };
    return this.after.shift() ?? answer;
  }

  static async start(upstream: string): Promise<FaultProxy> {
    const proxy = new FaultProxy(upstream);
    await new Promise<void>((resolve) => proxy.#server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  /** Forget what was seen and queued, between tests. */
  reset(): void {
    this.seen.length = this.before.length = this.after.length = 0;
    this.hang = false;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise((resolve) => this.#server.close(resolve));
  }
}
