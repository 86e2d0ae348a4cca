// veriloop run browser: one page per run (curves, rollouts, spot-check, search), or a comparison of runs.
// Data: the JSON in #run-data (page.py).  Served pages (veriloop report --serve) ask /api/* for records.
"use strict";
const D = JSON.parse(document.getElementById("run-data").textContent);
const $ = (sel, root) => (root || document).querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const fmt = (v) => (typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toPrecision(4)) : v === null || v === undefined ? "" : typeof v === "object" ? JSON.stringify(v) : String(v));
const el = (tag, attrs, html) => { const e = document.createElement(tag); Object.assign(e, attrs || {}); if (html !== undefined) e.innerHTML = html; return e; };
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
const drawn = {};  // chart id -> number of points drawn (read by the browser tests)
window.veriloop = {drawn, data: D};

function table(obj) {
  return "<table>" + Object.entries(obj || {}).map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(fmt(v))}</td></tr>`).join("") + "</table>";
}

// ------------------------------------------------------------------ layout
const views = [];
function view(id, title, build) { views.push({id, title, build, built: false}); }
function show(id) {
  for (const v of views) {
    $("#tab-" + v.id).classList.toggle("on", v.id === id);
    $("#view-" + v.id).classList.toggle("on", v.id === id);
    if (v.id === id && !v.built) { v.built = true; v.build($("#view-" + v.id)); }
  }
  if (location.hash !== "#" + id) history.replaceState(null, "", "#" + id);
  window.dispatchEvent(new Event("resize"));
}
function layout(subtitle) {
  const app = $("#app");
  app.innerHTML = `<header><h1>${esc(D.title)}</h1><span class="sub">${esc(subtitle)}</span></header><nav></nav><main></main>`;
  for (const v of views) {
    const b = el("button", {id: "tab-" + v.id, textContent: v.title});
    b.onclick = () => show(v.id);
    $("nav").appendChild(b);
    $("main").appendChild(el("section", {id: "view-" + v.id}));
  }
  const want = location.hash.slice(1);
  show(views.some((v) => v.id === want) ? want : views[0].id);
}

// ------------------------------------------------------------------ overview
function computeView(c) {
  // the compute ledger: training beside test time (seed 002 s.8), estimated FLOPs as the ledger states them
  let h = "<h2 id=\"compute\">Compute</h2>";
  if (c.training) h += `<h3>Training${D.kind === "train" ? "" : " of the searched policy"}</h3>` + table(c.training);
  else if (D.kind === "search") h += "<p class=\"muted\">The searched policy's training compute is not known (veriloop did not train it).</p>";
  if (c.test_time && c.test_time.length) {
    h += "<h3>Test time, per question</h3><table id=\"compute-test-time\"><tr><th>strategy</th><th>budget</th><th>tokens</th><th>PRM calls</th><th>verifier calls</th><th>seconds</th><th>generation FLOPs</th></tr>" +
      c.test_time.map((r) => `<tr><td>${esc(r.strategy)}${r.oracle ? " [oracle]" : ""}</td><td>${esc(r.budget)}</td><td>${esc(fmt(r.tokens))}</td><td>${esc(fmt(r.prm_calls))}</td><td>${esc(fmt(r.verifier_calls))}</td><td>${esc(fmt(r.seconds))}</td><td>${esc(fmt(r.generation_flops))}</td></tr>`).join("") + "</table>";
  }
  return h;
}

function overview(root) {
  let h = "<h2>Alarms</h2>";
  if (!D.alarms || !D.alarms.length) h += `<div class="ok">No alarm fired${D.kind === "train" ? " (the checks of seed 003's debugging list: see the table below)" : ""}.</div>`;
  for (const a of D.alarms || []) {
    h += `<div class="alarm"><b>${esc(a.name)}</b> at step ${esc(a.step)}: ${esc(a.message)}<br><span class="muted">${esc(a.metric)} = ${esc(fmt(a.value))}, threshold ${esc(fmt(a.threshold))}. What to do (${esc(a.seed)}): ${esc(a.advice)}</span></div>`;
  }
  if (D.summary) h += "<h2>Summary</h2>" + table(D.summary);
  if (D.compute) h += computeView(D.compute);
  if (D.last && Object.keys(D.last).length) h += `<h2>Last step (${esc(D.last.step)})</h2>` + table(D.last);
  if (D.runs && D.runs.length) h += "<h2>Runs</h2><ul>" + D.runs.map((r) => `<li><a href="${esc(r.report)}">${esc(r.name)}</a></li>`).join("") + "</ul>";
  if (D.table) h += `<h2>Held-out table</h2><pre>${esc(D.table)}</pre>`;
  if (D.config) h += `<h2>Config</h2><pre>${esc(D.config)}</pre>`;
  if (D.alarm_table && D.kind === "train") {
    h += "<h2>What the alarms watch</h2><table><tr><th>alarm</th><th>metric</th><th>options</th><th>means</th></tr>" +
      D.alarm_table.map((a) => `<tr><td>${esc(a.name)}</td><td>${esc([].concat(a.metrics || a.metric || []).join(", "))}</td><td>${esc([].concat(a.options || a.fields || []).join(", "))}</td><td>${esc(a.meaning || a.means || a.advice || "")}</td></tr>`).join("") + "</table>";
  }
  root.innerHTML = h;
}

// ------------------------------------------------------------------ curves
function lineTrace(x, y, name, i, extra) {
  return Object.assign({x, y, name, type: "scatter", mode: "lines", connectgaps: true,
    line: {width: 1.5, color: COLORS[i % COLORS.length]}}, extra || {});
}
// A long run's curves are drawn from at most MAX_POINTS points per series: each of MAX_POINTS / 2 buckets of
// steps gives its lowest and highest value (a spike stays visible); zooming in redraws the visible steps the same
// way, so every step can be seen at full resolution.
const MAX_POINTS = 2000;
function firstAtLeast(x, v) { let lo = 0, hi = x.length; while (lo < hi) { const m = (lo + hi) >> 1; if (x[m] < v) lo = m + 1; else hi = m; } return lo; }
function decimate(x, y, x0, x1) {
  const i0 = x0 === undefined ? 0 : Math.max(0, firstAtLeast(x, x0) - 1), i1 = x1 === undefined ? x.length : Math.min(x.length, firstAtLeast(x, x1) + 1);
  if (i1 - i0 <= MAX_POINTS) return [x.slice(i0, i1), y.slice(i0, i1)];
  const buckets = MAX_POINTS / 2, size = (i1 - i0) / buckets, ox = [], oy = [];
  for (let b = 0; b < buckets; b++) {
    const s = i0 + Math.floor(b * size), e = i0 + Math.floor((b + 1) * size);
    let lo = -1, hi = -1;
    for (let j = s; j < e; j++) {
      if (y[j] === null || y[j] === undefined) continue;
      if (lo < 0 || y[j] < y[lo]) lo = j;
      if (hi < 0 || y[j] > y[hi]) hi = j;
    }
    for (const j of lo < 0 ? [] : lo === hi ? [lo] : [Math.min(lo, hi), Math.max(lo, hi)]) { ox.push(x[j]); oy.push(y[j]); }
  }
  return [ox, oy];
}
const full = {};  // chart id -> its traces at full resolution
function visible(id, x0, x1) {
  return full[id].map((t) => { const [x, y] = decimate(t.x, t.y, x0, x1); return Object.assign({}, t, {x, y}); });
}
function evalShapes(steps) {
  return (steps || []).slice(0, 200).map((s) => ({type: "line", x0: s, x1: s, yref: "paper", y0: 0, y1: 1, line: {dash: "dot", width: 1, color: "#9aa"}}));
}
function plot(div, traces, ytitle, shapes, secondary) {
  const layout = {margin: {l: 55, r: secondary ? 55 : 15, t: 30, b: 35}, hovermode: "x unified", legend: {orientation: "h", y: -0.2, font: {size: 10}},
    xaxis: {title: {text: "step", standoff: 2}}, yaxis: {title: {text: ytitle}}, shapes: shapes || [], title: {text: div.dataset.title, font: {size: 13}}};
  if (secondary) layout.yaxis2 = {overlaying: "y", side: "right", title: {text: "rate"}, rangemode: "tozero"};
  full[div.id] = traces;
  const shown = visible(div.id);
  Plotly.newPlot(div, shown, layout, {responsive: true, displaylogo: false});
  drawn[div.id] = shown.reduce((n, t) => n + t.y.filter((v) => v !== null && v !== undefined).length, 0);
  div.on("plotly_relayout", (ev) => {
    const x0 = ev["xaxis.range[0]"], x1 = ev["xaxis.range[1]"];
    if (x0 === undefined && !ev["xaxis.autorange"]) return;
    const again = visible(div.id, x0, x1);
    Plotly.react(div, again, div.layout);
    drawn[div.id] = again.reduce((n, t) => n + t.y.filter((v) => v !== null && v !== undefined).length, 0);
  });
}
function panelTraces(c, panel, prefix, k0) {
  return panel.keys.map((k, i) => {
    const evalKey = /greedy_accuracy|wrong_steps_rate/.test(k);
    let x = c.steps, y = c.series[k] || [];
    if (evalKey) { const pts = x.map((s, j) => [s, y[j]]).filter((p) => p[1] !== null); x = pts.map((p) => p[0]); y = pts.map((p) => p[1]); }
    return lineTrace(x, y, (prefix || "") + k, (k0 || 0) + i, Object.assign(evalKey ? {mode: "lines+markers", marker: {size: 7}} : {}, panel.secondary.includes(k) ? {yaxis: "y2"} : {}));
  });
}
function curvesView(root) {
  const c = D.curves;
  if (!c || !c.steps.length) { root.innerHTML = "<p>No metrics yet.</p>"; return; }
  root.innerHTML = `<p class="legend">${c.steps.length} steps. Dotted lines: held-out evaluations (${c.eval_steps.length}). Drag to zoom, double-click to reset, hover for values.</p><div class="grid" id="charts"></div>`;
  const grid = $("#charts"), shapes = evalShapes(c.eval_steps);
  for (const p of c.panels) {
    const div = el("div", {className: "chart", id: "chart-" + p.id});
    div.dataset.title = p.title;
    grid.appendChild(div);
    plot(div, panelTraces(c, p), p.ytitle, shapes, p.secondary.length > 0);
  }
  if (c.more.length) {
    const box = el("div", {}, `<h2>More metrics</h2><select id="more">${c.more.map((k) => `<option>${esc(k)}</option>`).join("")}</select>`);
    root.appendChild(box);
    const div = el("div", {className: "chart", id: "chart-more"});
    div.dataset.title = "";
    root.appendChild(div);
    const draw = () => { const k = $("#more").value; div.dataset.title = k; plot(div, [lineTrace(c.steps, c.series[k], k, 0)], k, shapes); };
    $("#more").onchange = draw;
    draw();
  }
}

// ------------------------------------------------------------------ rollouts
const COLOR_BY = {
  advantage: {label: "advantage", value: (r, t) => (Array.isArray(r.advantage) ? r.advantage[t] : r.advantage), scale: 1},
  ratio: {label: "log ratio (last pass)", value: (r, t) => (r.ratio && r.ratio[t] !== undefined ? Math.log(Math.max(r.ratio[t], 1e-12)) : null), scale: 0.2},
  mismatch: {label: "learner - behaviour log-prob", value: (r, t) => (r.learner && r.behavior && r.learner[t] !== undefined ? r.learner[t] - r.behavior[t] : null), scale: 0.05},
  behavior: {label: "behaviour log-prob", value: (r, t) => (r.behavior ? r.behavior[t] : null), scale: 3, oneSided: true},
  none: {label: "none", value: () => null, scale: 1},
};
function colorOf(v, how) {
  if (v === null || v === undefined || !isFinite(v)) return "transparent";
  const a = Math.min(1, Math.abs(v) / how.scale) * 0.75;
  if (how.oneSided) return `rgba(214,39,40,${a})`;  // more negative log-prob: redder
  return v >= 0 ? `rgba(44,160,44,${a})` : `rgba(214,39,40,${a})`;
}
let colorBy = "advantage";
function tokensHtml(r) {
  if (!r.pieces) return `<div class="tokens">${esc(r.completion)}</div><p class="muted">Per-token view unavailable: the run's tokenizer was not found.</p>`;
  const how = COLOR_BY[colorBy], ends = {};
  for (const [pos, score] of r.prm_steps || []) ends[pos] = score;
  const spans = r.pieces.map((p, t) => {
    const tool = r.mask && r.mask[t] === 0, v = tool ? null : how.value(r, t);
    const title = [`token ${t}: ${JSON.stringify(p)}`, r.behavior ? `behaviour log-prob ${fmt(r.behavior[t])}` : "", r.learner ? `learner log-prob ${fmt(r.learner[t])}` : "",
      r.ratio ? `ratio ${fmt(r.ratio[t])}` : "", r.advantage !== null && r.advantage !== undefined ? `advantage ${fmt(Array.isArray(r.advantage) ? r.advantage[t] : r.advantage)}` : "",
      t in ends ? `PRM step score ${fmt(ends[t])}` : "", tool ? "tool output (no loss)" : ""].filter(Boolean).join("\n");
    return `<span class="tok${tool ? " tool" : ""}${t in ends ? " step-end" : ""}" data-t="${t}" style="background:${tool ? "" : colorOf(v, how)}" title="${esc(title)}">${esc(p)}</span>` +
      (t in ends ? `<span class="badge" title="PRM score of the step that ends here">PRM ${fmt(ends[t])}</span>` : "");
  });
  return `<div class="tokens" id="tokens">${spans.join("")}</div>`;
}
// the verdict kinds that mean the verifier could not read one final answer (verifiers/base.py's vocabulary)
const PARSE = {no_answer: "none stated", parse_error: "does not parse", ambiguous: "several or revised", bad_format: "bad format"};
function recordHtml(r) {
  const comp = Object.entries(r.components || {}).map(([k, v]) => `<span class="badge">${esc(k)} ${esc(fmt(v))}</span>`).join("");
  let h = `<div><span class="badge ${esc(r.outcome)}">${esc(r.outcome || "no verdict")}</span><span class="badge">reward ${esc(fmt(r.reward))}</span>${comp}
    <span class="badge">${r.truncated ? "truncated (length)" : esc(r.finish_reason)}</span><span class="badge">policy v${esc(r.policy_version)}</span></div>
    <p class="muted">record ${esc(r.id)} · step ${esc(r.step)} · problem ${esc(r.problem_id)} · group ${esc(r.group_id)} · verifier ${esc(r.verifier)} · ${esc(r.tokens)} tokens · sampling ${esc(JSON.stringify(r.sampling))}</p>
    <p><b>Verdict:</b> ${esc(r.details)} <span class="muted">(answer: ${esc(PARSE[r.outcome] || "read")})</span></p><p><b>Reference:</b> ${esc(r.reference)}</p>
    <h2>Prompt</h2><pre>${esc(r.prompt)}</pre>
    <h2>Completion</h2><div class="legend">Colour: <select id="colorby">${Object.entries(COLOR_BY).map(([k, c]) => `<option value="${k}"${k === colorBy ? " selected" : ""}>${esc(c.label)}</option>`).join("")}</select>
    <span class="muted">green positive, red negative; hover a token for its numbers${r.learner ? "" : " (learner values: only for records an update read)"}</span></div>${tokensHtml(r)}`;
  if (r.prm_steps && r.prm_steps.length) h += `<p class="muted">PRM step scores: ${r.prm_steps.map((p) => fmt(p[1])).join(", ")}</p>`;
  if (r.tool_calls && r.tool_calls.length) {
    h += "<h2>Tool calls</h2>" + r.tool_calls.map((c, i) => `<div class="card ${c.status === "ok" ? "fine" : "suspicious"}"><b>call ${i + 1}</b> <span class="badge">${esc(c.status)}</span> <span class="muted">${esc(fmt(c.seconds))} s</span><pre>${esc(c.code)}</pre><b>output</b><pre>${esc(c.output)}</pre></div>`).join("");
  }
  return h;
}
function showRecord(r, box) {
  box.innerHTML = recordHtml(r);
  $("#colorby", box).onchange = (e) => { colorBy = e.target.value; $("#tokens", box).outerHTML = tokensHtml(r); };
}
function readFilters() {
  const f = {};
  for (const k of ["step", "problem", "group", "reward_min", "reward_max", "outcome", "truncated", "tools"]) { const v = $("#f-" + k).value.trim(); if (v !== "") f[k] = v; }
  return f;
}
function stepRange(s) { const m = String(s).match(/^(\d+)(?:\s*-\s*(\d+))?$/); return m ? [Number(m[1]), Number(m[2] ?? m[1])] : null; }
function matches(r, f) {
  if (f.step) { const rg = stepRange(f.step); if (rg && (r.step < rg[0] || r.step > rg[1])) return false; }
  if (f.problem && !String(r.problem_id).includes(f.problem)) return false;
  if (f.group && r.group_id !== f.group) return false;
  if (f.reward_min !== undefined && !(r.reward >= Number(f.reward_min))) return false;
  if (f.reward_max !== undefined && !(r.reward <= Number(f.reward_max))) return false;
  if (f.outcome && r.outcome !== f.outcome) return false;
  if (f.truncated === "yes" && !r.truncated) return false;
  if (f.truncated === "no" && r.truncated) return false;
  const calls = (r.tool_calls || []).length;
  if (f.tools === "with" && !calls) return false;
  if (f.tools === "without" && calls) return false;
  if (f.tools === "failed" && !r.failed_tool_calls) return false;
  return true;
}
async function api(path, body) {
  const res = await fetch(path, body ? {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)} : {});
  if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  return res.json();
}
function rolloutsView(root) {
  const outcomes = D.outcomes || [...new Set((D.records || []).map((r) => r.outcome))].sort();
  root.innerHTML = `<div class="filters">
    <label>step (n or a-b)<input id="f-step" placeholder="any"></label><label>problem<input id="f-problem" placeholder="id contains"></label>
    <label>group<input id="f-group" placeholder="exact id"></label><label>reward ≥<input id="f-reward_min" type="number" step="any"></label>
    <label>reward ≤<input id="f-reward_max" type="number" step="any"></label>
    <label>verdict<select id="f-outcome"><option value="">any</option>${outcomes.map((o) => `<option>${esc(o)}</option>`).join("")}</select></label>
    <label>truncated<select id="f-truncated"><option value="">any</option><option>yes</option><option>no</option></select></label>
    <label>tool use<select id="f-tools"><option value="">any</option><option value="with">with calls</option><option value="failed">a call failed</option><option value="without">no calls</option></select></label>
    <button id="f-apply">Filter</button></div>
    <div class="count" id="count"></div>
    <div class="split"><div class="list"><table id="rec-list"></table></div><div class="detail" id="rec-detail"><p class="muted">Pick a record on the left.</p></div></div>`;
  const run = async () => {
    const f = readFilters(), t0 = performance.now();
    let rows, total;
    if (D.served) {
      const q = new URLSearchParams(f); q.set("limit", "500");
      const got = await api("/api/records?" + q);
      rows = got.rows; total = got.total;
    } else {
      rows = D.records.filter((r) => matches(r, f)); total = rows.length;
    }
    const ms = performance.now() - t0;
    $("#count").textContent = `${total} of ${D.record_count ?? (D.records || []).length} records match${rows.length < total ? ` (first ${rows.length} listed)` : ""} · ${ms.toFixed(0)} ms` +
      (D.served ? "" : ` · this page holds a sample of ${D.records.length}; veriloop report --serve reads them all`);
    $("#count").dataset.matches = String(total);
    $("#rec-list").innerHTML = "<tr><th>record</th><th>problem</th><th>reward</th><th>verdict</th><th>end</th><th>tokens</th></tr>" +
      rows.map((r, k) => `<tr data-k="${k}" data-id="${esc(r.id)}"><td>${esc(r.id)}</td><td>${esc(r.problem_id)}</td><td>${esc(fmt(r.reward))}</td><td>${esc(r.outcome)}</td><td>${esc(r.finish_reason)}</td><td>${esc(r.tokens)}</td></tr>`).join("");
    for (const tr of root.querySelectorAll("#rec-list tr[data-k]")) {
      tr.onclick = async () => {
        for (const o of root.querySelectorAll("#rec-list tr.sel")) o.classList.remove("sel");
        tr.classList.add("sel");
        const r = D.served ? await api("/api/record?id=" + encodeURIComponent(tr.dataset.id)) : rows[Number(tr.dataset.k)];
        showRecord(r, $("#rec-detail"));
      };
    }
  };
  $("#f-apply").onclick = run;
  for (const i of root.querySelectorAll(".filters input")) i.onkeydown = (e) => { if (e.key === "Enter") run(); };
  for (const s of root.querySelectorAll(".filters select")) s.onchange = run;
  run();
}

