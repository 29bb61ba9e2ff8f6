// sandlot view: a small single-page app over the JSON API in server.py.
// Plain JS, no build step, no dependencies. Every text from a job goes in through
// textContent (the `h` helper), never as HTML.
"use strict";

// ------------------------------------------------------------------ helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") el.textContent = v;
    else if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

// Children for append/replaceChildren, without the nulls of conditional parts.
const kids = (...a) => a.flat().filter((x) => x !== null && x !== undefined && x !== false);

const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path) {
  const res = await fetch(path, { cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.error || `${res.status} ${res.statusText}`);
  return body;
}

const enc = encodeURIComponent;
const isNum = (v) => typeof v === "number" && isFinite(v);
const pct = (v) => (isNum(v) ? `${(v * 100).toFixed(1)}%` : "—");
const num = (v, d = 3) => (isNum(v) ? v.toFixed(d) : "—");
const money = (v) => (isNum(v) ? `$${v.toFixed(v < 0.01 && v > 0 ? 5 : 4)}` : "—");
const secs = (v) => (isNum(v) ? (v >= 100 ? `${v.toFixed(0)}s` : v >= 1 ? `${v.toFixed(1)}s`
  : `${(v * 1000).toFixed(0)}ms`) : "—");
function tokens(v) {
  if (!isNum(v)) return "—";
  if (v >= 1e6) return `${(v / 1e6).toFixed(2)}M`;
  if (v >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return String(v);
}
function when(v) {
  if (v === null || v === undefined) return "—";
  const d = typeof v === "number" ? new Date(v * 1000) : new Date(v);
  return isNaN(d) ? String(v) : d.toLocaleString();
}
const badge = (status) => h("span", { class: `badge b-${String(status).replace(/ /g, "-")}`,
  text: status });

function crumbs(...items) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren();
  items.forEach((it, i) => {
    if (i) nav.append(" / ");
    nav.append(it.href ? h("a", { href: it.href, text: it.text }) : h("span", { text: it.text }));
  });
}

function setLive(on) { document.getElementById("live").hidden = !on; }

function pretty(value) {
  if (typeof value === "string") {
    try { return JSON.stringify(JSON.parse(value), null, 2); } catch { return value; }
  }
  return JSON.stringify(value, null, 2);
}

// A <pre> that shows the first `lines` lines with a button to expand.
function longText(text, { lines = 40, cls = "" } = {}) {
  text = text ?? "";
  const all = text.split("\n");
  const pre = h("pre", { class: cls });
  if (all.length <= lines) { pre.textContent = text; return pre; }
  pre.textContent = all.slice(0, lines).join("\n");
  const btn = h("button", { class: "small", text: `show all ${all.length} lines`,
    onclick: () => { pre.textContent = text; btn.remove(); } });
  return h("div", {}, pre, btn);
}

function truncNote(obj, key) {
  const n = obj[`${key}_truncated`];
  return n ? h("div", { class: "muted small",
    text: `(${n.toLocaleString()} characters; the first 20,000 are shown — see raw)` }) : "";
}

function diffView(text) {
  const pre = h("pre", { class: "diff" });
  for (const line of (text || "").split("\n")) {
    const cls = line.startsWith("+") && !line.startsWith("+++") ? "add"
      : line.startsWith("-") && !line.startsWith("---") ? "del"
        : line.startsWith("@@") ? "hunk" : "";
    pre.append(h("span", { class: cls, text: line + "\n" }));
  }
  return pre;
}

// ------------------------------------------------------------------ router

let timers = [];
function every(ms, fn) { const t = setInterval(fn, ms); timers.push(t); return t; }
function clearTimers() { timers.forEach(clearInterval); timers = []; setLive(false); }

const app = document.getElementById("app");

function route() {
  clearTimers();
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  let page;
  if (parts[0] === "job" && parts[2] === "trial" && parts[3]) page = trialPage(parts[1], parts[3]);
  else if (parts[0] === "job" && parts[1]) page = jobPage(parts[1], params);
  else if (parts[0] === "compare") page = comparePage((params.get("jobs") || "").split(",")
    .filter(Boolean));
  else page = jobsPage();
  page.catch((err) => {
    app.replaceChildren(h("div", { class: "errbox" }, h("b", { text: "Could not load: " }),
      err.message));
  });
}
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", route);

// ------------------------------------------------------------------ sortable tables

function dataTable(columns, rows, { onRow, empty = "Nothing to show.", sortKey, desc } = {}) {
  const state = { key: sortKey, desc: !!desc };
  const wrap = h("div", { class: "wrap" });
  function render() {
    const sorted = rows.slice();
    if (state.key) {
      const col = columns.find((c) => c.key === state.key);
      const get = col.sort || ((r) => r[col.key]);
      sorted.sort((a, b) => {
        const x = get(a), y = get(b);
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * (state.desc ? -1 : 1);
      });
    }
    const thead = h("tr", {}, columns.map((c) => h("th", {
      class: `${c.num ? "num" : ""} ${c.key ? "sort" : ""}`,
      title: c.title,
      onclick: c.key ? () => {
        state.desc = state.key === c.key ? !state.desc : !!c.num;
        state.key = c.key; render();
      } : null,
    }, c.label + (state.key === c.key && c.key ? (state.desc ? " ↓" : " ↑") : ""))));
    const body = sorted.length ? sorted.map((r) => {
      const tr = h("tr", { class: onRow ? "click" : "" },
        columns.map((c) => h("td", { class: c.num ? "num" : "" }, c.cell ? c.cell(r)
          : (r[c.key] ?? "—"))));
      if (onRow) tr.addEventListener("click", (ev) => {
        if (ev.target.closest("a, input, button")) return;
        onRow(r, ev);
      });
      return tr;
    }) : [h("tr", {}, h("td", { colspan: columns.length, class: "muted center", text: empty }))];
    wrap.replaceChildren(h("table", { class: "data" }, h("thead", {}, thead),
      h("tbody", {}, body)));
  }
  render();
  wrap.refresh = (newRows) => { rows = newRows; render(); };
  return wrap;
}

// ------------------------------------------------------------------ jobs list

async function jobsPage() {
  crumbs({ text: "jobs" });
  const data = await api("/api/jobs");
  const selected = new Set();
  const compareBtn = h("button", { disabled: true, id: "compare-btn",
    onclick: () => { location.hash = `#/compare?jobs=${[...selected].map(enc).join(",")}`; } },
  "Compare selected");
  const updateBtn = () => {
    compareBtn.disabled = selected.size < 2;
    compareBtn.textContent = `Compare selected (${selected.size})`;
  };
  const columns = [
    { label: "", cell: (r) => h("input", { type: "checkbox", "aria-label": `select ${r.name}`,
      onchange: (ev) => { ev.target.checked ? selected.add(r.name) : selected.delete(r.name);
        updateBtn(); } }) },
    { label: "job", key: "name", cell: (r) => h("a", { href: `#/job/${enc(r.name)}`,
      text: r.name }) },
    { label: "date", key: "created", cell: (r) => when(r.started_at || r.created) },
    { label: "agent", key: "agent" },
    { label: "model", key: "model", cell: (r) => r.model || "—" },
    { label: "tasks", key: "n_tasks", num: true },
    { label: "trials", key: "n_trials", num: true,
      cell: (r) => `${r.n_trials}/${r.n_trials_planned}` },
    { label: "pass rate", key: "pass_rate", num: true, cell: (r) => pct(r.pass_rate) },
    { label: "mean reward", key: "mean_reward", num: true, cell: (r) => num(r.mean_reward) },
    { label: "errored", key: "n_errored", num: true },
    { label: "tampered", key: "n_tampered", num: true, cell: (r) => r.n_tampered
      ? h("span", { class: "badge b-tampered", text: String(r.n_tampered) }) : "" },
    { label: "tokens", key: "total_tokens", num: true, cell: (r) => tokens(r.total_tokens) },
    { label: "cost", key: "cost_usd", num: true, cell: (r) => money(r.cost_usd) },
    { label: "state", key: "state", cell: (r) => badge(r.state) },
  ];
  const table = dataTable(columns, data.jobs, {
    empty: `No jobs in ${data.jobs_dir} (a job is a folder holding config.json).`,
    onRow: (r) => { location.hash = `#/job/${enc(r.name)}`; },
  });
  app.replaceChildren(
    h("h1", {}, "Jobs ", h("span", { class: "muted small", text: data.jobs_dir })),
    h("div", { class: "toolbar" }, compareBtn,
      h("span", { class: "muted small", text: "Tick two or more jobs to compare them." })),
    table);
  if (data.jobs.some((j) => j.state === "running")) {
    setLive(true);
    every(3000, async () => {
      const fresh = await api("/api/jobs").catch(() => null);
      if (fresh) table.refresh(fresh.jobs);
    });
  }
}

// ------------------------------------------------------------------ charts

function hbarChart(items, { fmt = (v) => v, max = null, width = 520 } = {}) {
  const rowH = 16, left = 170, right = 50;
  const top = max ?? Math.max(1e-9, ...items.map((d) => d.value || 0));
  const svg = s("svg", { viewBox: `0 0 ${width} ${items.length * rowH + 6}`,
    role: "img" });
  items.forEach((d, i) => {
    const y = i * rowH + 2;
    const w = Math.max(0, ((d.value || 0) / top) * (width - left - right));
    svg.append(s("text", { x: left - 6, y: y + 11, "text-anchor": "end" },
      d.label.length > 28 ? d.label.slice(0, 27) + "…" : d.label));
    svg.append(s("rect", { x: left, y, width: w, height: rowH - 4, class: d.cls || "c-bar" },
      s("title", {}, `${d.label}: ${fmt(d.value)}`)));
    svg.append(s("text", { x: left + w + 4, y: y + 11 }, fmt(d.value)));
  });
  return svg;
}

function vbarChart(items, { fmt = (v) => v, width = 520, height = 150 } = {}) {
  const top = Math.max(1e-9, ...items.map((d) => d.value || 0));
  const bw = Math.max(2, Math.min(24, (width - 40) / Math.max(1, items.length)));
  const svg = s("svg", { viewBox: `0 0 ${width} ${height + 20}`, role: "img" });
  svg.append(s("line", { x1: 36, y1: height, x2: width, y2: height, class: "axis" }));
  svg.append(s("text", { x: 32, y: 10, "text-anchor": "end" }, fmt(top)));
  svg.append(s("text", { x: 32, y: height, "text-anchor": "end" }, "0"));
  items.forEach((d, i) => {
    const bh = ((d.value || 0) / top) * (height - 8);
    svg.append(s("rect", { x: 40 + i * bw, y: height - bh, width: Math.max(1, bw - 1),
      height: bh, class: d.cls || "c-bar" }, s("title", {}, `${d.label}: ${fmt(d.value)}`)));
  });
  return svg;
}

const PHASES = ["setup", "agent", "verify", "cleanup"];
function phaseChart(trials, width = 520) {
  const rows = trials.filter((t) => t.timing).sort((a, b) => (b.total_sec || 0) -
    (a.total_sec || 0)).slice(0, 40);
  const rowH = 14, left = 170;
  const top = Math.max(1e-9, ...rows.map((t) => PHASES.reduce((a, p) => a +
    (t.timing[p] || 0), 0)));
  const svg = s("svg", { viewBox: `0 0 ${width} ${rows.length * rowH + 6}`, role: "img" });
  rows.forEach((t, i) => {
    const y = i * rowH + 2;
    let x = left;
    svg.append(s("text", { x: left - 6, y: y + 10, "text-anchor": "end" },
      t.trial.length > 28 ? t.trial.slice(0, 27) + "…" : t.trial));
    for (const p of PHASES) {
      const w = ((t.timing[p] || 0) / top) * (width - left - 10);
      svg.append(s("rect", { x, y, width: w, height: rowH - 3, class: `c-${p}` },
        s("title", {}, `${t.trial} ${p}: ${secs(t.timing[p])}`)));
      x += w;
    }
  });
  return svg;
}

function scatterChart(points, { width = 520, height = 180, xfmt, yfmt } = {}) {
  const left = 40, bottom = 20;
  const xmax = Math.max(1e-9, ...points.map((p) => p.x));
  const svg = s("svg", { viewBox: `0 0 ${width} ${height + bottom}`, role: "img" });
  svg.append(s("line", { x1: left, y1: height, x2: width, y2: height, class: "axis" }));
  svg.append(s("line", { x1: left, y1: 4, x2: left, y2: height, class: "axis" }));
  svg.append(s("text", { x: left - 4, y: 10, "text-anchor": "end" }, yfmt(1)));
  svg.append(s("text", { x: left - 4, y: height, "text-anchor": "end" }, yfmt(0)));
  svg.append(s("text", { x: width - 2, y: height + 14, "text-anchor": "end" }, xfmt(xmax)));
  svg.append(s("text", { x: left, y: height + 14 }, xfmt(0)));
  points.forEach((p, i) => {
    const jitter = ((i * 37) % 11 - 5) * 0.6;
    const cx = left + (p.x / xmax) * (width - left - 10);
    const cy = height - Math.max(0, Math.min(1, p.y)) * (height - 12) + jitter;
    svg.append(s("circle", { cx, cy, r: 4, class: p.cls, "fill-opacity": 0.75 },
      s("title", {}, p.label)));
  });
  return svg;
}

function chartBox(title, svg, legend) {
  return h("div", { class: "chart" }, h("h3", { text: title }), svg, legend || null);
}

const PHASE_COLORS = { setup: "#9aa5b8", agent: "var(--accent)", verify: "var(--pass)",
  cleanup: "#c9b37d" };
function phaseLegend() {
  return h("div", { class: "legend" }, PHASES.map((p) => h("span", {},
    h("i", { style: `background: ${PHASE_COLORS[p]}` }), p)));
}

// ------------------------------------------------------------------ a job

const STATUS_CLS = { passed: "c-pass", failed: "c-fail", errored: "c-err", cancelled: "c-err" };

function jobCharts(job) {
  const done = job.trials.filter((t) => t.status !== "queued" && t.status !== "running");
  if (!done.length) return null;
  const byTask = new Map();
  for (const t of done) {
    if (!byTask.has(t.task)) byTask.set(t.task, []);
    byTask.get(t.task).push(t);
  }
  const rewardItems = [...byTask.entries()].map(([task, ts]) => {
    const scored = ts.filter((t) => t.status === "passed" || t.status === "failed");
    const rewards = scored.map((t) => t.reward).filter(isNum);
    const mean = rewards.length ? rewards.reduce((a, b) => a + b, 0) / rewards.length : 0;
    const cls = !scored.length ? "c-err" : scored.every((t) => t.status === "passed") ? "c-pass"
      : "c-fail";
    return { label: task, value: mean, cls };
  }).sort((a, b) => a.value - b.value || a.label.localeCompare(b.label));
  const charts = [
    chartBox("Reward by task (mean of scored trials)",
      hbarChart(rewardItems, { max: Math.max(1, ...rewardItems.map((d) => d.value)),
        fmt: (v) => num(v, 2) })),
    chartBox("Time by phase (slowest 40 trials)", phaseChart(done), phaseLegend()),
  ];
  const withTokens = done.filter((t) => isNum(t.total_tokens));
  if (withTokens.length) {
    charts.push(chartBox("Tokens per trial", vbarChart(withTokens
      .sort((a, b) => a.total_tokens - b.total_tokens)
      .map((t) => ({ label: t.trial, value: t.total_tokens, cls: STATUS_CLS[t.status] })),
    { fmt: tokens })));
  }
  const withCost = done.filter((t) => isNum(t.cost_usd) && isNum(t.reward));
  if (withCost.length) {
    charts.push(chartBox("Cost vs reward (one dot per trial)", scatterChart(
      withCost.map((t) => ({ x: t.cost_usd, y: t.reward, cls: STATUS_CLS[t.status],
        label: `${t.trial}: ${money(t.cost_usd)}, reward ${num(t.reward, 2)}` })),
      { xfmt: money, yfmt: (v) => num(v, 1) })));
  }
  return h("div", { class: "charts" }, charts);
}

function summaryCards(job) {
  const sm = job.summary || {};
  const u = sm.usage || {};
  const card = (k, v, title) => h("div", { class: "card", title }, h("div", { class: "v" }, v),
    h("div", { class: "k", text: k }));
  return h("div", { class: "cards" },
    card("pass rate (errors excluded)", pct(sm.pass_rate)),
    card("mean reward", num(sm.mean_reward)),
    card("trials", `${sm.n_trials ?? 0}/${sm.n_trials_planned ?? "?"}`),
    card("passed · failed · errored", `${sm.n_passed ?? 0} · ${sm.n_failed ?? 0} · ${sm.n_errored ?? 0}`),
    sm.n_tampered || sm.n_verifier_broken ? card("failed: honest · tampered · broke verifier",
      `${sm.n_failed - sm.n_tampered - sm.n_verifier_broken} · ${sm.n_tampered} · `
      + `${sm.n_verifier_broken}`, "Failures the agent caused by leaving what sandlot "
      + "could not vouch for (tampered) or by breaking the verifier, apart from honest ones")
      : null,
    ...Object.entries(sm.pass_at_k || {}).filter(([k]) => k !== "1")
      .map(([k, v]) => card(`pass@${k}`, pct(v))),
    card("tokens (in / out)", `${tokens(u.input_tokens)} / ${tokens(u.output_tokens)}`),
    card("cost", money(u.cost_usd)),
    card("time per trial", secs(sm.timing?.total?.mean_sec)),
  );
}

const FILTERS = {
  all: () => true,
  passed: (t) => t.status === "passed",
  failed: (t) => t.status === "failed",
  // The server's outcome (sandlot.report.outcome) decides, as it does for the summary.
  tampered: (t) => !!t.tampered,
  errored: (t) => t.status === "errored" || t.status === "cancelled",
  repaired: (t) => !!t.repaired,
  "with repairs": (t) => t.n_repairs > 0,
  running: (t) => t.status === "running" || t.status === "queued",
};

async function jobPage(name, params) {
  crumbs({ text: "jobs", href: "#/" }, { text: name });
  let job = await api(`/api/jobs/${enc(name)}`);
  let filter = params.get("filter") || "all";
  let query = "";
  const columns = [
    { label: "trial", key: "trial", cell: (t) => h("a", {
      href: `#/job/${enc(name)}/trial/${enc(t.trial)}`, text: t.trial }) },
    { label: "status", key: "status", cell: (t) => h("span", {}, badge(t.status),
      t.tampered ? [" ", badge("tampered")] : null,
      t.verifier_broken ? [" ", badge("broke verifier")] : null) },
    { label: "reward", key: "reward", num: true, cell: (t) => num(t.reward, 2) },
    { label: "error", key: "error_kind", cell: (t) => t.error_kind
      ? h("span", { title: t.error_message || "", text: `${t.error_kind}${t.error_phase
        ? ` (${t.error_phase})` : ""}${t.error_cause ? ` · ${t.error_cause}` : ""}` }) : "" },
    { label: "tries", key: "tries", num: true },
    { label: "repairs", key: "n_repairs", num: true, cell: (t) => (t.n_repairs
      ? `${t.n_repairs}${t.repaired ? " ✓" : ""}` : "") },
    { label: "time", key: "total_sec", num: true, cell: (t) => secs(t.total_sec) },
    { label: "agent", key: "agent_sec", num: true, sort: (t) => t.timing?.agent,
      cell: (t) => secs(t.timing?.agent) },
    { label: "turns", key: "turns", num: true },
    { label: "tool calls", key: "tool_calls", num: true },
    { label: "tokens", key: "total_tokens", num: true, cell: (t) => tokens(t.total_tokens) },
    { label: "cost", key: "cost_usd", num: true, cell: (t) => money(t.cost_usd) },
  ];
  const rowsFor = () => job.trials.filter(FILTERS[filter]).filter((t) => !query ||
    t.trial.toLowerCase().includes(query) || (t.error_kind || "").includes(query));
  const table = dataTable(columns, rowsFor(), {
    onRow: (t) => { location.hash = `#/job/${enc(name)}/trial/${enc(t.trial)}`; },
    empty: "No trial matches this filter.",
  });
  const counts = () => Object.fromEntries(Object.entries(FILTERS)
    .map(([k, f]) => [k, job.trials.filter(f).length]));
  const buttons = h("div", { class: "toolbar", id: "filters" });
  function renderButtons() {
    const c = counts();
    buttons.replaceChildren(...Object.keys(FILTERS).map((k) => h("button", {
      class: k === filter ? "on" : "", "data-filter": k,
      onclick: () => { filter = k; renderButtons(); table.refresh(rowsFor()); },
    }, `${k} (${c[k]})`)), h("input", { type: "search", placeholder: "filter by name or error…",
      value: query, oninput: (ev) => { query = ev.target.value.toLowerCase();
        table.refresh(rowsFor()); } }));
  }
  renderButtons();
  const head = h("div");
  const charts = h("div");
  function renderHead() {
    const c = job.config || {};
    head.replaceChildren(...kids(
      h("h1", {}, name, " ", badge(job.state)),
      h("div", { class: "muted" }, `${c.agent || job.summary?.agent || "?"}`,
        c.model ? ` · ${c.model}` : "", ` · ${c.task_names?.length ?? "?"} tasks × `,
        `${c.n_attempts ?? "?"} attempts`, c.repair_attempts ? ` · repair attempts ${
          c.repair_attempts}` : "", " · ",
        h("a", { href: `#/compare?jobs=${enc(name)}`, text: "compare with…",
          title: "pick jobs on the jobs page", onclick: (ev) => {
            ev.preventDefault(); location.hash = "#/"; } })),
      summaryCards(job),
      Object.keys(job.summary?.errors_by_kind || {}).length ? h("div", { class: "note" },
        "Errors by kind: ", Object.entries(job.summary.errors_by_kind)
          .map(([k, n]) => `${k} × ${n}`).join(", ")) : null,
      Object.keys(job.summary?.errors_by_cause || {}).length ? h("div", { class: "note" },
        "Errors by who caused them: ", Object.entries(job.summary.errors_by_cause)
          .map(([k, n]) => `${k} × ${n}`).join(", ")) : null,
      datasetsNote(c),
      settingsNote(c),
      job.summary?.stopped ? h("div", { class: "note job-stopped" }, "Stopped early: ",
        job.summary.stopped) : null,
      job.summary?.roots?.["host-fallback"] ? h("div", { class: "note" },
        `${job.summary.roots["host-fallback"]} trials ran on the host's root because their `
        + "image could not be pulled (host-fallback): their scores are not comparable with "
        + "runs on the image.") : null,
      h("details", {}, h("summary", { text: "configuration" }),
        h("pre", { class: "short", text: JSON.stringify(job.config, null, 2) }))));
    charts.replaceChildren(jobCharts(job) || h("p", { class: "muted",
      text: "No finished trial yet." }));
  }
  renderHead();
  app.replaceChildren(head, charts, h("h2", { text: "Trials" }), buttons, table);
  if (job.state !== "complete") {
    setLive(job.state === "running");
    every(2000, async () => {
      const sig = await api(`/api/jobs/${enc(name)}/signature`).catch(() => null);
      if (!sig || sig.signature === job.signature) return;
      job = await api(`/api/jobs/${enc(name)}`);
      setLive(job.state === "running");
      renderHead(); renderButtons(); table.refresh(rowsFor());
    });
  }
}

// ------------------------------------------------------------------ a trial

function llmChip(llm) {
  if (!llm) return null;
  const parts = [`in ${tokens(llm.input_tokens)}`, `out ${tokens(llm.output_tokens)}`];
  if (llm.cache_read_tokens) parts.push(`cached ${tokens(llm.cache_read_tokens)}`);
  if (llm.reasoning_tokens) parts.push(`reasoning ${tokens(llm.reasoning_tokens)}`);
  if (isNum(llm.cost_usd)) parts.push(money(llm.cost_usd));
  parts.push(secs(llm.latency_sec));
  if (isNum(llm.ttft_sec)) parts.push(`ttft ${secs(llm.ttft_sec)}`);
  if (llm.attempts > 1) parts.push(`${llm.attempts} attempts`);
  if (llm.status && llm.status !== 200) parts.push(`HTTP ${llm.status}`);
  return h("span", { class: "chip", title: `exchange #${llm.seq ?? llm.line + 1}` },
    parts.join(" · "));
}

function stepView(step, ctx) {
  const kind = step.kind;
  const el = h("div", { class: `step k-${kind}${step.tool?.is_error ? " err" : ""}`,
    "data-step": step.i, "data-kind": kind });
  const head = h("div", { class: "head" }, h("span", { class: "who", text: kind === "tool"
    ? `tool · ${step.tool?.name || "?"}` : kind }), h("span", { text: `#${step.i}` }));
  if (step.t) head.append(h("span", { text: when(step.t) }));
  el.append(head);
  if (kind === "assistant") {
    if (step.llm) head.append(llmChip(step.llm));
    if (step.llm && ctx.source === "gateway") {
      head.append(h("a", { href: ctx.rawUrl("gateway", step.record), target: "_blank",
        text: "raw" }));
    } else if (ctx.source === "builtin") {
      head.append(h("a", { href: ctx.rawUrl("builtin", step.record), target: "_blank",
        text: "raw" }));
    }
    if (step.thinking) el.append(h("div", { class: "thinking", text: step.thinking }),
      truncNote(step, "thinking"));
    if (step.text) el.append(h("div", { class: "text", text: step.text }),
      truncNote(step, "text"));
    for (const call of step.tool_calls || []) {
      el.append(h("div", { class: "call" }, h("span", { class: "name", text: call.name }),
        h("span", { class: "muted small", text: call.id ? `  ${call.id}` : "" }),
        longText(pretty(call.arguments), { lines: 30 }), truncNote(call, "arguments")));
    }
    if (!step.text && !step.thinking && !(step.tool_calls || []).length) {
      el.append(h("div", { class: "muted", text: step.llm?.error
        ? `error: ${step.llm.error}` : "(empty answer)" }));
    }
  } else if (kind === "tool") {
    const t = step.tool || {};
    if (isNum(t.duration_sec)) head.append(h("span", { text: secs(t.duration_sec) }));
    if (t.is_error) head.append(badge("error"));
    if (t.call_id) head.append(h("span", { class: "small", text: t.call_id }));
    if (ctx.source === "builtin") {
      head.append(h("a", { href: ctx.rawUrl("builtin", step.record), target: "_blank",
        text: "raw" }));
      if (t.arguments) el.append(h("details", {}, h("summary", { text: "arguments" }),
        h("pre", { class: "short", text: pretty(t.arguments) })));
    }
    el.append(longText(t.output, { lines: 30 }), truncNote(t, "output"));
  } else if (kind === "system") {
    el.append(h("details", {}, h("summary", { text: "system prompt" }),
      longText(step.text, { lines: 60 })));
  } else {
    el.append(longText(step.text, { lines: 60 }), truncNote(step, "text"));
  }
  return el;
}

function stepsPane(job, trial, detail) {
  const base = `/api/jobs/${enc(job)}/trials/${enc(trial)}`;
  const ctx = { source: detail.trajectory.source,
    rawUrl: (src, line) => `${base}/raw?source=${src}&line=${line}` };
  const pane = h("div", { id: "steps" });
  if (!ctx.source) {
    pane.append(h("p", { class: "muted", text: "This agent called no model through the "
      + "gateway, so there is no step-by-step trajectory. Its own logs are under Files." }));
    return pane;
  }
  const PAGE = 100;
  let start = 0, end = 0, total = detail.trajectory.n_records;
  // One load at a time: the scroll observer, the buttons and the live poll share it, so
  // no page is fetched twice and appended twice.
  let busy = null;
  const once = (fn) => () => {
    if (busy) return busy;
    busy = fn().catch((e) => list.append(h("div", { class: "errbox", text: e.message })))
      .finally(() => { busy = null; });
    return busy;
  };
  const list = h("div");
  const info = h("span", { class: "muted small" });
  const earlier = h("button", { text: "load earlier", class: "hidden" });
  const more = h("button", { text: "load more", class: "hidden" });
  const toEnd = h("button", { text: "jump to the end" });
  const toStart = h("button", { text: "jump to the start" });
  const toolbar = h("div", { class: "toolbar" }, toStart, toEnd, info);
  function status() {
    info.textContent = `records ${start}–${end} of ${total} (${ctx.source === "builtin"
      ? "built-in agent log" : "gateway log: one record per model exchange"})`;
    earlier.classList.toggle("hidden", start === 0);
    more.classList.toggle("hidden", end >= total);
  }
  const fetchPage = (offset, limit = PAGE) =>
    api(`${base}/steps?offset=${offset}&limit=${limit}`);
  const recordsIn = (page) => (page.next_offset ?? page.total) - page.offset;
  const jump = (offset) => once(async () => {
    const page = await fetchPage(offset);
    total = page.total; start = page.offset; end = page.offset + recordsIn(page);
    list.replaceChildren(...page.steps.map((st) => stepView(st, ctx)));
    status();
  })();
  const loadMore = once(async () => {
    const page = await fetchPage(end);
    total = page.total;
    if (page.offset !== end) return;
    list.append(...page.steps.map((st) => stepView(st, ctx)));
    end = page.offset + recordsIn(page);
    status();
  });
  const loadEarlier = once(async () => {
    const offset = Math.max(0, start - PAGE);
    const page = await fetchPage(offset, start - offset);
    list.prepend(...page.steps.map((st) => stepView(st, ctx)));
    start = offset; status();
  });
  toEnd.addEventListener("click", () => jump(Math.max(0, total - PAGE)));
  toStart.addEventListener("click", () => jump(0));
  more.addEventListener("click", loadMore);
  earlier.addEventListener("click", loadEarlier);
  pane.append(toolbar, earlier, list, more);
  // Load the next page when the bottom comes into view (stays responsive on 10k steps).
  const io = new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting) && end < total) loadMore();
  });
  jump(0).then(() => io.observe(more));
  pane.poll = once(async () => {  // a running trial: pick up new records at the end
    if (end < total) {  // not at the end: only update the count
      total = (await fetchPage(total, 1)).total;
      status();
      return;
    }
    const page = await fetchPage(end);
    total = page.total;
    if (end === page.offset && page.steps.length) {
      list.append(...page.steps.map((st) => stepView(st, ctx)));
      end = page.offset + recordsIn(page);
    }
    status();
  });
  return pane;
}

