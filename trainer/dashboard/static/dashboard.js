// trainer dashboard: fetches the data from /api/ with the session key, draws it and keeps it
// live from the server-sent event streams. Every value from the cluster goes into the page as
// text (textContent, createTextNode, attribute setters), never as markup: no innerHTML.
"use strict";

// --- the session key (docs/dashboard.md, "Security") ---------------------------------------
// The server's redirect after login ends in #session-key=...: a fragment, never sent to a
// server. It is kept in this origin's localStorage (another port is another origin and cannot
// read it) and sent in X-CSRF-Token with every request below; the session cookie alone, which
// the browser also sends to other ports of this host, opens no data.
const KEY_STORE = "trainer-dashboard-session-key";
let memoryKey = "";

(function takeKey() {
  const found = /^#session-key=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (!found) return;
  memoryKey = found[1];
  try { localStorage.setItem(KEY_STORE, found[1]); } catch (_) { /* storage off: this tab only */ }
  history.replaceState(null, "", location.pathname + location.search);
})();

function sessionKey() {
  try { return localStorage.getItem(KEY_STORE) || memoryKey; } catch (_) { return memoryKey; }
}

function sessionEnded() {
  const note = document.getElementById("session-ended");
  if (!note || !note.hidden) return;
  note.textContent = "This page has no session (it ended, or this browser has no key for it): " +
    "open the URL that `trainer dashboard` or `trainer up` printed, the one ending in ?token=...";
  note.hidden = false;
}

// The access middleware refuses in plain text; a 403 in JSON is the cluster's answer (RBAC).
function noSession(resp) {
  return resp.status === 403 && !(resp.headers.get("content-type") || "").includes("json");
}

async function api(url, options = {}) {
  const resp = await fetch(url, { ...options, headers: { ...(options.headers || {}), "X-CSRF-Token": sessionKey() } });
  if (noSession(resp)) sessionEnded();
  return resp;
}

// A server-sent event stream read with fetch (EventSource cannot send the key): dispatches
// "open", "error" and each event as a MessageEvent; reconnects after an error, until the
// session is refused.
class EventStream extends EventTarget {
  constructor(url) {
    super();
    this.url = url;
    this.closed = false;
    this.run();
  }

  async run() {
    let delay = 1000;
    while (!this.closed) {
      try {
        const resp = await api(this.url, { headers: { Accept: "text/event-stream" } });
        if (noSession(resp)) { this.closed = true; this.dispatchEvent(new Event("error")); return; }
        if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
        delay = 1000;
        this.dispatchEvent(new Event("open"));
        const reader = resp.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            this.deliver(buffer.slice(0, end));
            buffer = buffer.slice(end + 2);
          }
        }
      } catch (_) { /* the connection broke: reconnect below */ }
      this.dispatchEvent(new Event("error"));
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 15000);
    }
  }

  deliver(block) {
    let type = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const name = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (name === "event") type = value;
      else if (name === "data") data.push(value);
    }
    if (data.length) this.dispatchEvent(new MessageEvent(type, { data: data.join("\n") }));
  }
}

const SVG = "http://www.w3.org/2000/svg";

function $(id) { return document.getElementById(id); }

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

const SHORT_DETAIL = 160;
function shorten(text) {
  const first = text.split("\n")[0];
  const more = first.length < text.length;
  if (first.length <= SHORT_DETAIL) return more ? `${first} …` : first;
  return `${first.slice(0, SHORT_DETAIL - 1)}…`;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function duration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "";
  let s = Math.max(0, Math.round(seconds));
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d) return `${d}d${h}h`;
  if (h) return `${h}h${m}m`;
  if (m) return `${m}m${s}s`;
  return `${s}s`;
}

function now() { return Date.now() / 1000; }

function age(row) { return row.created ? duration(now() - row.created) : ""; }

function eta(row) {
  if (row.eta === null || row.eta === undefined) return "";
  if (row.state !== "Running" && row.state !== "Pending") return "";
  const left = row.updated ? row.eta - (now() - row.updated) : row.eta;
  return "ETA " + duration(Math.max(0, left));
}

