// Mneme memory browser: a thin client of the JSON API. Every list, filter and detail
// comes from the same endpoints an agent uses, with the key typed in here, so the page
// can never show what the API would hide. Text is always set with textContent.
"use strict";

const KEY = "mneme.apiKey";
const NOTICE = "mneme.loginNotice"; // why the key prompt is back, across signOut's reload
const $ = (id) => document.getElementById(id);
let nextCursor = null;
let lastQuery = null;
let current = null; // the memory open in the detail panel
let browsing = 0; // the newest browse request: an older one's answer is dropped

function apiKey() {
  return sessionStorage.getItem(KEY);
}

async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${apiKey()}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  // A proxy's 502 page or an empty body is no JSON: the status still says what happened.
  const raw = resp.status === 204 ? "" : await resp.text();
  let data = null;
  try { data = raw ? JSON.parse(raw) : null; } catch { data = null; }
  if (!resp.ok) {
    const message = data && data.error
      ? data.error.message : `HTTP ${resp.status} ${resp.statusText}`.trim();
    const err = new Error(message);
    err.status = resp.status;
    throw err;
  }
  return data;
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

// Back to the key prompt: the key is forgotten and the page starts afresh, so nothing the
// last key was shown (lists, a memory's detail and versions, search results, stores,
// charts) is left on screen, or acted on, for whoever types the next key.
function signOut(message) {
  sessionStorage.removeItem(KEY);
  if (message) sessionStorage.setItem(NOTICE, message);
  location.reload();
}

function showLogin(message) {
  $("login").hidden = false;
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login-error").textContent = message || "";
}

async function enter() {
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  await browse(true);
}

// --- browse ------------------------------------------------------------------------------

function filterQuery() {
  const form = new FormData($("filters"));
  const params = new URLSearchParams();
  for (const [name, value] of form.entries()) {
    if (String(value).trim() !== "") params.set(name, String(value).trim());
  }
  return params;
}

function memoryItem(m) {
  const li = el("li", null, "memory");
  li.dataset.id = m.id;
  li.tabIndex = 0;
  li.append(el("span", m.text, "text"));
  const tags = el("span", null, "tags");
  for (const t of [m.tier, m.factType, m.status, m.scope, m.provider]) {
    if (t) tags.append(el("span", t, "tag"));
  }
  li.append(tags);
  li.append(el("time", m.lastUsedAt, "when"));
  li.addEventListener("click", () => openDetail(m.id));
  li.addEventListener("keydown", (e) => { if (e.key === "Enter") openDetail(m.id); });
  return li;
}

async function browse(fresh) {
  $("browse-error").textContent = "";
  if (fresh) {
    lastQuery = filterQuery();
    nextCursor = null;
    $("memories").replaceChildren();
  }
  const params = new URLSearchParams(lastQuery);
  if (nextCursor) params.set("cursor", nextCursor);
  const mine = ++browsing;
  $("load-more").disabled = true; // one page at a time: a double click fetches it once
  try {
    const page = await api("GET", `/api/v1/memories?${params}`);
    if (mine !== browsing) return; // the filters changed meanwhile: a newer list is coming
    for (const m of page.data) $("memories").append(memoryItem(m));
    nextCursor = page.cursor;
    $("load-more").hidden = !page.hasMore;
    const meta = page.meta;
    let text = `Scanned ${meta.scannedCount} memories in this window; ${page.data.length} shown`;
    if (meta.hiddenObservationCount) {
      text += `, ${meta.hiddenObservationCount} observations hidden (filter by fact type to see them)`;
    }
    if (meta.limitCapped) text += ` (window capped at ${meta.maxLimit})`;
    $("meta").textContent = text + ".";
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    if (mine === browsing) $("browse-error").textContent = err.message;
  } finally {
    if (mine === browsing) $("load-more").disabled = false;
  }
}

// --- versions as diffs -------------------------------------------------------------------

// Words and the spaces between them, so a diff keeps the text's own spacing.
function tokens(text) {
  return (text || "").split(/(\s+)/).filter((t) => t !== "");
}