function exchangesPane(job, trial) {
  const base = `/api/jobs/${enc(job)}/trials/${enc(trial)}`;
  const pane = h("div");
  const rows = [];
  const columns = [
    { label: "#", key: "line", num: true, cell: (x) => x.line + 1 },
    { label: "started", key: "started_at", cell: (x) => when(x.started_at) },
    { label: "model", key: "model" },
    { label: "status", key: "status", num: true },
    { label: "tries", key: "attempts", num: true },
    { label: "msgs", key: "n_messages", num: true },
    { label: "in", key: "input_tokens", num: true, cell: (x) => tokens(x.input_tokens) },
    { label: "out", key: "output_tokens", num: true, cell: (x) => tokens(x.output_tokens) },
    { label: "cached", key: "cache_read_tokens", num: true,
      cell: (x) => tokens(x.cache_read_tokens) },
    { label: "cost", key: "cost_usd", num: true, cell: (x) => money(x.cost_usd) },
    { label: "latency", key: "latency_sec", num: true, cell: (x) => secs(x.latency_sec) },
    { label: "ttft", key: "ttft_sec", num: true, cell: (x) => secs(x.ttft_sec) },
    { label: "error", key: "error", cell: (x) => (x.error ? String(x.error).slice(0, 80) : "") },
  ];
  const detail = h("div");
  const table = dataTable(columns, rows, { empty: "No model exchange recorded.",
    onRow: (x) => showExchange(x.line) });
  const more = h("button", { text: "load more", class: "hidden" });
  let next = 0;
  async function load() {
    const page = await api(`${base}/exchanges?offset=${next}&limit=200`);
    rows.push(...page.exchanges);
    next = page.next_offset;
    more.classList.toggle("hidden", next === null);
    table.refresh(rows);
  }
  more.addEventListener("click", load);
  async function showExchange(n) {
    detail.replaceChildren(h("p", { class: "muted", text: "Loading…" }));
    const x = await api(`${base}/exchanges/${n}`);
    detail.replaceChildren(h("div", { class: "panel" },
      h("h3", {}, `Exchange #${n + 1} `, llmChip(x.summary), " ",
        h("a", { href: `${base}/raw?source=gateway&line=${n}`, target: "_blank", text: "raw" })),
      h("div", { class: "muted small", text: `tools offered: ${(x.tool_names || []).join(", ")
        || "none"}` }),
      h("details", {}, h("summary", { text: "request parameters" }),
        h("pre", { class: "short", text: JSON.stringify(x.request_params, null, 2) })),
      h("h3", { text: "New input in this request" }),
      ...(x.new_input.length ? x.new_input.map((st) => stepView({ ...st, i: "in" },
        { source: "exchange" })) : [h("p", { class: "muted", text: "(none)" })]),
      h("h3", { text: "Response" }),
      x.upstream_error ? h("div", { class: "errbox", text: pretty(x.upstream_error) }) : null,
      longText(JSON.stringify(x.response, null, 2), { lines: 80 })));
    detail.scrollIntoView({ behavior: "smooth", block: "start" });
  }
  pane.append(table, more, detail);
  load().catch((e) => pane.prepend(h("div", { class: "errbox", text: e.message })));
  return pane;
}