function progressCell(row) {
  const wrap = el("span", { class: "progress" });
  if (row.progress === null || row.progress === undefined) return wrap;
  // A plain bar rather than <progress>: a thousand native widgets are slow to paint.
  const fill = el("span", { class: "fill" });
  fill.style.width = `${row.progress}%`;
  const bar = el("span", { class: "bar" }, fill);
  bar.setAttribute("role", "progressbar");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", "100");
  bar.setAttribute("aria-valuenow", String(row.progress));
  wrap.append(bar, el("span", { class: "pct", text: `${Math.round(row.progress)}%` }));
  return wrap;
}

function stateBadge(row) {
  const badge = el("span", { class: `state state-${row.state}`, text: row.state });
  badge.setAttribute("data-state", row.state);
  return badge;
}

// What the server says of its view as a whole, from /api/info and then from each stream's
// "status" events: waiting for the Kubeflow Trainer CRDs to be installed (the pages fill in
// when they are, without a reload), and the resources not shown with why.
let streamedStatus = false;  // a stream's status is newer than /api/info's: keep it

function showStatus(status) {
  const waiting = $("waiting");
  waiting.textContent = status.waiting
    ? `${status.waiting[0].toUpperCase()}${status.waiting.slice(1)}: their objects show here once they are.`
    : "";
  waiting.hidden = !status.waiting;
  const missing = Object.entries(status.unavailable);
  $("unavailable").textContent = missing.length
    ? "Not shown: " + missing.map(([resource, why]) => `${resource} (${why})`).join(", ") + "."
    : "";
  $("unavailable").hidden = !missing.length;
}

function live(source) {
  const dot = $("live");
  dot.hidden = false;
  source.addEventListener("status", (e) => { streamedStatus = true; showStatus(JSON.parse(e.data)); });
  source.addEventListener("open", () => { dot.className = "live on"; dot.title = "live"; });
  source.addEventListener("error", () => { dot.className = "live off"; dot.title = "reconnecting"; });
}

async function header() {
  const resp = await api("/api/info");
  if (!resp.ok) return;
  const info = await resp.json();
  $("scope").textContent = info.scope + (info.cluster ? ` · ${info.cluster}` : "");
  if (!streamedStatus) showStatus(info);
}