// A word-level diff (longest common subsequence): [{op: "same"|"del"|"ins", text}].
function diff(before, after) {
  const a = tokens(before);
  const b = tokens(after);
  if (a.length * b.length > 4e6) return [{ op: "del", text: before }, { op: "ins", text: after }];
  const common = Array.from({ length: a.length + 1 }, () => new Uint32Array(b.length + 1));
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      common[i][j] = a[i] === b[j]
        ? common[i + 1][j + 1] + 1
        : Math.max(common[i + 1][j], common[i][j + 1]);
    }
  }
  const parts = [];
  const push = (op, text) => {
    const last = parts[parts.length - 1];
    if (last && last.op === op) last.text += text; else parts.push({ op, text });
  };
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) { push("same", a[i]); i++; j++; }
    else if (common[i + 1][j] >= common[i][j + 1]) push("del", a[i++]);
    else push("ins", b[j++]);
  }
  while (i < a.length) push("del", a[i++]);
  while (j < b.length) push("ins", b[j++]);
  return parts;
}

function diffNode(before, after) {
  const node = el("p", null, "diff");
  for (const part of diff(before, after)) {
    node.append(part.op === "same" ? document.createTextNode(part.text) : el(part.op, part.text));
  }
  return node;
}

// Versions newest first, each with what it changed in the text against the one before.
function versionList(list, versions) {
  list.replaceChildren();
  versions.forEach((v, k) => {
    const older = versions[k + 1];
    const li = el("li");
    li.append(el("span", `${v.created_at} · ${v.operation} · ${v.status} · ${v.actor || "?"}`));
    if (v.text === null) {
      // Written in a scope this key cannot read: the service keeps that text back.
      li.append(el("p", "text written in a scope this key cannot read", "hint"));
    } else if (v.text !== undefined) {
      if (!older || older.text === null) li.append(diffNode("", v.text));
      else if (older.text !== v.text) li.append(diffNode(older.text, v.text));
      else li.append(el("p", "text unchanged", "hint"));
    }
    list.append(li);
  });
}

// --- detail ------------------------------------------------------------------------------

function clearDetail() {
  current = null;
  for (const name of ["detail-id", "detail-text", "detail-error"]) $(name).textContent = "";
  $("detail-fields").replaceChildren();
  $("versions").replaceChildren();
  $("archive").hidden = true;
  $("restore").hidden = true;
}

// A memory's whole trail, with each version's text, page by page (100 at most a page).
async function allVersions(id) {
  const base = `/api/v1/memories/${encodeURIComponent(id)}/versions?include=text&limit=100`;
  const data = [];
  for (let cursor = null, first = true; first || cursor; first = false) {
    const page = await api("GET", cursor ? `${base}&cursor=${encodeURIComponent(cursor)}` : base);
    data.push(...page.data);
    cursor = page.has_more ? page.next_cursor : null;
  }
  return { data };
}

async function openDetail(id) {
  clearDetail(); // nothing of the memory open before stays, nor can be archived, if this fails
  try {
    const [m, versions] = await Promise.all([
      api("GET", `/api/v1/memories/${encodeURIComponent(id)}`),
      allVersions(id),
    ]);
    current = m;
    $("detail").hidden = false;
    $("detail-id").textContent = m.id;
    $("detail-text").textContent = m.text;
    const fields = $("detail-fields");
    fields.replaceChildren();
    const shown = ["status", "tier", "factType", "scope", "store", "speaker", "provider",
      "providerRef", "category", "importance", "proofCount", "entityRefs", "path",
      "eventDate", "firstSeenAt", "lastUsedAt", "supersededBy", "embeddingStatus"];
    for (const name of shown) {
      const value = m[name];
      if (value === null || value === undefined || (Array.isArray(value) && !value.length)) continue;
      fields.append(el("dt", name), el("dd", Array.isArray(value) ? value.join(", ") : value));
    }
    $("archive").hidden = m.status !== "active";
    $("restore").hidden = m.status === "active";
    versionList($("versions"), versions.data);
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    $("detail").hidden = false;
    $("detail-error").textContent = err.message;
  }
}

async function setStatus(status) {
  if (!current) return;
  try {
    await api("PATCH", `/api/v1/memories/${encodeURIComponent(current.id)}`, { status });
    await openDetail(current.id);
    await browse(true);
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    $("detail-error").textContent = err.message;
  }
}

// --- search ------------------------------------------------------------------------------

