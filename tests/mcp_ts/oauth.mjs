// An agent written with the official TypeScript MCP SDK, given only Mneme's /mcp URL: it
// discovers OAuth from the 401, registers, sends "the person" to the consent page (played
// here over HTTP with KEY, as tests/oauth_flow.py does), finishes with the code, then
// remembers, waits out its access token and recalls (the SDK refreshes on the 401).
// tests/test_oauth_typescript.py runs it:
//   node oauth.mjs URL KEY WAIT_MS
// Prints one JSON line: what remember and recall answered and the tokens seen, or the error.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { run, structured } from "./common.mjs";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key, waitMs] = process.argv.slice(2);
const REDIRECT = "http://127.0.0.1:9/callback"; // never dialled: the Location is read

function hidden(html, name) {
  const match = html.match(new RegExp(`name="${name}" value="([^"]*)"`));
  if (!match) throw new Error(`no ${name} field in the consent page`);
  return match[1];
}

// A person at the consent page: open it, type the key, press Allow; the code comes back
// on the redirect to the client.
async function consent(authorizationUrl) {
  const page = await fetch(authorizationUrl);
  if (page.status !== 200) throw new Error(`consent page: ${page.status}`);
  const html = await page.text();
  const cookie = page.headers.getSetCookie().map((c) => c.split(";")[0]).join("; ");
  const form = new URLSearchParams({
    request: hidden(html, "request"),
    csrf: hidden(html, "csrf"),
    key,
    access: "write",
    store: "default",
    decision: "approve",
  });
  const answer = await fetch(page.url.split("?")[0], {
    method: "POST",
    body: form,
    headers: { cookie },
    redirect: "manual",
  });
  const location = answer.headers.get("location");
  if (answer.status !== 303 || !location) throw new Error(`consent answer: ${answer.status}`);
  return new URL(location).searchParams.get("code");
}

class Provider {
  constructor() {
    this.saved = [];
    this.code = null;
  }
  get redirectUrl() {
    return REDIRECT;
  }
  get clientMetadata() {
    return {
      client_name: "mneme-ts-oauth-check",
      redirect_uris: [REDIRECT],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() {
    return this.client;
  }
  saveClientInformation(info) {
    this.client = info;
  }
  tokens() {
    return this.saved.at(-1);
  }
  saveTokens(tokens) {
    this.saved.push(tokens);
  }
  async redirectToAuthorization(authorizationUrl) {
    this.code = await consent(authorizationUrl.toString());
  }
  saveCodeVerifier(verifier) {
    this.verifier = verifier;
  }
  codeVerifier() {
    return this.verifier;
  }
}


async function connect(provider) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: provider });
  const client = new Client({ name: "mneme-ts-oauth-check", version: "0.1.0" });
  try {
    await client.connect(transport);
    return client;
  } catch (err) {
    if (!(err instanceof UnauthorizedError) || !provider.code) throw err;
  }
  await transport.finishAuth(provider.code); // the code for tokens, with the PKCE verifier
  const authorized = new Client({ name: "mneme-ts-oauth-check", version: "0.1.0" });
  await authorized.connect(
    new StreamableHTTPClientTransport(new URL(url), { authProvider: provider }),
  );
  return authorized;
}

async function main() {
  const provider = new Provider();
  const client = await connect(provider);
  try {
    const remembered = structured(
      await client.callTool({
        name: "remember",
        arguments: { text: "The TypeScript OAuth agent keeps its notes in Lisbon." },
      }),
    );
    await new Promise((resolve) => setTimeout(resolve, Number(waitMs)));
    const recalled = structured(
      await client.callTool({
        name: "recall",
        arguments: { query: "Where does the TypeScript OAuth agent keep its notes?" },
      }),
    );
    return { remembered, recalled, tokens: provider.saved };
  } finally {
    await client.close();
  }
}

run(main);