// --- the TrainJobs list -------------------------------------------------------------------
function listPage() {
  const rows = new Map();
  const body = document.querySelector("#trainjobs tbody");
  const nsFilter = $("filter-namespace");
  const stateFilter = $("filter-state");
  const params = new URLSearchParams(location.search);

  function keyOf(row) { return `${row.namespace}/${row.name}`; }

  function draw(row) {
    const link = el("a", { href: `/trainjobs/${encodeURIComponent(row.namespace)}/${encodeURIComponent(row.name)}`, text: row.name });
    const state = el("td", { class: "state-cell" }, stateBadge(row));
    // The list shows the reason's first line, cut short; the whole of it is the tooltip and
    // the top of the TrainJob's page.
    if (row.detail) state.append(el("div", { class: "detail", text: shorten(row.detail), title: row.detail }));
    const tr = el("tr", {},
      el("td", { text: row.namespace }),
      el("td", { class: "name" }, link),
      state,
      el("td", { text: row.runtime }),
      el("td", { text: row.nodes === null ? "" : String(row.nodes) }),
      el("td", {}, progressCell(row)),
      el("td", { class: "eta", text: eta(row) }),
      el("td", { class: "age", text: age(row) }));
    tr.setAttribute("data-key", keyOf(row));
    tr.setAttribute("data-state", row.state);
    tr.setAttribute("data-namespace", row.namespace);
    tr._row = row;
    return tr;
  }

  function visible(row) {
    return (!nsFilter.value || row.namespace === nsFilter.value) &&
      (!stateFilter.value || row.state === stateFilter.value);
  }

  function namespaces() {
    const seen = new Set([...rows.values()].map((tr) => tr._row.namespace));
    if (nsFilter.value) seen.add(nsFilter.value);
    const have = new Set([...nsFilter.options].map((o) => o.value));
    for (const ns of [...seen].sort()) {
      if (!have.has(ns)) nsFilter.append(el("option", { value: ns, text: ns }));
    }
  }

  function refresh() {
    let shown = 0;
    for (const tr of rows.values()) {
      tr.hidden = !visible(tr._row);
      if (!tr.hidden) shown += 1;
    }
    $("count").textContent = `${shown} of ${rows.size}`;
    $("empty").hidden = shown !== 0;
  }

  function upsert(row) {
    const key = keyOf(row);
    const json = JSON.stringify(row);
    const old = rows.get(key);
    if (old && old._json === json) return;
    const tr = draw(row);
    tr._json = json;
    if (old) { old.replaceWith(tr); } else {
      const after = [...rows.keys()].sort().find((k) => k > key);
      body.insertBefore(tr, after ? rows.get(after) : null);
    }
    rows.set(key, tr);
  }

  function replaceAll(list) {
    // The server sends rows ordered by (namespace, name): one pass, one insertion.
    const fresh = new Map();
    const fragment = document.createDocumentFragment();
    for (const row of list) {
      const key = keyOf(row);
      const json = JSON.stringify(row);
      const old = rows.get(key);
      const tr = old && old._json === json ? old : draw(row);
      tr._json = json;
      fresh.set(key, tr);
      fragment.append(tr);
    }
    for (const [key, tr] of rows) if (fresh.get(key) !== tr) tr.remove();
    rows.clear();
    for (const [key, tr] of fresh) rows.set(key, tr);
    body.append(fragment);
    namespaces();
    refresh();
  }

  if (params.get("namespace")) nsFilter.append(el("option", { value: params.get("namespace"), text: params.get("namespace") }));
  nsFilter.value = params.get("namespace") || "";
  stateFilter.value = params.get("state") || "";
  for (const select of [nsFilter, stateFilter]) {
    select.addEventListener("change", () => {
      const q = new URLSearchParams();
      if (nsFilter.value) q.set("namespace", nsFilter.value);
      if (stateFilter.value) q.set("state", stateFilter.value);
      history.replaceState(null, "", q.toString() ? `?${q}` : location.pathname);
      refresh();
    });
  }
  const source = new EventStream("/api/stream");
  live(source);
  let drawn = false;
  source.addEventListener("snapshot", (e) => {
    replaceAll(JSON.parse(e.data));
    if (drawn) return;
    drawn = true;
    // Read by hack/bench/dashboard.py: the rows are in the page, then on the screen (the
    // frame after them was produced).
    performance.mark("trainjobs-drawn");
    requestAnimationFrame(() => setTimeout(() => performance.mark("trainjobs-painted")));
  });
  source.addEventListener("row", (e) => { upsert(JSON.parse(e.data)); namespaces(); refresh(); });
  source.addEventListener("gone", (e) => {
    const gone = JSON.parse(e.data);
    const key = keyOf(gone);
    const tr = rows.get(key);
    if (tr) { tr.remove(); rows.delete(key); refresh(); }
  });
  setInterval(() => {
    for (const tr of rows.values()) {
      tr.querySelector(".age").textContent = age(tr._row);
      tr.querySelector(".eta").textContent = eta(tr._row);
    }
  }, 1000);
}