// ------------------------------------------------------------------ spot-check
const MARKS_KEY = "veriloop-marks:" + D.run_dir;
function loadMarks() {
  const saved = D.served ? {} : JSON.parse(localStorage.getItem(MARKS_KEY) || "{}");
  return Object.assign({}, (D.spot_check || {}).marks || {}, saved);
}
function spotView(root) {
  const sc = D.spot_check;
  if (!sc || !sc.items.length) { root.innerHTML = "<p>No rewarded completion to check.</p>"; return; }
  const marks = loadMarks();
  root.innerHTML = `<p class="legend">Seed 002: check high-reward samples by hand for odd patterns. ${sc.per_range} rewarded completions per step range, drawn with seed ${sc.seed};
    the range's shortest and longest are always shown; <span class="badge flag">answer-only</span> means at most ${sc.answer_only_chars} characters besides the final answer.
    ${D.served ? "Marks are saved in the run directory (spot_check.json)." : "Marks stay in this browser until exported; <code>veriloop report RUN --marks FILE</code> reads an exported file back into the run directory."}</p>
    <div class="count" id="mark-count"></div>${D.served ? "" : '<button id="export">Export marks (JSON)</button>'}<div id="cards"></div>`;
  const count = () => {
    const v = Object.values(marks);
    $("#mark-count").textContent = `${sc.items.length} to check · ${v.filter((m) => m.mark === "fine").length} fine · ${v.filter((m) => m.mark === "suspicious").length} suspicious`;
  };
  const save = async (id) => {
    if (D.served) await api("/api/marks", {id, mark: marks[id] || null});
    else localStorage.setItem(MARKS_KEY, JSON.stringify(marks));
    count();
  };
  const byId = {};
  for (const r of D.records || []) byId[r.id] = r;
  const cards = $("#cards");
  for (const it of sc.items) {
    const card = el("div", {className: "card " + ((marks[it.id] || {}).mark || ""), id: "spot-" + it.id.replace(":", "-")});
    card.innerHTML = `<div><b>${esc(it.id)}</b> <span class="muted">steps ${esc(it.range)}</span> ${it.flags.map((f) => `<span class="badge flag">${esc(f)}</span>`).join("")}</div><div class="body muted">loading…</div>
      <button class="mark" data-m="fine">fine</button><button class="mark" data-m="suspicious">suspicious</button><textarea placeholder="note">${esc((marks[it.id] || {}).note || "")}</textarea>`;
    cards.appendChild(card);
    const fill = (r) => { $(".body", card).innerHTML = `<span class="badge">reward ${esc(fmt(r.reward))}</span><span class="badge">${esc(r.tokens)} tokens</span> <b>Q:</b> ${esc(r.prompt)}<pre>${esc(r.completion)}</pre>`; };
    if (byId[it.id]) fill(byId[it.id]); else if (D.served) api("/api/record?id=" + encodeURIComponent(it.id)).then(fill);
    for (const b of card.querySelectorAll("button.mark")) {
      b.onclick = () => {
        marks[it.id] = {mark: b.dataset.m, note: $("textarea", card).value};
        card.className = "card " + b.dataset.m;
        save(it.id);
      };
    }
    $("textarea", card).onchange = () => { if (marks[it.id]) { marks[it.id].note = $("textarea", card).value; save(it.id); } };
  }
  if (!D.served) {
    $("#export").onclick = () => {
      const blob = new Blob([JSON.stringify({run_dir: D.run_dir, marks}, null, 1)], {type: "application/json"});
      const a = el("a", {href: URL.createObjectURL(blob), download: "spot_check.json"});
      document.body.appendChild(a); a.click(); a.remove();
    };
  }
  count();
}