function fileViewer(job, trial, path, { tail = false } = {}) {
  const base = `/api/jobs/${enc(job)}/trials/${enc(trial)}/file?path=${enc(path)}`;
  const box = h("div", { class: "panel" }, h("h3", {}, h("code", { text: path })));
  const pre = h("pre");
  const info = h("div", { class: "muted small" });
  box.append(info, pre);
  const CHUNK = 65536;
  let loadedTo = 0;
  const more = h("button", { text: "load more", class: "hidden" });
  async function load(offset) {
    const chunk = await api(`${base}&offset=${offset}&length=${CHUNK}`);
    if (offset < 0 || offset === 0) pre.textContent = chunk.text;
    else pre.textContent += chunk.text;
    loadedTo = chunk.offset + chunk.length;
    info.textContent = `${chunk.size.toLocaleString()} bytes` + (chunk.offset > 0 && offset < 0
      ? ` (the last ${chunk.length.toLocaleString()} shown)` : "");
    more.classList.toggle("hidden", chunk.eof);
  }
  more.addEventListener("click", () => load(loadedTo));
  box.append(more);
  load(tail ? -CHUNK : 0).catch((e) => { pre.textContent = e.message; });
  return box;
}

function tailBlock(title, chunk) {
  if (!chunk) return h("div", {}, h("h3", { text: title }), h("p", { class: "muted",
    text: "(no file)" }));
  return h("div", {}, h("h3", { text: title }), chunk.offset > 0 ? h("div", {
    class: "muted small", text: `last ${chunk.length.toLocaleString()} of ${
      chunk.size.toLocaleString()} bytes` }) : null, longText(chunk.text, { lines: 200 }));
}