// --- charts -------------------------------------------------------------------------------
function chart(name, points, unit, logScale) {
  const W = 340, H = 170, L = 48, R = 10, T = 24, B = 26;
  const box = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: "chart" });
  box.setAttribute("data-metric", name);
  const title = svg("text", { x: L, y: 15, class: "chart-title" });
  const last = points.length ? points[points.length - 1][1] : null;
  title.textContent = `${name}${last === null ? "" : ` = ${+last.toPrecision(6)}${unit || ""}`}`;
  box.append(title);
  if (!points.length) return box;
  // A log scale only where every value is positive (a loss spanning decades).
  const log = logScale && unit !== "%" && points.every((p) => p[1] > 0);
  if (log) box.setAttribute("data-scale", "log");
  const xs = points.map((p) => p[0]), ys = points.map((p) => (log ? Math.log10(p[1]) : p[1]));
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (unit === "%") { y0 = 0; y1 = 100; }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
  const px = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const py = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  box.append(svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  box.append(svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  for (const [y, label] of [[y0, log ? 10 ** y0 : y0], [y1, log ? 10 ** y1 : y1]]) {
    const t = svg("text", { x: L - 4, y: py(y) + 4, class: "tick", "text-anchor": "end" });
    t.textContent = String(+label.toPrecision(3));
    box.append(t);
  }
  const span = svg("text", { x: W - R, y: H - 8, class: "tick", "text-anchor": "end" });
  span.textContent = `${duration(xs[xs.length - 1] - xs[0])} of reports`;
  box.append(span);
  box.append(svg("polyline", { points: points.map((p, i) => `${px(p[0])},${py(ys[i])}`).join(" "), class: "line" }));
  for (const [i, [x, y]] of points.entries()) {
    const dot = svg("circle", { cx: px(x), cy: py(ys[i]), r: 3, class: "point" });
    const tip = svg("title");
    tip.textContent = `${new Date(x * 1000).toLocaleTimeString()}: ${y}`;
    dot.append(tip);
    box.append(dot);
  }
  return box;
}

// --- one TrainJob -------------------------------------------------------------------------
async function detailPage() {
  const heading = document.querySelector("h1[data-name]");
  const ns = heading.dataset.namespace, name = heading.dataset.name;
  const path = `${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;
  const first = await api(`/api/trainjobs/${path}`);
  if (first.status === 404) {
    document.querySelector("main").replaceChildren(el("h1", { text: "Not found" }),
      el("p", {}, `TrainJob ${ns}/${name} does not exist (or was deleted). `,
        el("a", { href: "/", text: "Back to the TrainJobs" }), "."));
    return;
  }
  if (!first.ok) return;
  let current = await first.json();
  let logAbort = null;

  function fillTable(id, items, cells) {
    const body = document.querySelector(`#${id} tbody`);
    body.replaceChildren(...items.map((item) => {
      const tr = el("tr");
      for (const cell of cells(item)) tr.append(typeof cell === "string" ? el("td", { text: cell }) : cell);
      return tr;
    }));
  }

  function when(t) { return t ? new Date(t * 1000).toLocaleString() : ""; }

  function render(d) {
    current = d;
    const row = d.row;
    $("state").replaceChildren(stateBadge(row));
    $("state-detail").textContent = row.detail;
    $("state-detail").classList.toggle("failure", row.state === "Failed");
    $("runtime").textContent = `${row.runtimeKind}/${row.runtime}`;
    $("nodes").textContent = row.nodes === null ? "" : String(row.nodes);
    $("age").textContent = age(row);
    $("progress").replaceChildren(progressCell(row));
    $("eta").textContent = eta(row);
    $("conditions").replaceChildren(...d.conditions.map((c) => el("li", { class: `cond cond-${c.status}` },
      el("span", { class: "when", text: when(c.time) }), " ",
      el("strong", { text: c.type }), ` ${c.status} `,
      el("span", { class: "reason", text: c.reason }),
      c.message ? el("div", { class: "message", text: c.message }) : null)));
    fillTable("steps", d.steps, (s) => [s.name, String(s.jobs), String(s.active), String(s.ready), String(s.succeeded), String(s.failed), String(s.suspended)]);
    fillTable("pods", d.pods, (p) => {
      const logs = el("td", { class: "log-links" });
      for (const c of p.containers) {
        logs.append(el("button", { class: "link", text: c, onclick: () => openLog(p.name, c, false, p.deleted) }));
        if (p.restarted.includes(c)) {
          logs.append(el("button", { class: "link", text: `${c} (previous)`, onclick: () => openLog(p.name, c, true, p.deleted) }));
        }
      }
      const reasons = el("td", { class: "reasons" });
      for (const r of p.reasons) reasons.append(el("div", { text: r }));
      // A pod its Job controller deleted: its last state and the log the local plane kept.
      const podName = p.deleted
        ? el("td", { class: "pod-deleted" }, p.name, " ", el("span", { class: "badge-deleted", text: "deleted" }))
        : p.name;
      return [podName, p.step, p.phase, String(p.restarts), p.node, reasons, logs];
    });
    fillTable("events", d.events, (e) => [when(e.time), e.type, e.reason, e.object, e.message + (e.count > 1 ? ` (×${e.count})` : "")]);
    const charts = [];
    if (d.charts.progress.length) charts.push(chart("progress", d.charts.progress, "%"));
    const logScale = $("log-scale").checked;
    for (const [metric, points] of Object.entries(d.charts.metrics)) charts.push(chart(metric, points, "", logScale));
    $("charts").replaceChildren(...charts);
    $("no-charts").hidden = charts.length !== 0;
    if ($("trainjob-yaml").textContent !== d.trainjobYaml) $("trainjob-yaml").textContent = d.trainjobYaml;
    const js = d.jobsetYaml || "(no JobSet yet)";
    if ($("jobset-yaml").textContent !== js) $("jobset-yaml").textContent = js;
    const suspendBtn = $("action-suspend"), resumeBtn = $("action-resume");
    const finished = row.state === "Complete" || row.state === "Failed";
    if (suspendBtn) suspendBtn.disabled = row.suspended || finished;
    if (resumeBtn) resumeBtn.disabled = !row.suspended || finished;
  }

  async function openLog(pod, container, previous, deleted) {
    if (logAbort) logAbort.abort();
    logAbort = new AbortController();
    const signal = logAbort.signal;
    const out = $("log");
    out.replaceChildren();
    $("log-target").textContent = `${pod} / ${container}${previous ? " (previous)" : ""}${deleted ? " (deleted pod: its last log)" : ""}`;
    $("log-target").dataset.pod = pod;
    $("log-target").dataset.container = container;
    $("log-target").dataset.deleted = deleted ? "1" : "";
    $("log-previous").checked = previous;
    const follow = $("log-follow").checked && !previous;
    const q = new URLSearchParams({ container, follow: follow ? "1" : "0", previous: previous ? "1" : "0" });
    try {
      const resp = await api(`/api/logs/${encodeURIComponent(ns)}/${encodeURIComponent(pod)}?${q}`, { signal });
      if (!resp.ok) {
        let message = `${resp.status}`;
        try { message = (await resp.json()).error; } catch (_) { /* not JSON */ }
        out.append(el("span", { class: "error", text: message }));
        return;
      }
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        out.append(document.createTextNode(decoder.decode(value, { stream: true })));
        if (out.textContent.length > 2000000) out.firstChild.remove();
        out.scrollTop = out.scrollHeight;
      }
    } catch (err) {
      if (err.name !== "AbortError") out.append(el("span", { class: "error", text: String(err) }));
    }
  }
  $("log-previous").addEventListener("change", () => {
    const target = $("log-target").dataset;
    if (target.pod) openLog(target.pod, target.container, $("log-previous").checked, target.deleted === "1");
  });

  for (const button of document.querySelectorAll(".actions button")) {
    button.addEventListener("click", async () => {
      const action = button.dataset.action;
      if (!confirm(`${action[0].toUpperCase()}${action.slice(1)} TrainJob ${ns}/${name}?`)) return;
      const result = $("action-result");
      result.textContent = `${action}…`;
      const resp = await api(`/api/trainjobs/${path}/${action}`, { method: "POST" });
      let body = {};
      try { body = await resp.json(); } catch (_) { body = { error: `${resp.status}` }; }
      result.textContent = resp.ok ? `${action}: done` : `${action} failed: ${body.error}`;
      result.className = resp.ok ? "ok" : "error";
    });
  }

  $("log-scale").addEventListener("change", () => render(current));
  render(current);
  const source = new EventStream(`/api/stream/${path}`);
  live(source);
  source.addEventListener("detail", (e) => render(JSON.parse(e.data)));
  source.addEventListener("gone", () => {
    $("state").replaceChildren(el("span", { class: "state state-Deleted", text: "Deleted" }));
    $("state-detail").textContent = "This TrainJob was deleted.";
  });
  setInterval(() => { $("age").textContent = age(current.row); $("eta").textContent = eta(current.row); }, 1000);
}

