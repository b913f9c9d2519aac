/** The README's quickstart runs as written: its ```js block, as a file of its own that
 * imports the package by name, against the server under test. */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { BASE, KEY } from "./helpers.js";

const root = fileURLToPath(new URL("../", import.meta.url)); // dist-test/ → the package

test("the README quickstart runs as written", async () => {
  const readme = await readFile(`${root}README.md`, "utf8");
  const script = /```js\n([\s\S]*?)```/.exec(readme)?.[1];
  assert.ok(script, "README.md has a ```js block");
  // Inside the package, so that `import … from "mneme-client"` finds it by its own name.
  const path = `${root}dist-test/quickstart.mjs`;
  await writeFile(path, script);
  const env = { PATH: process.env.PATH, MNEME_API_KEY: KEY, MNEME_URL: BASE };
  const { stdout } = await promisify(execFile)(process.execPath, [path], { env, timeout: 60_000 });
  assert.match(stdout, /refused:/);
  assert.match(stdout, /decisions\/merging\.md/);
});
