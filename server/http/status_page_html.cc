// The status page served at GET / (docs/http-api.md "Status page"): one
// HTML document with inline CSS and script and no external URL. It polls
// v1/status every 1.5 s (sending the bearer token given in the address's
// #token= fragment or typed into the page) and draws its charts as inline
// SVG. After each drawing it sets data-* attributes that tests read:
// body[data-state], body[data-updates], #sessions-count[data-count],
// svg.chart[data-points] (points drawn) and svg.chart[data-max] (the
// largest value).
#include "server/http/status_json.h"

namespace ckv::server::http {
namespace {

constexpr char kPage[] = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>clusterkv status</title>
<style>
:root { --fg: #1d232a; --muted: #5d6b79; --bg: #f4f6f8; --card: #fff;
  --line: #d5dbe1; --a: #1f77b4; --b: #e4572e; --c: #2a9d5c; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, sans-serif; color: var(--fg);
  background: var(--bg); }
header { display: flex; flex-wrap: wrap; align-items: baseline; gap: 12px;
  padding: 12px 20px; background: var(--card);
  border-bottom: 1px solid var(--line); }
header h1 { font-size: 18px; margin: 0; }
.muted { color: var(--muted); }
.badge { padding: 1px 8px; border-radius: 10px; font-size: 12px;
  background: var(--line); }
.badge.ok { background: #d3f0dd; } .badge.warn { background: #fde2c8; }
.badge.bad { background: #f8d0d0; }
main { padding: 16px 20px; max-width: 1200px; }
.cards { display: grid; gap: 10px;
  grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); }
.card { background: var(--card); border: 1px solid var(--line);
  border-radius: 6px; padding: 8px 12px; }
.card .k { font-size: 12px; color: var(--muted); }
.card .v { font-size: 20px; font-weight: 600; }
.card .s { font-size: 12px; color: var(--muted); min-height: 1.4em; }
.charts { display: grid; gap: 10px; margin-top: 14px;
  grid-template-columns: repeat(auto-fit, minmax(300px, 1fr)); }
.charts figure { margin: 0; }
svg.chart { width: 100%; height: auto; display: block; }
svg.chart .frame { fill: #fafbfc; stroke: var(--line); }
svg.chart text { font-size: 11px; fill: var(--muted); }
svg.chart polyline { fill: none; stroke-width: 1.6; }
.sa { stroke: var(--a); fill: var(--a); } .sb { stroke: var(--b); fill: var(--b); }
.sc { stroke: var(--c); fill: var(--c); }
.legend span { margin-right: 10px; font-size: 12px; }
.legend i { display: inline-block; width: 10px; height: 3px;
  margin-right: 4px; vertical-align: middle; }
.legend i.sa { background: var(--a); } .legend i.sb { background: var(--b); }
table { width: 100%; border-collapse: collapse; margin-top: 8px;
  background: var(--card); font-size: 13px; }
th, td { text-align: right; padding: 4px 8px; border-bottom: 1px solid var(--line); }
th:first-child, td:first-child { text-align: left; font-family: monospace; }
h2 { font-size: 15px; margin: 18px 0 4px; }
#auth { display: none; margin: 12px 20px; padding: 10px;
  background: #fff7e6; border: 1px solid #f0c36d; border-radius: 6px; }
#error { color: #b00020; }
</style>
</head>
<body id="status-body" data-state="loading" data-updates="0">
<header>
  <h1>clusterkv</h1>
  <span id="model" class="muted">model …</span>
  <span id="backend" class="muted"></span>
  <span id="state" class="badge">loading</span>
  <span id="updated" class="muted"></span>
  <span id="error"></span>
</header>
<form id="auth">
  This server needs a bearer token to show its status:
  <input id="token" type="password" autocomplete="off" size="30">
  <button type="submit">Show</button>
  <span class="muted">(kept in this tab's session storage only)</span>
</form>
<main>
  <div class="cards">
    <div class="card"><div class="k">sessions</div>
      <div class="v" id="sessions-count" data-count="">–</div>
      <div class="s" id="sessions-sub"></div></div>
    <div class="card"><div class="k">host KV</div>
      <div class="v" id="kv-host">–</div><div class="s" id="kv-host-sub"></div></div>
    <div class="card"><div class="k">device KV</div>
      <div class="v" id="kv-device">–</div><div class="s" id="kv-device-sub"></div></div>
    <div class="card"><div class="k">queue</div>
      <div class="v" id="queue">–</div><div class="s" id="queue-sub"></div></div>
    <div class="card"><div class="k">admissions</div>
      <div class="v" id="admitted">–</div><div class="s" id="admitted-sub"></div></div>
    <div class="card"><div class="k">tokens (prompt / generated)</div>
      <div class="v" id="tokens">–</div><div class="s" id="tokens-sub"></div></div>
    <div class="card"><div class="k">time to first token (mean)</div>
      <div class="v" id="ttft">–</div><div class="s" id="ttft-sub"></div></div>
    <div class="card"><div class="k">device cache hit rate</div>
      <div class="v" id="cache">–</div><div class="s">all sessions, since start</div></div>
    <div class="card"><div class="k">recall (sampled decode steps)</div>
      <div class="v" id="recall">–</div><div class="s" id="recall-sub"></div></div>
  </div>
  <div class="charts">
    <figure><div class="legend"><b>tokens/s</b>
      <span><i class="sa"></i>input (prefill)</span><span><i class="sb"></i>decode</span></div>
      <svg class="chart" id="chart-tps" viewBox="0 0 400 150" data-points="0" data-max="0"></svg></figure>
    <figure><div class="legend"><b>time to first token, s</b>
      <span class="muted">mean per second</span></div>
      <svg class="chart" id="chart-ttft" viewBox="0 0 400 150" data-points="0" data-max="0"></svg></figure>
    <figure><div class="legend"><b>queue depth</b>
      <span class="muted">jobs queued or prefilling</span></div>
      <svg class="chart" id="chart-queue" viewBox="0 0 400 150" data-points="0" data-max="0"></svg></figure>
  </div>
  <h2>Sessions <span class="muted" id="list-note"></span></h2>
  <table>
    <thead><tr><th>id</th><th>policy</th><th>tokens</th><th>segments</th>
      <th>clustered</th><th>host</th><th>device</th><th>cache hits</th>
      <th>state</th></tr></thead>
    <tbody id="sessions"></tbody>
  </table>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
// The inline <svg>'s own namespace (the page holds no URL at all).
const SVGNS = $("chart-tps").namespaceURI;
const PERIOD_MS = 1500;
let token = null;
let timer = null;
let inFlight = false;

function readToken() {
  const m = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (m) {
    token = decodeURIComponent(m[1]);
    try { sessionStorage.setItem("ckvToken", token); } catch (e) {}
    history.replaceState(null, "", location.pathname + location.search);
  } else {
    try { token = sessionStorage.getItem("ckvToken"); } catch (e) {}
  }
}

function bytes(n) {
  if (n == null) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(n < 10 ? 2 : 1)) + " " + u[i];
}
const pct = (x) => (x == null ? "–" : (100 * x).toFixed(1) + "%");
const num = (x) => (x == null ? "–" : Number(x).toLocaleString("en-US"));
function secs(x) {
  if (x == null) return "–";
  return x < 1 ? (1000 * x).toFixed(x < 0.01 ? 2 : 0) + " ms" : x.toFixed(2) + " s";
}
function text(id, v) { $(id).textContent = v; }

function setState(state, message) {
  document.body.dataset.state = state;
  const badge = $("state");
  const look = { ok: ["serving", "ok"], draining: ["draining", "warn"],
    auth: ["token needed", "warn"], error: ["unreachable", "bad"] }[state];
  badge.textContent = look[0];
  badge.className = "badge " + look[1];
  text("error", message || "");
  $("auth").style.display = state === "auth" ? "block" : "none";
}

function el(name, attrs) {
  const e = document.createElementNS(SVGNS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}

// A y-axis top that is 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// Draws each series (values aligned with times; null leaves a gap) as
// polylines; single points between gaps as dots. Returns points drawn.
function drawChart(svg, times, series, format) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = 400, H = 150, L = 44, R = 6, T = 8, B = 18;
  svg.appendChild(el("rect", { class: "frame", x: L, y: T,
    width: W - L - R, height: H - T - B }));
  let top = 0;
  for (const s of series) for (const v of s.values) if (v != null && v > top) top = v;
  svg.dataset.max = top;
  top = niceMax(top);
  const t1 = times.length ? times[times.length - 1] : 0;
  const t0 = times.length ? Math.min(times[0], t1 - 60000) : 0;
  const x = (t) => L + (W - L - R) * (t - t0) / Math.max(1, t1 - t0);
  const y = (v) => T + (H - T - B) * (1 - v / top);
  const label = (s, px, py, anchor) => {
    const e = el("text", { x: px, y: py, "text-anchor": anchor });
    e.textContent = s;
    svg.appendChild(e);
  };
  label(format(top), L - 4, T + 9, "end");
  label("0", L - 4, H - B, "end");
  label("now", W - R, H - 4, "end");
  if (times.length) label("-" + Math.round((t1 - t0) / 60000) + " min", L, H - 4, "start");
  let drawn = 0;
  for (const s of series) {
    let run = [];
    const flush = () => {
      if (run.length === 1) {
        svg.appendChild(el("circle", { class: s.cls, cx: run[0][0], cy: run[0][1], r: 2 }));
      } else if (run.length > 1) {
        svg.appendChild(el("polyline", { class: s.cls,
          points: run.map((p) => p[0].toFixed(1) + "," + p[1].toFixed(1)).join(" ") }));
      }
      drawn += run.length;
      run = [];
    };
    s.values.forEach((v, i) => {
      if (v == null) flush(); else run.push([x(times[i]), y(v)]);
    });
    flush();
  }
  svg.dataset.points = drawn;
  return drawn;
}

function renderCards(st) {
  const m = st.model, b = st.backend, s = st.sessions;
  text("model", m.name || m.path);
  $("model").title = m.path;
  text("backend", `${m.architecture}, ${m.layers} layers · ${b.name} (${b.kernels}), ` +
    `${b.threads} threads · KV policy ${b.kv_policy} · v${st.version}`);
  text("sessions-count", String(s.count));
  $("sessions-count").dataset.count = s.count;
  text("sessions-sub", `of ${s.max} max · yours: ${s.yours}`);
  text("kv-host", bytes(s.host_bytes));
  text("kv-host-sub", "of " + bytes(s.max_host_bytes));
  text("kv-device", bytes(s.device_bytes));
  text("kv-device-sub", "of " + bytes(s.max_device_bytes));
  const q = st.queue;
  text("queue", String(q.queued + q.waiting_input));
  text("queue-sub", `${q.queued} queued, ${q.waiting_input} prefilling, ${q.active} running`);
  const a = st.admission;
  text("admitted", num(a.admitted));
  const why = Object.entries(a.rejected_by_limit).map(([k, n]) => `${k} ${n}`).join(", ");
  text("admitted-sub", `${num(a.rejected)} refused${why ? " (" + why + ")" : ""}`);
  const t = st.totals;
  text("tokens", t ? `${num(t.prompt_tokens)} / ${num(t.generated_tokens)}` : "–");
  text("tokens-sub", t ? `${num(t.requests_ok)} requests ok, ${num(t.requests_failed)} failed` : "no metrics");
  text("ttft", secs(t && t.ttft_mean_seconds));
  text("cache", pct(t && t.cache_hit_rate));
  // The default policy's recall large; every policy's below.
  const own = st.recall.find((r) => r.policy === b.kv_policy);
  text("recall", own ? pct(own.topk_mean) : "–");
  text("recall-sub", st.recall.length ? st.recall.map((r) => `${r.policy}: top-k ` +
    `${pct(r.topk_mean)}, mass ${pct(r.mass_mean)}, ${num(r.samples)} samples`).join("; ")
    : "not sampled (--recall-sample-every)");
}

function renderSessions(s) {
  const body = $("sessions");
  while (body.firstChild) body.removeChild(body.firstChild);
  for (const x of s.list) {
    const tr = document.createElement("tr");
    for (const v of [x.id, x.policy, num(x.tokens), num(x.segments), num(x.clustered_tokens),
                     bytes(x.host_bytes), bytes(x.device_bytes), pct(x.cache_hit_rate),
                     x.busy ? "busy" : "idle " + x.idle_seconds.toFixed(0) + " s"]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
  text("list-note", s.list.length < s.yours
    ? `(${s.list.length} most recently used of ${s.yours})` : "");
}

function render(st) {
  renderCards(st);
  renderSessions(st.sessions);
  const h = st.history;
  drawChart($("chart-tps"), h.unix_ms, [
    { values: h.input_tokens_per_second, cls: "sa" },
    { values: h.decode_tokens_per_second, cls: "sb" }], (v) => num(v));
  drawChart($("chart-ttft"), h.unix_ms, [{ values: h.ttft_seconds, cls: "sb" }], secs);
  drawChart($("chart-queue"), h.unix_ms, [{ values: h.queue_depth, cls: "sc" }], (v) => num(v));
  text("updated", "updated " + new Date(st.time_unix_ms).toLocaleTimeString());
  document.body.dataset.updates = Number(document.body.dataset.updates) + 1;
}

async function refresh() {
  inFlight = true;
  try {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const r = await fetch("v1/status", { headers, cache: "no-store" });
    if (r.status === 401) {
      setState("auth", token ? "the token was refused" : "");
    } else if (!r.ok) {
      setState("error", "HTTP " + r.status);
    } else {
      const st = await r.json();
      render(st);
      setState(st.draining ? "draining" : "ok");
    }
  } catch (e) {
    setState("error", String(e.message || e));
  }
  inFlight = false;
  timer = setTimeout(refresh, PERIOD_MS);
}

$("auth").addEventListener("submit", (e) => {
  e.preventDefault();
  token = $("token").value.trim();
  try { sessionStorage.setItem("ckvToken", token); } catch (err) {}
  if (!inFlight) {
    clearTimeout(timer);
    refresh();
  }
});
readToken();
refresh();
</script>
</body>
</html>
)html";

}  // namespace

absl::string_view StatusPageHtml() { return kPage; }

}  // namespace ckv::server::http