async function search() {
  $("search-error").textContent = "";
  const form = new FormData($("search-form"));
  const body = {
    user_id: String(form.get("user_id")),
    query: String(form.get("query")),
    max_results: Number(form.get("max_results")),
  };
  try {
    const answer = await api("POST", "/api/v1/memory/search", body);
    const list = $("results");
    list.replaceChildren();
    const found = [
      ...answer.memories.map((m) => [m, null]),
      ...(answer.self_memories || []).map((m) => [m, "own words"]),
      ...(answer.images || []).map((m) => [m, "image"]),
    ];
    for (const [m, kind] of found) {
      const li = el("li", null, "memory");
      li.tabIndex = 0;
      li.append(el("span", m.content, "text"));
      const tags = el("span", null, "tags");
      tags.append(el("span", `similarity ${Number(m.similarity).toFixed(2)}`, "tag"));
      if (kind) tags.append(el("span", kind, "tag"));
      if (m.speaker) tags.append(el("span", m.speaker, "tag"));
      li.append(tags);
      li.addEventListener("click", () => openDetail(m.id));
      li.addEventListener("keydown", (e) => { if (e.key === "Enter") openDetail(m.id); });
      list.append(li);
    }
    if (answer.warnings && answer.warnings.length) {
      $("search-error").textContent = answer.warnings.join(" ");
    }
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    $("search-error").textContent = err.status === 404 && /No route/.test(err.message)
      ? "Search is not available on this server yet."
      : err.message;
  }
}

// --- stores: path tree, file, edit under the sha256 precondition -------------------------

const STORES = "/api/v1/forward/memory_stores";
let openStore = null;
let openFile = null;

// Every item of a Memory Store list, page after page (has_more / last_id).
async function allPages(path) {
  const items = [];
  let after = null;
  do {
    const params = new URLSearchParams({ limit: "100" });
    if (after) params.set("after_id", after);
    const page = await api("GET", `${path}?${params}`);
    items.push(...page.data);
    after = page.has_more ? page.last_id : null;
  } while (after);
  return items;
}

function fileUrl(memoryId) {
  return `${STORES}/${encodeURIComponent(openStore.id)}/memories/${encodeURIComponent(memoryId)}`;
}

async function loadStores() {
  $("stores-error").textContent = "";
  try {
    const stores = await allPages(STORES);
    const list = $("store-list");
    list.replaceChildren();
    for (const store of stores) {
      const button = el("button", store.name);
      button.dataset.id = store.id;
      button.addEventListener("click", () => openStoreTree(store));
      const li = el("li");
      li.append(button);
      list.append(li);
    }
    const again = openStore && stores.find((s) => s.id === openStore.id);
    if (again || stores.length) await openStoreTree(again || stores[0]);
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    $("stores-error").textContent = err.message;
  }
}

// Paths split at "/" into folders (kept open) and files.
function buildTree(files) {
  const root = { dirs: new Map(), files: [] };
  for (const file of files) {
    const parts = file.path.split("/").filter(Boolean);
    let node = root;
    for (const dir of parts.slice(0, -1)) {
      if (!node.dirs.has(dir)) node.dirs.set(dir, { dirs: new Map(), files: [] });
      node = node.dirs.get(dir);
    }
    node.files.push({ name: parts[parts.length - 1] || file.path, file });
  }
  return root;
}

function treeNodes(node) {
  const items = [];
  for (const [name, child] of node.dirs) {
    const li = el("li");
    li.setAttribute("role", "treeitem");
    const folder = document.createElement("details");
    folder.open = true;
    const group = el("ul");
    group.setAttribute("role", "group");
    group.append(...treeNodes(child));
    folder.append(el("summary", `${name}/`), group);
    li.append(folder);
    items.push(li);
  }
  for (const { name, file } of node.files) {
    const li = el("li");
    li.setAttribute("role", "treeitem");
    const button = el("button", name);
    button.dataset.path = file.path;
    button.title = file.path;
    button.addEventListener("click", () => openFileView(file.id));
    li.append(button);
    items.push(li);
  }
  return items;
}

async function openStoreTree(store) {
  openStore = store;
  openFile = null;
  $("file").hidden = true;
  for (const b of $("store-list").querySelectorAll("button")) {
    b.setAttribute("aria-current", String(b.dataset.id === store.id));
  }
  $("tree-title").textContent = `Files of ${store.name}`;
  try {
    const files = await allPages(`${STORES}/${encodeURIComponent(store.id)}/memories`);
    $("file-tree").replaceChildren(...treeNodes(buildTree(files)));
    $("tree-empty").hidden = files.length > 0;
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    $("stores-error").textContent = err.message;
  }
}

