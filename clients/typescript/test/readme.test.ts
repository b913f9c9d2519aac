/** The README's quickstart and docs/integrations/vercel-ai.md's example run as written:
 * each page's ```js block, as a file of its own that imports the package by name,
 * against the server under test. */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { BASE, client, KEY } from "./helpers.js";

const root = fileURLToPath(new URL("../", import.meta.url)); // dist-test/ → the package

/** The page's one ```js block, run inside the package (so that `import … from
 * "mneme-client"` finds it by its own name); its standard output. */
async function runExample(page: string, name: string): Promise<string> {
  const script = /```js\n([\s\S]*?)```/.exec(await readFile(page, "utf8"))?.[1];
  assert.ok(script, `${page} has a \`\`\`js block`);
  const path = `${root}dist-test/${name}.mjs`;
  await writeFile(path, script);
  const env = { PATH: process.env.PATH, MNEME_API_KEY: KEY, MNEME_URL: BASE };
  const { stdout } = await promisify(execFile)(process.execPath, [path], { env, timeout: 60_000 });
  return stdout;
}

test("the README quickstart runs as written", async () => {
  const stdout = await runExample(`${root}README.md`, "quickstart");
  assert.match(stdout, /refused:/);
  assert.match(stdout, /decisions\/merging\.md/);
});

test("the Vercel AI SDK page's example runs as written", async () => {
  const stdout = await runExample(`${root}../../docs/integrations/vercel-ai.md`, "vercel-ai");
  const id = /id: '([^']+)'/.exec(stdout)?.[1];
  assert.ok(stdout.startsWith("Noted: oolong.") && id, stdout);
  assert.equal((await client().get(id)).text, "Alice drinks oolong tea every morning.");
});