function verifierPane(detail) {
  const r = detail.result || {};
  return h("div", {},
    h("div", { class: "kv panel" },
      h("div", { text: "reward" }), h("div", { text: num(r.reward, 3) }),
      h("div", { text: "rewards" }), h("div", { text: JSON.stringify(r.rewards || {}) }),
      h("div", { text: "test.sh exit code" }), h("div", { text: r.verifier_exit_code ?? "—" }),
      h("div", { text: "verify time" }), h("div", { text: secs(r.timing?.verify) })),
    tailBlock("verifier/test_stdout.txt", detail.verifier.stdout),
    tailBlock("verifier/test_stderr.txt", detail.verifier.stderr),
    h("h3", { text: "verifier/logs" }),
    detail.verifier.logs.length ? h("ul", {}, detail.verifier.logs.map((f) => h("li", {},
      h("code", { text: f.path }), ` (${f.size} bytes)`))) : h("p", { class: "muted",
      text: "(empty)" }));
}

function repairsPane(job, trial, detail) {
  const pane = h("div");
  if (!detail.repairs.length) {
    pane.append(h("p", { class: "muted", text: "No repair attempts (run with "
      + "--repair-attempts N to give the agent its test feedback)." }));
    return pane;
  }
  for (const a of detail.repairs) {
    const g = a.generation || {};
    const ev = a.evaluation;
    const box = h("div", { class: "panel repair" }, h("h3", {}, `Attempt ${a.attempt ?? "?"} `,
      ev ? badge(ev.reward >= 1 ? "pass" : "fail") : null));
    if (a.feedback) box.append(h("div", { class: "muted small", text:
      "feedback sent to the agent to start this attempt:" }), longText(a.feedback, { lines: 25 }));
    box.append(h("div", { class: "kv" },
      h("div", { text: "generation" }), h("div", { text: `${g.turns ?? "?"} turns, ${
        g.tool_calls ?? "?"} tool calls, ${secs(g.duration_sec)}, stop: ${g.stop_reason
        ?? g.done_reason ?? "?"}` }),
      h("div", { text: "feedback run" }), h("div", { text: ev ? (ev.error ? `error: ${
        JSON.stringify(ev.error)}` : `reward ${num(ev.reward, 2)} ${JSON.stringify(
        ev.rewards || {})}`) : "— (the last attempt is scored by the final verification)" })));
    if (a.folder) {
      box.append(h("details", {}, h("summary", { text: `feedback run output (${a.folder})` }),
        fileViewer(job, trial, `${a.folder}/test_stdout.txt`, { tail: true })));
    }
    pane.append(box);
  }
  return pane;
}