// ------------------------------------------------------------------ search runs
function searchView(root) {
  const s = D.search.summary, results = D.search.results;
  const bins = Object.keys(s.bins || {});
  root.innerHTML = `<p class="legend">${esc(s.problems)} problems of task ${esc(s.task)}; policy ${esc(s.policy)}${s.prm ? ", PRM " + esc(s.prm) : ""}. Oracles (they read the reference) are dashed.</p>
    <div class="grid" id="search-charts"></div><h2>Compute-optimal choice per bin</h2><div id="optimal"></div>
    <h2>Each problem</h2><div class="filters"><label>problem<select id="s-problem">${[...new Set(results.map((r) => r.problem_id))].map((p) => `<option>${esc(p)}</option>`).join("")}</select></label></div><div id="s-detail"></div>`;
  const groups = [["all problems", null]].concat(bins.map((b, k) => [`${b} (${s.bins[b].problems} problems)`, k]).filter((g) => s.bins[bins[g[1]]].problems > 0));
  for (const [title, k] of groups) {
    const div = el("div", {className: "chart", id: "search-chart-" + (k === null ? "all" : k)});
    div.dataset.title = title;
    $("#search-charts").appendChild(div);
    const traces = Object.entries(s.strategies).map(([name, cells], i) => {
      const pts = Object.entries(cells).map(([b, c]) => { const src = k === null ? c : c.by_bin[k]; return [src.mean_tokens ?? c.mean_tokens, src.accuracy, b, c.oracle]; }).filter((p) => p[1] !== null && p[1] !== undefined).sort((a, b) => a[0] - b[0]);
      return {x: pts.map((p) => p[0]), y: pts.map((p) => p[1]), text: pts.map((p) => "budget " + p[2]), name, type: "scatter", mode: "lines+markers",
        line: {color: COLORS[i % COLORS.length], dash: pts.some((p) => p[3]) ? "dash" : "solid"}};
    });
    Plotly.newPlot(div, traces, {margin: {l: 50, r: 10, t: 30, b: 40}, title: {text: title, font: {size: 13}}, xaxis: {title: {text: "mean tokens per problem"}, type: "log"},
      yaxis: {title: {text: "accuracy"}, range: [0, 1.02]}, legend: {font: {size: 10}}}, {responsive: true, displaylogo: false});
    drawn[div.id] = traces.reduce((n, t) => n + t.y.length, 0);
  }
  $("#optimal").innerHTML = Object.entries(s.compute_optimal || {}).map(([bin, rows]) => `<h3>${esc(bin)}</h3><table><tr><th>token budget</th><th>strategy</th><th>budget</th><th>accuracy</th></tr>` +
    rows.map((r) => `<tr><td>${esc(fmt(r.token_budget))}</td><td>${esc(r.strategy)}</td><td>${esc(r.budget)}</td><td>${esc(fmt(r.accuracy))}</td></tr>`).join("") + "</table>").join("");
  const detail = () => {
    const p = $("#s-problem").value, rows = results.filter((r) => r.problem_id === p);
    $("#s-detail").innerHTML = rows.map((r) => `<div class="card ${r.correct ? "fine" : "suspicious"}"><b>${esc(r.strategy)} @ ${esc(r.budget)}</b> <span class="badge ${esc(r.outcome)}">${esc(r.outcome)}</span>
      <span class="muted">answer ${esc(r.answer)} · ${esc(r.tokens)} tokens · ${esc(r.prm_calls)} PRM calls · ${esc(r.verifier_calls ?? 1)} verifier calls · ${esc(r.candidates)} candidates · bin ${esc(r.bin)}</span><pre>${esc(r.completion)}</pre>${considered(r)}</div>`).join("");
  };
  $("#s-problem").onchange = detail;
  detail();
}
function considered(r) {
  let h = "";
  if (r.considered && r.considered.length) {
    h += "<table><tr><th>candidate</th><th>score</th><th>answer</th><th>chosen</th></tr>" + r.considered.map((c) => `<tr><td><code>${esc(c.text)}</code></td><td>${esc(fmt(c.score))}</td><td>${esc(c.answer)}</td><td>${c.chosen ? "✓" : ""}</td></tr>`).join("") + "</table>";
  }
  if (r.tree && r.tree.length) {
    const kids = {};
    for (const n of r.tree) (kids[n.parent] = kids[n.parent] || []).push(n);
    const walk = (id, depth) => (kids[id] || []).map((n) => `<div style="padding-left:${depth * 16}px">${n.chosen ? "★ " : "· "}<code>${esc(n.step)}</code> <span class="muted">${n.visits !== undefined ? "visits " + n.visits + " · " : ""}${n.value !== undefined && n.value !== null ? "value " + fmt(n.value) : ""}${n.kept === false ? " · pruned" : ""}</span></div>` + walk(n.id, depth + 1)).join("");
    h += `<div class="tree">${walk(-1, 0)}</div>`;
  }
  return h;
}