// --- runtimes -----------------------------------------------------------------------------
async function runtimesPage() {
  const resp = await api("/api/runtimes");
  if (!resp.ok) return;
  const body = document.querySelector("#runtimes tbody");
  const rows = await resp.json();
  body.replaceChildren(...rows.map((rt) => el("tr", {},
    el("td", { text: rt.kind }),
    el("td", { text: rt.namespace ? `${rt.namespace}/${rt.name}` : rt.name }),
    el("td", { text: rt.framework }),
    el("td", { text: rt.policy }),
    el("td", { text: rt.numNodes === null || rt.numNodes === undefined ? "" : String(rt.numNodes) }),
    el("td", { class: "images" }, ...rt.images.map((image) => el("div", { text: image }))),
    el("td", { class: "deprecated", text: rt.deprecation }))));
  if (!rows.length) {
    body.append(el("tr", {}, el("td", { class: "muted", colSpan: 7, text: "No runtimes (or no permission to list them)." })));
  }
}

// --- nodes --------------------------------------------------------------------------------
const RESOURCE_TITLES = { cpu: "CPU", memory: "Memory", pods: "Pods" };

function usageCell(u) {
  const td = el("td", { class: "usage" });
  td.setAttribute("data-resource", u.name);
  if (u.allocatable === null) {
    const asked = u.requests !== null && u.requests > 0;
    td.append(el("span", { class: "muted", text: asked ? `${u.text.requests} requested, none offered` : "—" }));
    return td;
  }
  if (u.requests === null) {
    td.append(el("div", { class: "amounts", text: `${u.text.allocatable} allocatable` }));
    return td;
  }
  const fill = el("span", { class: "fill" });
  fill.style.width = `${Math.min(100, u.percent || 0)}%`;
  const bar = el("span", { class: "bar" }, fill);
  bar.setAttribute("role", "meter");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", "100");
  bar.setAttribute("aria-valuenow", String(u.percent || 0));
  td.append(el("div", { class: "progress" }, bar, el("span", { class: "pct", text: u.percent === null ? "" : `${u.percent}%` })));
  td.append(el("div", { class: "amounts", text: `${u.text.requests} of ${u.text.allocatable} requested` }));
  const more = [`${u.text.free} free`];
  if (u.limits !== null) more.push(`limits ${u.text.limits}`);
  td.append(el("div", { class: "detail", text: more.join(" · ") }));
  return td;
}