function changesPane(job, trial, detail) {
  const pane = h("div", {}, h("p", { class: "muted small", text: "Files written or edited "
    + "through the agent's file tools, in order. sandlot does not snapshot the workspace, so "
    + "changes made by shell commands are not listed here." }));
  for (const p of detail.diffs) pane.append(fileViewer(job, trial, p));
  const list = h("div", {}, h("p", { class: "muted", text: "Loading…" }));
  pane.append(list);
  api(`/api/jobs/${enc(job)}/trials/${enc(trial)}/changes`).then((data) => {
    if (!data.changes.length) {
      list.replaceChildren(h("p", { class: "muted", text: "No file tool call found." }));
      return;
    }
    list.replaceChildren(...kids(data.changes.map((c) => h("div", { class: "panel" },
      h("div", {}, badge(c.kind === "write" ? "write" : c.kind), " ",
        h("code", { text: c.path || "(patch)" }), h("span", { class: "muted small",
          text: `  step #${c.step} · ${c.tool}` })),
      c.kind === "write" ? longText(c.content, { lines: 40 }) : diffView(c.diff || c.patch))),
    data.more ? h("p", { class: "muted", text: "(more changes not shown)" }) : null));
  }).catch((e) => list.replaceChildren(h("div", { class: "errbox", text: e.message })));
  return pane;
}

