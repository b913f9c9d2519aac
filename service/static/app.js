// Mneme memory browser: a thin client of the JSON API. Every list, filter and detail
// comes from the same endpoints an agent uses, with the key typed in here, so the page
// can never show what the API would hide. Text is always set with textContent.
"use strict";

const KEY = "mneme.apiKey";
const $ = (id) => document.getElementById(id);
let nextCursor = null;
let lastQuery = null;
let current = null; // the memory open in the detail panel

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
  const data = resp.status === 204 ? null : await resp.json();
  if (!resp.ok) {
    const message = data && data.error ? data.error.message : `HTTP ${resp.status}`;
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
  try {
    const page = await api("GET", `/api/v1/memories?${params}`);
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
    if (err.status === 401) return showLogin(err.message);
    $("browse-error").textContent = err.message;
  }
}

// --- detail ------------------------------------------------------------------------------

async function openDetail(id) {
  $("detail-error").textContent = "";
  try {
    const [m, versions] = await Promise.all([
      api("GET", `/api/v1/memories/${encodeURIComponent(id)}`),
      api("GET", `/api/v1/memories/${encodeURIComponent(id)}/versions`),
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
    const list = $("versions");
    list.replaceChildren();
    for (const v of versions.data) {
      list.append(el("li", `${v.created_at} · ${v.operation} · ${v.status} · ${v.actor || "?"}`));
    }
  } catch (err) {
    if (err.status === 401) return showLogin(err.message);
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
    for (const m of answer.memories.concat(answer.self_memories || [])) {
      const li = el("li", null, "memory");
      li.append(el("span", m.content, "text"));
      const tags = el("span", null, "tags");
      tags.append(el("span", `similarity ${Number(m.similarity).toFixed(2)}`, "tag"));
      if (m.speaker) tags.append(el("span", m.speaker, "tag"));
      li.append(tags);
      li.addEventListener("click", () => openDetail(m.id));
      list.append(li);
    }
  } catch (err) {
    if (err.status === 401) return showLogin(err.message);
    $("search-error").textContent = err.status === 404 && /No route/.test(err.message)
      ? "Search is not available on this server yet."
      : err.message;
  }
}

// --- wiring ------------------------------------------------------------------------------

function selectTab(name) {
  for (const tab of document.querySelectorAll("[role=tab]")) {
    const on = tab.dataset.panel === name;
    tab.setAttribute("aria-selected", String(on));
    $(`panel-${tab.dataset.panel}`).hidden = !on;
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY, $("api-key").value.trim());
    $("api-key").value = "";
    await enter();
  });
  $("logout").addEventListener("click", () => {
    sessionStorage.removeItem(KEY);
    showLogin();
  });
  $("filters").addEventListener("submit", (e) => { e.preventDefault(); browse(true); });
  $("load-more").addEventListener("click", () => browse(false));
  $("close-detail").addEventListener("click", () => { $("detail").hidden = true; current = null; });
  $("archive").addEventListener("click", () => setStatus("archived"));
  $("restore").addEventListener("click", () => setStatus("active"));
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); search(); });
  for (const tab of document.querySelectorAll("[role=tab]")) {
    tab.addEventListener("click", () => selectTab(tab.dataset.panel));
  }
  if (apiKey()) enter(); else showLogin();
});