async function openFileView(memoryId) {
  $("file-error").textContent = "";
  $("file-status").textContent = "";
  try {
    const [file, versions] = await Promise.all([
      api("GET", fileUrl(memoryId)),
      allVersions(memoryId),
    ]);
    openFile = file;
    $("file").hidden = false;
    $("file-path").textContent = file.path;
    $("file-sha").textContent = file.content_sha256;
    $("file-text").value = file.content;
    versionList($("file-versions"), versions.data);
    for (const b of $("file-tree").querySelectorAll("button")) {
      b.setAttribute("aria-current", String(b.dataset.path === file.path));
    }
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    $("file-error").textContent = err.message;
  }
}

// Saved only if the stored content still has the sha256 shown: a change made elsewhere
// since the file was opened is never overwritten.
async function saveFile() {
  if (!openFile) return;
  $("file-error").textContent = "";
  $("file-status").textContent = "";
  const body = { content: $("file-text").value, content_sha256: openFile.content_sha256 };
  try {
    const saved = await api("POST", fileUrl(openFile.id), body);
    await openFileView(saved.id);
    $("file-status").textContent = "Saved.";
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    $("file-error").textContent = err.status === 409
      ? `Not saved: the file changed since you opened it. Reopen it to see the change. (${err.message})`
      : err.message;
  }
}

// --- overview: charts of writes, the embedding queue and billed search units ---------------

const PALETTE = ["#3b5bdb", "#e8590c", "#2f9e44", "#ae3ec9", "#1098ad", "#f08c00", "#c92a2a"];
const charts = {};
const queue = { at: [], waiting: [] };
let queueTimer = null;

function isoDay(ms) {
  return new Date(ms).toISOString().slice(0, 10);
}

function chart(id, series, data, extra) {
  const box = $(id);
  if (charts[id]) charts[id].destroy();
  box.replaceChildren();
  if (typeof uPlot === "undefined") {
    box.append(el("p", "The charting library did not load.", "hint"));
    return;
  }
  const opts = { width: Math.max(280, box.clientWidth || 360), height: 200,
    series: [{}, ...series], ...extra };
  charts[id] = new uPlot(opts, data, box);
}

async function overview() {
  $("overview-error").textContent = "";
  const now = Date.now();
  const days = Array.from({ length: 30 }, (_, k) => isoDay(now - (29 - k) * 864e5));
  const at = days.map((d) => Date.parse(`${d}T00:00:00Z`) / 1000);
  const index = new Map(days.map((d, k) => [d, k]));
  const range = `from=${days[0]}&to=${days[days.length - 1]}`;
  try {
    const [written, usage] = await Promise.all([
      api("GET", `/api/v1/activity?${range}`),
      api("GET", `/api/v1/usage?${range}`),
    ]);
    const stores = [...new Set(written.data.map((r) => r.store))].sort();
    const perStore = stores.map(() => days.map(() => 0));
    for (const r of written.data) perStore[stores.indexOf(r.store)][index.get(r.day)] += r.written;
    const totals = perStore.map((counts) => counts.reduce((a, b) => a + b, 0));
    chart("chart-written", stores.map((name, k) => ({
      label: name, stroke: PALETTE[k % PALETTE.length], width: 2, points: { show: true },
    })), [at, ...perStore]);
    const total = totals.reduce((a, b) => a + b, 0);
    $("written-summary").textContent = `${total} memories written`
      + (stores.length ? `: ${stores.map((s, k) => `${s} ${totals[k]}`).join(", ")}` : "");

    const units = days.map(() => 0);
    let billed = 0;
    let searches = 0;
    for (const r of usage.data) {
      if (r.endpoint !== "search") continue;
      units[index.get(r.day)] += r.units;
      billed += r.units;
      searches += r.requests;
    }
    chart("chart-units", [{ label: "search units", stroke: "#2f9e44",
      fill: "rgba(47, 158, 68, 0.3)", paths: uPlot.paths.bars({ size: [0.6, 40] }) }], [at, units]);
    $("units-summary").textContent = `${searches} searches, ${billed.toFixed(1)} units billed`;
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    $("overview-error").textContent = err.message;
  }
  await showWebhooks();
  await sampleQueue();
  if (!queueTimer) queueTimer = setInterval(sampleQueue, 5000);
}

