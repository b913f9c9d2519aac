/** `mneme-client/ai` against the real service: the AI SDK's own mock model
 * (`MockLanguageModelV3`, from `ai/test`) calls the tools through `generateText` and
 * `streamText`, and what they did is then read back from Mneme. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { generateText, stepCountIs, streamText, ToolLoopAgent } from "ai";
import type {
  LanguageModelV3CallOptions,
  LanguageModelV3Content,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
} from "@ai-sdk/provider";
import { convertArrayToReadableStream, MockLanguageModelV3 } from "ai/test";
import { AuthenticationError, Mneme, NotFoundError } from "mneme-client";
import { mnemeTools } from "mneme-client/ai";

import { api, BASE, client, embedded, unique } from "./helpers.js";

const m = client();

type Step = LanguageModelV3Content[];

const call = (name: string, input: object, id = unique("call")): LanguageModelV3Content => ({
  type: "tool-call", toolCallId: id, toolName: name, input: JSON.stringify(input),
});
const text = (words: string): LanguageModelV3Content => ({ type: "text", text: words });

const USAGE = {
  inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 1, text: 1, reasoning: undefined },
};

function answer(content: Step): LanguageModelV3GenerateResult {
  const calls = content.some((c) => c.type === "tool-call");
  const finishReason = { unified: calls ? "tool-calls" : "stop", raw: undefined } as const;
  return { content, finishReason, usage: USAGE, warnings: [] };
}

/** A model that answers its n-th call with `steps[n]`, after `before(n)` (if given). */
function scripted(steps: Step[], before?: (n: number) => Promise<void>): MockLanguageModelV3 {
  let n = 0;
  const next = async (): Promise<LanguageModelV3GenerateResult> => {
    const i = n++;
    await before?.(i);
    const step = steps[i];
    assert.ok(step, `the model was called a ${i + 1}th time`);
    return answer(step);
  };
  return new MockLanguageModelV3({
    doGenerate: next,
    doStream: async () => ({ stream: convertArrayToReadableStream(streamed(await next())) }),
  });
}

/** One answer as the parts a streaming model sends. */
function streamed(result: LanguageModelV3GenerateResult): LanguageModelV3StreamPart[] {
  const parts: LanguageModelV3StreamPart[] = [{ type: "stream-start", warnings: [] }];
  result.content.forEach((c, i) => {
    if (c.type === "text") {
      const id = `t${i}`;
      parts.push({ type: "text-start", id }, { type: "text-delta", id, delta: c.text },
        { type: "text-end", id }); // fmt: one text part
    } else if (c.type === "tool-call") {
      parts.push(c);
    }
  });
  parts.push({ type: "finish", finishReason: result.finishReason, usage: result.usage });
  return parts;
}

/** The tool messages the model was shown on a call. */
function toolOutputs(options: LanguageModelV3CallOptions | undefined): unknown[] {
  return (options?.prompt ?? [])
    .flatMap((message) => (message.role === "tool" ? message.content : []))
    .map((part) => (part.type === "tool-result" ? part.output : part));
}

test("generateText: the model remembers, then recalls what it remembered", async () => {
  const { id: storeId, name: store } = await m.stores.create(unique("ts-ai"));
  const model = scripted(
    [
      [call("remember", { text: "Alice drinks oolong tea every morning." })],
      [call("recall", { query: "what tea does Alice drink?", maxResults: 50 })],
      [text("Alice drinks oolong.")],
    ],
    async (n) => (n === 1 ? embedded() : undefined),
  );
  const result = await generateText({
    model, tools: mnemeTools({ store }), stopWhen: stepCountIs(5),
    prompt: "Remember that Alice drinks oolong tea, then recall it.",
  });
  assert.equal(result.text, "Alice drinks oolong.");
  assert.equal(result.steps.length, 3);

  const offered = model.doGenerateCalls[0]?.tools ?? [];
  assert.deepEqual(offered.map((t) => t.name).sort(), ["recall", "remember"]);
  const remember = offered.find((t) => t.name === "remember");
  assert.ok(remember?.type === "function");
  assert.deepEqual((remember.inputSchema as { required: string[] }).required, ["text"]);

  const [written] = result.steps[0]?.toolResults ?? [];
  assert.ok(written?.toolName === "remember" && !written.dynamic);
  const memory = await m.get(written.output.id);
  assert.deepEqual([memory.text, memory.store], ["Alice drinks oolong tea every morning.", storeId]);

  const [recalled] = result.steps[1]?.toolResults ?? [];
  assert.ok(recalled?.toolName === "recall" && !recalled.dynamic);
  assert.equal(recalled.output[0]?.id, memory.id);
  assert.equal(recalled.output[0]?.text, memory.text);
  assert.ok(recalled.output.length <= 20, "maxResults is held to the search API's 5-20");
  // The model saw the recall's answer as the tool's output on its last call.
  assert.match(JSON.stringify(toolOutputs(model.doGenerateCalls[2])), /oolong tea every morning/);
});

