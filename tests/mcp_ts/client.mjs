// An agent written with the official TypeScript MCP SDK, connecting to Mneme's /mcp over
// Streamable HTTP with only a URL and a key (tests/test_mcp_http.py runs it):
//   node client.mjs URL KEY
// Prints one JSON line: the tools listed, what remember and recall answered, or the error.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { run, structured } from "./common.mjs";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key] = process.argv.slice(2);


async function main() {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  const client = new Client({ name: "mneme-ts-check", version: "0.1.0" });
  await client.connect(transport);
  try {
    const tools = (await client.listTools()).tools.map((t) => t.name).sort();
    const remembered = structured(
      await client.callTool({
        name: "remember",
        arguments: { text: "The TypeScript agent prefers tabs over spaces." },
      }),
    );
    const recalled = structured(
      await client.callTool({
        name: "recall",
        arguments: { query: "Does the TypeScript agent prefer tabs or spaces?", max_results: 5 },
      }),
    );
    return { tools, remembered, recalled };
  } finally {
    await client.close();
  }
}

run(main);