// The workspace's webhooks, their backlog and failures: only an admin key may see them.
async function showWebhooks() {
  const figure = $("webhooks-figure");
  try {
    const body = await api("GET", "/api/v1/webhooks");
    const { pending, failedLastDay } = body.meta;
    const n = body.data.length;
    $("webhooks-summary").textContent = `${n} webhook${n === 1 ? "" : "s"}: `
      + `${pending >= 10000 ? "10000+" : pending} deliveries waiting, `
      + `${failedLastDay} failed in the last 24 h`;
    $("webhooks-summary").className = failedLastDay ? "error" : "";
    $("webhooks-list").replaceChildren(...body.data.map((w) =>
      el("li", `${w.url} (${w.events.join(", ")}${w.store ? `; store ${w.store}` : ""})`)));
    figure.hidden = false;
  } catch (err) {
    if (err.status === 401) return signOut(err.message);
    figure.hidden = true; // 403: not an admin key
  }
}

async function sampleQueue() {
  if ($("panel-overview").hidden) {
    clearInterval(queueTimer);
    queueTimer = null;
    return;
  }
  try {
    const body = await (await fetch("/readyz")).json();
    const waiting = Number(body.embeddingQueue || 0);
    queue.at.push(Date.now() / 1000);
    queue.waiting.push(waiting);
    if (queue.at.length > 120) { queue.at.shift(); queue.waiting.shift(); }
    if (charts["chart-queue"]) charts["chart-queue"].setData([queue.at, queue.waiting]);
    else chart("chart-queue", [{ label: "waiting", stroke: "#e8590c", width: 2,
      points: { show: true } }], [queue.at, queue.waiting]);
    $("queue-summary").textContent = `${waiting} waiting now (service ${body.status})`;
  } catch (err) {
    $("queue-summary").textContent = `The queue could not be read: ${err.message}`;
  }
}

// --- connected apps: OAuth grants of this key (an admin key: the workspace's) ------------

async function loadApps() {
  $("apps-error").textContent = "";
  const body = $("apps").tBodies[0];
  try {
    const grants = (await api("GET", "/api/v1/oauth/grants")).data;
    body.replaceChildren(...grants.map(appRow));
    $("apps-empty").hidden = grants.length > 0;
  } catch (err) {
    if (err.status === 401) return signOut("That key is not valid any more.");
    $("apps-error").textContent = err.message;
  }
}

function appRow(grant) {
  const row = document.createElement("tr");
  const may = grant.scopes.includes("memory:write") ? "read and write" : "read";
  for (const text of [grant.client_name || grant.client_id, grant.redirect_hosts.join(", "),
    may, grant.store, grant.created_at.slice(0, 10), (grant.last_used_at || "").slice(0, 10)]) {
    row.append(el("td", text));
  }
  const cell = el("td");
  const button = el("button", "Disconnect");
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await api("DELETE", `/api/v1/oauth/grants/${encodeURIComponent(grant.id)}`);
      await loadApps();
    } catch (err) {
      $("apps-error").textContent = err.message;
      button.disabled = false;
    }
  });
  cell.append(button);
  row.append(cell);
  return row;
}

// --- wiring ------------------------------------------------------------------------------

function selectTab(name) {
  for (const tab of document.querySelectorAll("[role=tab]")) {
    const on = tab.dataset.panel === name;
    tab.setAttribute("aria-selected", String(on));
    $(`panel-${tab.dataset.panel}`).hidden = !on;
  }
  if (name === "stores") loadStores();
  if (name === "overview") overview();
  if (name === "apps") loadApps();
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const typed = $("api-key").value.trim();
    $("api-key").value = "";
    if (!/^[\x21-\x7e]+$/.test(typed)) { // a header carries it: visible ASCII only
      return showLogin("An API key is visible ASCII characters without spaces.");
    }
    sessionStorage.setItem(KEY, typed);
    await enter();
  });
  $("logout").addEventListener("click", () => signOut());
  $("filters").addEventListener("submit", (e) => { e.preventDefault(); browse(true); });
  $("load-more").addEventListener("click", () => browse(false));
  $("close-detail").addEventListener("click", () => { $("detail").hidden = true; current = null; });
  $("archive").addEventListener("click", () => setStatus("archived"));
  $("restore").addEventListener("click", () => setStatus("active"));
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); search(); });
  $("file-edit").addEventListener("submit", (e) => { e.preventDefault(); saveFile(); });
  for (const tab of document.querySelectorAll("[role=tab]")) {
    tab.addEventListener("click", () => selectTab(tab.dataset.panel));
  }
  const notice = sessionStorage.getItem(NOTICE);
  sessionStorage.removeItem(NOTICE);
  if (apiKey()) enter(); else showLogin(notice);
});