// ------------------------------------------------------------------ comparison of runs
function compareView(root) {
  const shapes = [];
  root.innerHTML = `<p class="legend">${D.runs.map((r, i) => `<span class="badge" style="background:${COLORS[i % COLORS.length]};color:#fff">${esc(r.name)}</span>`).join("")} ${esc(D.runs.length)} runs, the same curves overlaid.</p><div class="grid" id="charts"></div>`;
  const panels = {};
  for (const run of D.runs) for (const p of run.curves.panels) if (!panels[p.id]) panels[p.id] = p;
  for (const p of Object.values(panels)) {
    const div = el("div", {className: "chart", id: "chart-" + p.id});
    div.dataset.title = p.title;
    $("#charts").appendChild(div);
    const traces = [];
    D.runs.forEach((run, i) => {
      const mine = run.curves.panels.find((q) => q.id === p.id);
      if (!mine) return;
      panelTraces(run.curves, mine, run.name + ": ", 0).forEach((t, j) => { t.line.color = COLORS[i % COLORS.length]; t.line.dash = ["solid", "dot", "dash", "longdash"][j % 4]; traces.push(t); });
    });
    plot(div, traces, p.ytitle, shapes, p.secondary.length > 0);
  }
}
function configDiffView(root) {
  const names = D.runs.map((r) => r.name);
  root.innerHTML = `<p class="legend">${D.config_diff.length} options differ (of ${D.config_keys}).</p><table id="config-diff"><tr><th>option</th>${names.map((n) => `<th>${esc(n)}</th>`).join("")}</tr>` +
    D.config_diff.map((row) => `<tr><td>${esc(row[0])}</td>${row.slice(1).map((v) => `<td>${esc(fmt(v))}</td>`).join("")}</tr>`).join("") + "</table>" +
    "<h2>Last step of each run</h2>" + D.runs.map((r) => `<h3>${esc(r.name)}</h3>${table(r.last)}`).join("");
}

// ------------------------------------------------------------------ the page
if (D.kind === "compare") {
  view("curves", "Curves", compareView);
  view("config", "Config difference", configDiffView);
  layout(`comparison of ${D.runs.length} runs`);
} else {
  view("overview", "Overview" + (D.alarms && D.alarms.length ? ` (${D.alarms.length} alarm${D.alarms.length > 1 ? "s" : ""})` : ""), overview);
  if (D.kind === "train") {
    view("curves", "Curves", curvesView);
    view("rollouts", "Rollouts", rolloutsView);
    view("spot", "Spot-check", spotView);
  }
  if (D.kind === "search") view("search", "Search", searchView);
  layout(`${D.kind === "train" ? "training run" : D.kind === "search" ? "search run" : "runs"} · ${D.run_dir}${D.served ? " · served" : ""}`);
}