function filesPane(job, trial, detail) {
  const viewer = h("div");
  const columns = [
    { label: "file", key: "path", cell: (f) => h("a", { href: "javascript:void 0",
      text: f.path, onclick: () => { viewer.replaceChildren(fileViewer(job, trial, f.path,
        { tail: f.size > 65536 && f.path.endsWith(".log") })); } }) },
    { label: "bytes", key: "size", num: true, cell: (f) => f.size.toLocaleString() },
  ];
  return h("div", {}, dataTable(columns, detail.files, { empty: "No files." }), viewer);
}

function logPane(detail) {
  return h("div", {},
    detail.exception ? tailBlock("exception.txt", detail.exception) : null,
    tailBlock("trial.log", detail.trial_log),
    detail.build_log ? tailBlock("setup/build.log", detail.build_log) : null);
}

/** Which datasets a job's tasks came from (config.json `task_sources`), with counts. */
function datasetsNote(config) {
  const sources = Object.values(config.task_sources || {});
  if (!sources.length) return null;
  const counts = {};
  for (const s of sources) {
    const key = `${s.dataset}@${s.version}${s.version_from === "newest" ? " (newest)" : ""}`
      + ` from ${s.registry}`;
    counts[key] = (counts[key] || 0) + 1;
  }
  const folders = (config.task_names?.length ?? 0) - sources.length;
  return h("div", { class: "muted dataset-sources" }, "Tasks from datasets: ",
    Object.entries(counts).map(([k, n]) => `${k} × ${n}`).join("; "),
    folders > 0 ? `; ${folders} from folders` : "");
}

/** The job's generation settings and budgets (config.json), said once above the charts:
 * two jobs' scores compare only with them in view. */
function settingsNote(config) {
  const parts = [];
  const g = config.generation || {};
  const shown = Object.entries(g).filter(([k]) => k !== "model_kwargs")
    .map(([k, v]) => `${k} ${v}`);
  for (const [k, v] of Object.entries(g.model_kwargs || {})) {
    shown.push(`${k}=${JSON.stringify(v)}`);
  }
  if (shown.length) parts.push(`generation: ${shown.join(", ")} (set on every request)`);
  const budget = (tokensLimit, usd) => [tokensLimit != null ? `${tokens(tokensLimit)} tokens`
    : null, usd != null ? money(usd) : null].filter(Boolean).join(" or ");
  const trial = budget(config.max_trial_tokens, config.max_trial_cost_usd);
  const job = budget(config.max_job_tokens, config.max_job_cost_usd);
  if (trial) parts.push(`budget per trial: ${trial}`);
  if (job) parts.push(`budget for the job: ${job}`);
  return parts.length ? h("div", { class: "muted job-settings" }, parts.join(" · ")) : null;
}

/** What a trial's agent sent and what the job set (result.json `generation`). */
function generationLine(gen) {
  if (!gen) return null;
  const set = Object.entries(gen.settings || {}).filter(([k]) => k !== "model_kwargs")
    .map(([k, v]) => `${k} ${v}`);
  const sent = Object.entries(gen.agent_sent || {})
    .map(([k, vs]) => `${k} ${vs.map((v) => JSON.stringify(v)).join("/")}`);
  if (!set.length && !sent.length) return null;
  return h("div", { class: "muted small trial-generation" },
    set.length ? `generation set by the job: ${set.join(", ")} (${gen.n_requests_changed} `
      + "requests changed)" : "",
    set.length && sent.length ? " · " : "",
    sent.length ? `the agent sent: ${sent.join(", ")}` : "",
    gen.not_sent?.length ? ` · not in the agent's format: ${gen.not_sent.join(", ")}` : "");
}

/** Where a trial's task came from (result.json `task_source`): dataset, repository,
 * commit and path, so two results of one task name can be told apart. */
function sourceLine(src) {
  if (!src) return null;
  const where = src.git_url
    ? `${src.git_url} @ ${(src.git_commit_id || "tip").slice(0, 12)} : ${src.path}`
    : src.path;
  return h("div", { class: "muted small task-source" },
    `task ${src.task} from ${src.dataset}@${src.version} (${src.registry}): ${where}`);
}

/** What a trial's sandbox was rooted in: an image (and its digest), or the host. */
function rootText(env) {
  if (env.base === "image") {
    return `${env.image}${env.digest ? ` @${env.digest.slice(7, 19)}` : ""}`;
  }
  return env.base === "host-fallback" ? "host (fallback)" : "host";
}

function trialHeader(job, trial, detail) {
  const r = detail.result;
  const box = h("div");
  box.append(h("h1", {}, trial, " ", badge(detail.status)));
  if (!r) {
    box.append(h("p", { class: "muted", text: detail.status === "running"
      ? "This trial is running; the trajectory below grows as the agent works."
      : "No result.json: this trial did not finish." }));
    return box;
  }
  const u = r.usage || {};
  const card = (k, v) => h("div", { class: "card" }, h("div", { class: "v" }, v),
    h("div", { class: "k", text: k }));
  box.append(h("div", { class: "cards" },
    card("reward", num(r.reward, 2)),
    card("time", secs(r.timing?.total)),
    card("agent · verify", `${secs(r.timing?.agent)} · ${secs(r.timing?.verify)}`),
    card("tokens in / out", `${tokens(u.input_tokens)} / ${tokens(u.output_tokens)}`),
    card("model requests", u.n_requests ?? "—"),
    card("cost", money(u.cost_usd)),
    card("turns · tool calls", `${r.agent_info?.turns ?? "—"} · ${r.agent_info?.tool_calls
      ?? "—"}`),
    r.tries > 1 ? card("tries", r.tries) : null,
    r.attempts?.length ? card("repairs", `${r.attempts.length - 1}${r.repaired
      ? " (repaired)" : ""}`) : null,
    r.environment ? card("root", rootText(r.environment)) : null));
  const source = sourceLine(r.task_source);
  if (source) box.append(source);
  const generation = generationLine(r.generation);
  if (generation) box.append(generation);
  if (r.environment?.base === "host-fallback") {
    box.append(h("div", { class: "errbox" }, h("b", { text: "host-fallback" }),
      `: ran on the host's root, not on ${r.environment.image}`
      + (r.environment.python ? ` (Python ${r.environment.python})` : "") + ": ",
      longText(r.environment.reason || "", { lines: 3 })));
  }
  if (r.error) {
    box.append(h("div", { class: "errbox" }, h("b", { text: r.error.kind }),
      r.error.phase ? ` in the ${r.error.phase} phase` : "",
      r.error.caused_by ? ` (caused by: ${r.error.caused_by})` : "", ": ",
      longText(r.error.message, { lines: 12 })));
  }
  box.append(...integrityBoxes(r));
  return box;
}

/** What sandlot found of the agent's doing before scoring (result.json `integrity`,
 * `verifier_failure`): a tampered trial or a broken verifier is a failure the agent
 * caused, shown apart from an honest one. */