test("streamText: the file tools write, list and read; a missing file is a typed error", async () => {
  const store = (await m.stores.create(unique("ts-ai-files"))).name;
  const model = scripted([
    [call("write_file", { path: "notes/alice.md", content: "Prefers oolong." })],
    [call("write_file", { path: "notes/alice.md", content: "Prefers oolong; no sugar." })],
    [call("list_files", { pathPrefix: "notes/" }), call("read_file", { path: "notes/alice.md" })],
    [call("read_file", { path: "notes/bob.md" })],
    [text("done")],
  ]);
  const run = streamText({
    model, tools: mnemeTools({ store, files: true }), stopWhen: stepCountIs(6),
    prompt: "Keep a note on Alice.",
  });
  assert.equal(await run.text, "done");
  const steps = await run.steps;
  // Two calls in one step: streamText yields their results as they finish, in either order.
  const results = steps[2]?.toolResults ?? [];
  const byTool = Object.fromEntries(results.map((r) => [r.toolName, r.output]));
  assert.deepEqual(byTool, {
    list_files: ["notes/alice.md"],
    read_file: "Prefers oolong; no sugar.",
  });
  const [missing] = steps[3]?.content.filter((c) => c.type === "tool-error") ?? [];
  assert.ok(missing?.error instanceof NotFoundError, String(missing?.error));
  assert.match(String(missing.error.message), /No file at "notes\/bob\.md"/);
  // The model is told, and can do otherwise; the file written twice is one file.
  assert.match(JSON.stringify(toolOutputs(model.doStreamCalls[4])), /No file at/);
  const files = [];
  for await (const f of m.stores.listMemories(store)) files.push(f.path);
  assert.deepEqual(files, ["notes/alice.md"]);
  const offered = (model.doStreamCalls[0]?.tools ?? []).map((t) => t.name).sort();
  assert.deepEqual(offered, ["list_files", "read_file", "recall", "remember", "write_file"]);
});

test("two keys: recall with Bob's key does not find what Alice's tools kept to her", async () => {
  const [alice, bob] = [unique("alice"), unique("bob")];
  await api("POST", "/api/v1/members", { id: "bot", kind: "agent" }).catch(() => undefined);
  const keys: string[] = [];
  for (const member of [alice, bob]) {
    await api("POST", "/api/v1/members", { id: member, kind: "human" });
    const body = { kind: "personal", member, scopes: ["memory:read", "memory:write"] };
    keys.push((await api("POST", "/api/v1/keys", body)).key as string);
  }
  const store = (await m.stores.create(unique("ts-ai-keys"))).name;
  const alices = mnemeTools({ store, apiKey: keys[0], baseUrl: BASE, scope: `pair:${alice}:bot` });
  const bobs = mnemeTools({ client: new Mneme({ apiKey: keys[1], baseUrl: BASE }), store });
  const prompt = "Keep Alice's locker code.";
  await generateText({
    model: scripted([[call("remember", { text: "Alice's locker code is 7316." })], [text("ok")]]),
    tools: alices, stopWhen: stepCountIs(3), prompt,
  });
  await embedded();
  const recall = [call("recall", { query: "locker code 7316" })];
  const asks = async (tools: typeof bobs): Promise<unknown> => {
    const r = await generateText({
      model: scripted([recall, [text("ok")]]), tools, stopWhen: stepCountIs(3), prompt,
    });
    return r.steps[0]?.toolResults[0]?.output;
  };
  assert.match(JSON.stringify(await asks(alices)), /7316/);
  assert.deepEqual(await asks(bobs), []);
});

test("a refused key reaches the caller as the SDK's AuthenticationError", async () => {
  const tools = mnemeTools({ apiKey: "mneme_sk_not-a-key", baseUrl: BASE });
  const result = await generateText({
    model: scripted([[call("recall", { query: "anything" })], [text("ok")]]),
    tools, stopWhen: stepCountIs(3), prompt: "What do you know?",
  });
  const [refused] = result.steps[0]?.content.filter((c) => c.type === "tool-error") ?? [];
  assert.ok(refused?.error instanceof AuthenticationError, String(refused?.error));
  assert.equal(refused.error.status, 401);
});

test("a ToolLoopAgent takes the same tools", async () => {
  const { id: storeId, name: store } = await m.stores.create(unique("ts-ai-agent"));
  const model = scripted([[call("remember", { text: "Bob is allergic to peanuts." })], [text("ok")]]);
  const agent = new ToolLoopAgent({ model, tools: mnemeTools({ store }) });
  const result = await agent.generate({ prompt: "Bob is allergic to peanuts." });
  const [written] = result.steps[0]?.toolResults ?? [];
  assert.ok(written?.toolName === "remember" && !written.dynamic);
  assert.equal((await m.get(written.output.id)).store, storeId);
});