function nodesPage() {
  const body = document.querySelector("#nodes tbody");
  const head = $("nodes-head");
  const fixed = [...head.children].slice(0, 3);
  const rows = new Map();
  let columns = 3;

  function draw(n) {
    const status = el("td", { class: "node-status" },
      el("span", { class: `state node-${n.ready}`, text: n.ready + (n.schedulable ? "" : ",SchedulingDisabled") }));
    if (n.readyDetail) status.append(el("div", { class: "detail", text: n.readyDetail }));
    for (const taint of n.taints) status.append(el("div", { class: "detail taint", text: `taint ${taint}` }));
    const gpu = n.gpuProduct ? el("td", { class: "gpu", text: n.gpuProduct }) : el("td", { class: "gpu muted", text: "—" });
    if (n.gpuMemoryMiB) gpu.append(el("div", { class: "detail", text: `${n.gpuMemoryMiB} MiB each` }));
    const tr = el("tr", {}, el("td", { class: "name", text: n.name }), status, gpu, ...n.resources.map(usageCell));
    tr.setAttribute("data-node", n.name);
    tr.setAttribute("data-ready", n.ready);
    return tr;
  }

  function summary(v) {
    $("pods-unknown").hidden = v.podsKnown;
    const pending = $("pending");
    pending.hidden = !v.pending;
    if (v.pending) {
      pending.textContent = `pending: ${v.pending.count} pod${v.pending.count === 1 ? "" : "s"} waiting for a node` +
        ` (${v.pending.pod}: ${v.pending.message || "Unschedulable"})`;
    }
  }

  function emptyNote() {
    const note = body.querySelector("tr.empty");
    if (rows.size && note) note.remove();
    if (!rows.size && !note) {
      body.append(el("tr", { class: "empty" }, el("td", { class: "muted", colSpan: columns, text: "No nodes (or no permission to list them)." })));
    }
  }

  // The whole view: the columns, then a row per node (sorted by name).
  function all(v) {
    columns = 3 + v.resources.length;
    head.replaceChildren(...fixed, ...v.resources.map((name) => el("th", { text: RESOURCE_TITLES[name] || name })));
    summary(v);
    rows.clear();
    body.replaceChildren(...v.nodes.map((n) => { const tr = draw(n); rows.set(n.name, tr); return tr; }));
    emptyNote();
  }

  // Only what changed: rows new or changed, rows gone.
  function update(u) {
    summary(u);
    for (const name of u.gone) {
      const tr = rows.get(name);
      if (tr) { tr.remove(); rows.delete(name); }
    }
    for (const n of u.nodes) {
      const tr = draw(n);
      const old = rows.get(n.name);
      if (old) { old.replaceWith(tr); } else {
        const after = [...rows.keys()].sort().find((k) => k > n.name);
        body.insertBefore(tr, after ? rows.get(after) : null);
      }
      rows.set(n.name, tr);
    }
    emptyNote();
  }

  const source = new EventStream("/api/stream/nodes");
  live(source);
  source.addEventListener("nodes", (e) => all(JSON.parse(e.data)));
  source.addEventListener("update", (e) => update(JSON.parse(e.data)));
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  header();
  if (page === "trainjobs") listPage();
  else if (page === "trainjob") detailPage();
  else if (page === "runtimes") runtimesPage();
  else if (page === "nodes") nodesPage();
});