function integrityBoxes(r) {
  const boxes = [];
  const i = r.integrity;
  if (i?.status === "tampered") {
    boxes.push(h("div", { class: "errbox integrity" }, h("b", { text: "tampered" }),
      ": scored 0 without trusting what the agent left: ", longText(i.reason || "", { lines: 6 }),
      i.paths?.length ? h("div", { class: "muted small", text: `at ${i.paths.join(", ")}` })
        : null));
  }
  if (r.verifier_failure) {
    const v = r.verifier_failure;
    boxes.push(h("div", { class: "errbox integrity" }, h("b", { text: "broke the verifier" }),
      `: ${v.kind} on what the agent left, reward ${num(v.pristine_reward, 2)} on a pristine `
      + "sandbox; scored 0: ", longText(v.message || "", { lines: 6 })));
  }
  const kept = (n) => (n.action || "").startsWith("kept");
  const undone = (i?.neutralized || []).filter((n) => !kept(n));
  const trusted = (i?.neutralized || []).filter(kept);
  if (undone.length) {
    boxes.push(h("div", { class: "note integrity" }, h("b", { text: "neutralized" }),
      ": what the agent changed of the verifier's machinery, put back before scoring: ",
      undone.map((n) => `${n.path} (${n.reason})`).join("; ")));
  }
  if (trusted.length) {
    boxes.push(h("div", { class: "note integrity" }, h("b", { text: "trusted" }),
      ": machinery the agent changed that the task trusts ([verifier] trusted_paths), kept: ",
      trusted.map((n) => `${n.path} (${n.reason})`).join("; ")));
  }
  if (i?.caps_hit?.length) {
    boxes.push(h("div", { class: "note integrity" }, h("b", { text: "cut" }),
      ": the trial folder keeps part of the agent's files: ", i.caps_hit.join("; ")));
  }
  return boxes;
}

/** A multi-step task's steps (result.json `steps`): each one's reward and outcome, why
 * the rest were stopped, and each one's test output (its files: steps/<name>/). */
function taskStepsPane(detail) {
  const m = detail.multi_step || {};
  const outcome = (s) => s.error && !(s.reward !== null && s.error.phase === "agent")
    ? "errored" : s.passed ? "passed" : "failed";
  const columns = [
    { label: "step", key: "name" },
    { label: "reward", key: "reward", num: true, cell: (s) => num(s.reward, 2) },
    { label: "outcome", cell: (s) => badge(outcome(s)) },
    { label: "error", cell: (s) => s.error ? `${s.error.kind}: ${s.error.message}` : "—" },
    { label: "repairs", num: true, cell: (s) => s.attempts?.length
      ? `${s.attempts.length - 1}${s.repaired ? " (repaired)" : ""}` : "—" },
    { label: "agent · verify", cell: (s) => `${secs(s.timing?.agent)} · ${secs(s.timing?.verify)}` },
    { label: "files", cell: (s) => s.folder },
  ];
  const notes = [h("p", { class: "muted", text: `${m.n_run} of ${m.n_steps} steps ran; the `
    + `trial's reward is the ${m.strategy === "final" ? "last step's" : "mean of the steps'"}.` })];
  if (m.stopped_after) {
    notes.push(h("div", { class: "errbox" }, h("b", { text: "stopped" }),
      ` after step ${m.stopped_after}: ${m.stop_reason}`));
  }
  return h("div", {}, ...notes, dataTable(columns, detail.steps),
    ...detail.steps.map((s) => h("details", { class: "panel" },
      h("summary", { text: `${s.name}: test output` }),
      tailBlock(`${s.folder}/verifier/test_stdout.txt`, s.test_stdout))));
}

/** What the task's `artifacts` gave (result.json `artifacts`; a step's are in its own
 * folder): each entry's source, how it went, and the files it left in the trial folder,
 * each one a link that opens it below. */
function artifactsPane(job, trial, detail) {
  const rows = (detail.result?.artifacts || []).map((a) => ({ ...a, where: a.destination }));
  for (const s of detail.steps || []) {
    for (const a of s.artifacts || []) {
      rows.push({ ...a, step: s.name, where: `${s.folder}/${a.destination}` });
    }
  }
  const viewer = h("div");
  const open = (path) => viewer.replaceChildren(fileViewer(job, trial, path));
  const filesOf = (where) => detail.files.filter((f) => f.path === where
    || f.path.startsWith(`${where}/`));
  const columns = [
    ...(detail.steps?.length ? [{ label: "step", key: "step" }] : []),
    { label: "source", key: "source", cell: (a) => h("code", { text: a.source }) },
    { label: "status", key: "status", cell: (a) => badge(a.status) },
    { label: "bytes", key: "bytes", num: true, cell: (a) => (a.bytes ?? 0).toLocaleString() },
    { label: "in the trial folder", cell: (a) => {
      const files = filesOf(a.where);
      if (!files.length) return h("span", { class: "muted", text: a.where });
      return h("div", {}, ...files.slice(0, 20).map((f) => h("div", {}, h("a", {
        href: "javascript:void 0", text: f.path, onclick: () => open(f.path) }))),
        files.length > 20 ? h("div", { class: "muted small",
          text: `and ${files.length - 20} more (files tab)` }) : null);
    } },
    { label: "note", cell: (a) => a.note || (a.exclude?.length
      ? `excluding ${a.exclude.join(", ")}` : "—") },
  ];
  return h("div", {}, h("p", { class: "muted small", text: "Copied out of the sandbox "
    + "after the agent's turn, before the tests: links are notes, never followed; what "
    + "passed the trial's copy-out budget is left out (status cut)." }),
    dataTable(columns, rows, { empty: "No artifacts." }), viewer);
}

const nArtifacts = (detail) => (detail.result?.artifacts?.length || 0)
  + (detail.steps || []).reduce((n, s) => n + (s.artifacts?.length || 0), 0);

async function trialPage(job, trial) {
  crumbs({ text: "jobs", href: "#/" }, { text: job, href: `#/job/${enc(job)}` },
    { text: trial });
  let detail = await api(`/api/jobs/${enc(job)}/trials/${enc(trial)}`);
  const header = h("div", {}, trialHeader(job, trial, detail));
  const instruction = detail.instruction ? h("details", { class: "panel" },
    h("summary", { text: "instruction" }), h("div", { class: "text",
      style: "white-space: pre-wrap", text: detail.instruction })) : null;
  const tabs = {
    ...(detail.steps?.length ? { "task steps": () => taskStepsPane(detail) } : {}),
    trajectory: () => stepsPane(job, trial, detail),
    ...(nArtifacts(detail) ? { artifacts: () => artifactsPane(job, trial, detail) } : {}),
    "LLM exchanges": () => exchangesPane(job, trial),
    repairs: () => repairsPane(job, trial, detail),
    verifier: () => verifierPane(detail),
    changes: () => changesPane(job, trial, detail),
    files: () => filesPane(job, trial, detail),
    log: () => logPane(detail),
  };
  const built = {};
  const body = h("div");
  const bar = h("div", { class: "tabs", role: "tablist" });
  let current = "trajectory";
  function show(name) {
    current = name;
    for (const b of bar.children) b.classList.toggle("on", b.dataset.tab === name);
    if (!built[name]) built[name] = tabs[name]();
    body.replaceChildren(built[name]);
  }
  for (const name of Object.keys(tabs)) {
    const count = name === "repairs" && detail.repairs.length ? ` (${detail.repairs.length})`
      : name === "task steps" ? ` (${detail.steps.length}/${detail.multi_step?.n_steps})`
      : name === "artifacts" ? ` (${nArtifacts(detail)})`
      : name === "LLM exchanges" ? ` (${detail.trajectory.n_exchanges})` : "";
    bar.append(h("button", { "data-tab": name, role: "tab", onclick: () => show(name) },
      name + count));
  }
  app.replaceChildren(header, instruction || "", bar, body);
  show(current);
  if (detail.status === "running") {
    setLive(true);
    every(2000, async () => {
      if (built.trajectory?.poll) await built.trajectory.poll();
      const fresh = await api(`/api/jobs/${enc(job)}/trials/${enc(trial)}`).catch(() => null);
      if (fresh && fresh.status !== detail.status) {
        detail = fresh;
        header.replaceChildren(trialHeader(job, trial, detail));
        for (const k of Object.keys(built)) if (k !== "trajectory") delete built[k];
        if (detail.status !== "running") { clearTimers(); }
        show(current);
      }
    });
  }
}

// ------------------------------------------------------------------ compare

function ciBar(lo, hi, p) {
  if (!isNum(p)) return "—";
  return h("div", { class: "ci", title: `${pct(p)} [${pct(lo)}, ${pct(hi)}]` },
    h("span", { style: `left:${lo * 100}%; width:${(hi - lo) * 100}%` }),
    h("b", { style: `left: calc(${p * 100}% - 1px)` }));
}

function cellView(c) {
  if (c.status === "missing" || c.status === "no result") return badge(c.status);
  if (c.status === "errored") return badge("errored");
  const label = c.n_scored > 1 ? `${num(c.pass_frac, 2)} (${c.n_scored})` : num(c.mean_reward, 2);
  return h("span", {}, badge(c.status), " ", label);
}

async function comparePage(names) {
  crumbs({ text: "jobs", href: "#/" }, { text: `compare ${names.join(" · ")}` });
  if (names.length < 2) {
    app.replaceChildren(h("p", { class: "muted", text: "Pick two or more jobs on the jobs page." }));
    return;
  }
  const data = await api(`/api/compare?jobs=${names.map(enc).join(",")}`);
  const jobsTable = dataTable([
    { label: "job", key: "name", cell: (j) => h("a", { href: `#/job/${enc(j.name)}`,
      text: j.name }) },
    { label: "agent · model", key: "agent", cell: (j) => `${j.agent}${j.model ? ` · ${j.model}`
      : ""}${j.datasets?.length ? ` (tasks from ${j.datasets.join(", ")})` : ""}` },
    { label: "tasks", key: "n_tasks", num: true },
    { label: "scored", key: "n_scored", num: true },
    { label: "pass rate", key: "pass_rate", num: true, cell: (j) => pct(j.pass_rate) },
    { label: "95% CI (Wilson)", cell: (j) => h("span", {}, `${pct(j.ci_low)} – ${pct(j.ci_high)}`) },
    { label: "", cell: (j) => ciBar(j.ci_low, j.ci_high, j.pass_rate) },
    { label: "mean reward", key: "mean_reward", num: true, cell: (j) => num(j.mean_reward) },
    { label: "errored", key: "n_errored", num: true },
    { label: "tokens/trial", key: "tokens_per_trial", num: true,
      cell: (j) => tokens(Math.round(j.tokens_per_trial)) },
    { label: "cost/trial", key: "cost_per_trial", num: true, cell: (j) => money(j.cost_per_trial) },
    { label: "time/trial", key: "time_per_trial_sec", num: true,
      cell: (j) => secs(j.time_per_trial_sec) },
  ], data.jobs);
  const blocks = data.comparisons.map((c) => {
    const m = c.mcnemar, b = c.bootstrap;
    const box = h("div", { class: "panel comparison" },
      h("h2", {}, `${c.b} vs ${c.a} `, h("span", { class: "muted small", text: "(baseline: "
        + c.a + ")" })),
      h("div", { class: `verdict ${c.significant ? "sig" : "nosig"}`, text: c.verdict }),
      h("div", { class: "kv", style: "margin-top:8px" },
        h("div", { text: "paired tasks" }), h("div", { text: `${c.n_paired} of ${c.n_shared} shared` }),
        h("div", { text: "pass rate on them" }), h("div", { text: `${pct(c.pass_rate_a)} → ${
          pct(c.pass_rate_b)} (${isNum(c.delta_pass_rate) ? `${(c.delta_pass_rate * 100)
          .toFixed(1)} pp` : "—"})` }),
        h("div", { text: "gained (fail → pass)" }), h("div", { class: "gained",
          text: c.gained.join(", ") || "none" }),
        h("div", { text: "lost (pass → fail)" }), h("div", { class: "lost",
          text: c.lost.join(", ") || "none" }),
        h("div", { text: "exact McNemar" }), h("div", { text: `b=${m.b}, c=${m.c}, p=${
          m.p_value.toPrecision(4)}${m.applicable ? "" : " (not used: several trials per task)"}` }),
        h("div", { text: "paired bootstrap" }), h("div", { text: isNum(b.mean_diff) ? `Δ ${
          (b.mean_diff * 100).toFixed(1)} pp [${(b.ci_low * 100).toFixed(1)}, ${
          (b.ci_high * 100).toFixed(1)}], p=${b.p_value.toPrecision(4)} (${b.n_resamples} `
          + `resamples, seed ${b.seed})` : "—" }),
        h("div", { text: "test used" }), h("div", { text: `${c.test}, α = ${c.alpha}` }),
        h("div", { text: "cost per trial" }), h("div", { text: `${money(c.cost_per_trial_a)} → ${
          money(c.cost_per_trial_b)}` }),
        h("div", { text: "time per trial" }), h("div", { text: `${secs(c.time_per_trial_a)} → ${
          secs(c.time_per_trial_b)}` }),
        h("div", { text: "tokens per trial" }), h("div", { text: `${tokens(Math.round(
          c.tokens_per_trial_a))} → ${tokens(Math.round(c.tokens_per_trial_b))}` })));
    const notes = [];
    if (c.only_a.length) notes.push(`only in ${c.a}: ${c.only_a.join(", ")}`);
    if (c.only_b.length) notes.push(`only in ${c.b}: ${c.only_b.join(", ")}`);
    const unscored = Object.entries(c.unscored);
    if (unscored.length) notes.push(`not scored in both (left out): ${unscored.map(([t, j]) =>
      `${t} (${j.join("/")})`).join(", ")}`);
    if (notes.length) box.append(h("div", { class: "note mismatch" },
      h("b", { text: "Task sets differ. " }), notes.join("; ")));
    const moved = Object.entries(c.source_changed || {});
    if (moved.length) box.append(h("div", { class: "note source-changed" },
      h("b", { text: "Other task files. " }), `${moved.length} task(s) came from other `
      + "dataset versions, commits or paths (compared all the same): "
      + moved.map(([t, [was, now]]) => `${t} (${was} → ${now})`).join("; ")));
    return box;
  });
  let flipsOnly = false;
  const taskColumns = [
    { label: "task", key: "task" },
    ...data.jobs.map((j, i) => ({ label: j.name, cell: (r) => cellView(r.cells[i]),
      sort: (r) => r.cells[i].pass_frac, key: `c${i}` })),
    ...data.comparisons.map((c, i) => ({ label: `flip ${c.b}`, key: `f${i}`,
      sort: (r) => r.flips[i] || "", cell: (r) => (r.flips[i] ? badge(r.flips[i]) : "") })),
  ];
  const rows = () => data.tasks.filter((r) => !flipsOnly || r.flips.some(Boolean));
  const taskTable = dataTable(taskColumns, rows());
  const toggle = h("button", { id: "flips-only", onclick: () => {
    flipsOnly = !flipsOnly; toggle.classList.toggle("on", flipsOnly); taskTable.refresh(rows());
  } }, "flips only");
  app.replaceChildren(h("h1", { text: "Compare jobs" }), jobsTable, ...blocks,
    h("h2", { text: "Tasks" }), h("div", { class: "toolbar" }, toggle), taskTable,
    h("p", { class: "muted small", text: `A task passes in a job when more than half of its `
      + `scored trials passed; errored trials are left out. Seed ${data.seed}, α = ${data.alpha}.` }));
}
