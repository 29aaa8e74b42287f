// SubZero lineage explorer: the page over `subzero serve`'s JSON API. No build step, no
// library: a workflow graph in SVG, two linked tiled image panes on canvases (the clicked
// array on the left, the answer's array on the right), lineage overlays drawn from
// run-length masks ([start, length, ...] over the flattened array).
//
// Fields the server may not send yet (query scope and global dependencies, path labels, run
// origins, operator descriptions, WCS, replay diffs) are optional: when a key is missing,
// the part of the page that shows it stays hidden.
"use strict";

const TILE = 256;
const MAX_ZOOM = 12;
const $ = (id) => document.getElementById(id);

function makePane(id, nameId, shapeId) {
  const el = $(id);
  return { el, name: $(nameId), shape: $(shapeId), tiles: el.querySelector(".tiles"),
           overlay: el.querySelector(".overlay"), loading: el.querySelector(".loading"),
           rid: null, array: null, drawn: null };
}

const state = {
  runs: [],           // GET /api/runs
  run: null,          // the run's info (GET /api/runs/{run})
  infos: {},          // run id -> run info (the run's, and a replay's parent)
  arrays: {},         // name -> array info of the run
  panes: [],          // [left, right]
  array: null,        // the left pane's array (the one clicked)
  view: { s: 1, ox: 0, oy: 0 },  // screen px per cell; screen position of cell (0, 0); both panes
  tiles: new Map(),   // url -> Image
  answer: null,       // the last query's answer (+ spec, rid)
  result: 0,          // which of its results (targets) is shown
  selection: null,    // {rid, array, r0, c0, r1, c1} view cells of the query's start
  diff: null,         // {rid, array, runs, view, count} the changed cells of a replay
  cursor: null,       // {r, c} the view cell under the mouse (the readout's)
  ui: { mode: "fill", opacity: 0.7, blink: false, blinkOn: false },
  busy: 0,
  asking: null,       // the AbortController of the query on its way
  clickAt: null,      // performance.now() of the click whose answer is awaited
  answerDrawn: true,
};

// -- the API -------------------------------------------------------------------------------
async function api(path, options) {
  const resp = await fetch(path, options);
  let doc;
  try { doc = await resp.json(); } catch (e) { doc = { error: `HTTP ${resp.status}` }; }
  if (!resp.ok) throw new Error(doc.error || `HTTP ${resp.status}`);
  return doc;
}

// A new query supersedes the one on its way: that one is aborted, and the server, seeing
// its client go, stops it before its next step.
function newQuery() {
  if (state.asking) state.asking.abort();
  state.asking = new AbortController();
  return state.asking.signal;
}

function superseded(e) {
  return e.name === "AbortError";
}

function status(text, error) {
  const el = $("status");
  el.textContent = text || "";
  el.className = error ? "error" : "";
}

function human(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

function num(n) {
  return typeof n === "number" ? n.toLocaleString("en") : String(n);
}

function esc(s) {
  return String(s).replace(/[&<>"]/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[ch]));
}

// -- the URL: run, the two arrays, the view and the query ------------------------------------
function readLink() {
  const h = new URLSearchParams(location.hash.slice(1));
  const q = new URLSearchParams(location.search);
  const link = { run: h.get("run") || q.get("run"), left: h.get("left"), right: h.get("right") };
  const v = (h.get("view") || "").split(",").map(Number);
  if (v.length === 3 && v.every(Number.isFinite) && v[2] > 0) link.view = { r: v[0], c: v[1], s: v[2] };
  try { link.spec = h.get("q") ? JSON.parse(h.get("q")) : null; } catch (e) { link.spec = null; }
  return link;
}

let linkTimer = null;
function writeLink() {
  clearTimeout(linkTimer);
  linkTimer = setTimeout(() => {
    if (!state.run) return;
    const [L, R] = state.panes;
    const h = new URLSearchParams();
    h.set("run", state.run.run);
    if (L.array) h.set("left", L.array);
    if (R.array) h.set("right", R.array);
    const { w, h: ht } = viewerSize();
    const v = state.view;
    const r = (ht / 2 - v.oy) / v.s, c = (w / 2 - v.ox) / v.s;
    h.set("view", `${r.toFixed(1)},${c.toFixed(1)},${+v.s.toPrecision(4)}`);
    const a = state.answer;
    if (a && a.rid === state.run.run) h.set("q", JSON.stringify(a.named ? { named: a.named } : a.spec));
    history.replaceState(null, "", `${location.pathname}#${h}`);
  }, 150);
}

// -- runs ----------------------------------------------------------------------------------
function when(r) {
  const t = r.created || r.started;
  if (t === null || t === undefined) return "";
  const d = typeof t === "number" ? new Date(t * 1000) : new Date(t);
  if (isNaN(d)) return String(t);
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
}

function runLabel(r) {
  const parts = [r.id, r.workflow, r.strategy || "-"];
  if (r.real !== undefined || r.inputs) {
    const files = (r.inputs || []).map((i) => i.origin).filter((o) => o && o !== "generated");
    parts.push(r.real && files.length ? `real: ${[...new Set(files)].join(", ")}` : "generated");
  }
  const t = when(r);
  if (t) parts.push(t);
  return parts.join(" · ") + (r.parent ? ` (replay of ${r.parent})` : "");
}

async function loadRuns() {
  const link = readLink();
  // the run's info is asked for at once when the link names the run (the first tiles need it)
  const early = link.run ? api(`/api/runs/${encodeURIComponent(link.run)}`).catch(() => null) : null;
  const runs = await api("/api/runs");
  state.runs = runs;
  const sel = $("run-select");
  sel.innerHTML = "";
  const complete = runs.filter((r) => r.status === "complete").reverse();
  for (const r of complete) {
    const o = document.createElement("option");
    o.value = r.id;
    o.textContent = runLabel(r);
    sel.appendChild(o);
  }
  if (!complete.length) { status("This home has no complete run yet: subzero run ... first.", true); return; }
  if (link.run && complete.some((r) => r.id === link.run)) sel.value = link.run;
  await openRun(sel.value, link, link.run === sel.value ? await early : null);
}

async function runInfo(rid) {
  if (!state.infos[rid]) state.infos[rid] = await api(`/api/runs/${encodeURIComponent(rid)}`);
  return state.infos[rid];
}

async function openRun(rid, link, info) {
  status(`loading run ${rid} …`);
  if (info) state.infos[rid] = info;
  info = await runInfo(rid);
  state.run = info;
  state.arrays = Object.fromEntries(info.arrays.map((a) => [a.name, a]));
  state.answer = null;
  state.selection = null;
  state.diff = null;
  $("diff-toggle").checked = false;
  const listed = state.runs.find((r) => r.id === info.run) || {};
  if ($("run-select").value !== info.run) $("run-select").value = info.run;  // opened by a link
  $("run-summary").textContent = `${info.workflow} · ${info.strategy || "-"} · ` +
    `${info.runtime_s ? info.runtime_s.toFixed(2) + " s" : ""} · lineage ${human(info.lineage_bytes)}`;
  $("replay-tools").hidden = !(info.parent || listed.parent);
  showCodeWarning(info);
  const [L, R] = state.panes;
  const want = link || {};
  const left = state.arrays[want.left] ? want.left : (info.outputs[0] || info.arrays[0].name);
  openArray(left, !want.view);
  if (state.arrays[want.right]) openPane(R, info.run, want.right);
  else { R.rid = null; R.array = null; R.name.textContent = "the answer's array"; R.shape.textContent = ""; }
  if (want.view) {
    const { w, h } = viewerSize();
    state.view = { s: want.view.s, ox: w / 2 - want.view.c * want.view.s, oy: h / 2 - want.view.r * want.view.s };
  }
  drawGraph();
  drawNamed();
  renderResult();
  draw();
  status(`run ${rid}: click a pixel of the left pane to trace its lineage`);
  if (want.spec) {
    restoreControls(want.spec);
    if (want.spec.named) await runNamed(want.spec.named, { keepView: !!want.view });
    else await runSpec(want.spec, { keepView: !!want.view });
  }
}

// The operators whose code changed since the run, or cannot be imported here: their stored
// lineage still answers; what needs their code is refused, or marked when allowed.
function showCodeWarning(info) {
  const box = $("code-warning");
  const lines = [];
  for (const [op, why] of Object.entries(info.changed_code || {}))
    lines.push(`${op}: ${why}; answers through it use today's code, not the run's`);
  for (const [op, why] of Object.entries(info.unavailable || {}))
    lines.push(`${op}: ${why}`);
  box.textContent = lines.length ? `Code warning: ${lines.join(" · ")}` : "";
  box.hidden = !lines.length;
}

function operatorInfo(name) {
  return state.run ? state.run.operators.find((o) => o.name === name) : null;
}

// -- the workflow graph --------------------------------------------------------------------
function drawGraph() {
  const info = state.run;
  const ops = Object.fromEntries(info.operators.map((o) => [o.name, o]));
  const depth = {};
  const depthOf = (name) => {
    if (depth[name] !== undefined) return depth[name];
    const op = ops[name];
    depth[name] = op ? 1 + Math.max(...op.inputs.map(depthOf)) : 0;
    return depth[name];
  };
  info.arrays.forEach((a) => depthOf(a.name));
  const columns = [];
  for (const a of info.arrays) (columns[depth[a.name]] = columns[depth[a.name]] || []).push(a.name);
  const W = 150, H = 34, GX = 36, GY = 6;
  const pos = {};
  columns.forEach((col, x) => col.forEach((name, y) => {
    pos[name] = { x: 10 + x * (W + GX), y: 10 + y * (H + GY) };
  }));
  const height = 20 + Math.max(...columns.map((c) => c.length)) * (H + GY);
  const width = 20 + columns.length * (W + GX);
  const svg = $("graph");
  svg.setAttribute("width", width);
  svg.setAttribute("height", height);
  const NS = "http://www.w3.org/2000/svg";
  svg.innerHTML = "";
  for (const op of info.operators) {
    for (const src of op.inputs) {
      const a = pos[src], b = pos[op.name];
      if (!a || !b) continue;
      const p = document.createElementNS(NS, "path");
      const x0 = a.x + W, y0 = a.y + H / 2, x1 = b.x, y1 = b.y + H / 2;
      p.setAttribute("d", `M${x0},${y0} C${x0 + GX / 2},${y0} ${x1 - GX / 2},${y1} ${x1},${y1}`);
      p.setAttribute("class", "edge");
      svg.appendChild(p);
    }
  }
  for (const a of info.arrays) {
    const g = document.createElementNS(NS, "g");
    const op = ops[a.name];
    g.setAttribute("class", "node" + (a.input ? " input" : "") + (a.output ? " output" : ""));
    g.dataset.array = a.name;
    g.setAttribute("transform", `translate(${pos[a.name].x},${pos[a.name].y})`);
    const rect = document.createElementNS(NS, "rect");
    rect.setAttribute("width", W);
    rect.setAttribute("height", H);
    const t1 = document.createElementNS(NS, "text");
    t1.setAttribute("x", 6); t1.setAttribute("y", 14);
    t1.textContent = a.name;
    const t2 = document.createElementNS(NS, "text");
    t2.setAttribute("x", 6); t2.setAttribute("y", 28);
    t2.setAttribute("class", "sub");
    t2.textContent = op ? `${op.strategies.join(",") || "-"} · ${human(op.lineage_bytes)}`
                        : `input ${a.shape.join("x")}`;
    const title = document.createElementNS(NS, "title");
    title.textContent = op ? (op.description ? `${a.name}: ${op.description}\n` : "") +
      `${a.name} = ${op.class}(${op.inputs.join(", ")}); lineage ${human(op.lineage_bytes)}; ` +
      `runtime ${op.runtime_s ? op.runtime_s.toFixed(3) + " s" : "-"}\n` +
      op.strategies.map((n) => `${n}: ${strategyWords(n)}`).join("\n")
      : `${a.name}: workflow input`;
    g.append(rect, t1, t2, title);
    g.addEventListener("click", () => openArray(a.name));
    svg.appendChild(g);
  }
  markGraph();
}

function markGraph() {
  const res = currentResult();
  const [L, R] = state.panes;
  for (const g of document.querySelectorAll("#graph .node")) {
    const name = g.dataset.array;
    g.classList.toggle("open", name === L.array && L.rid === state.run.run);
    g.classList.toggle("answer", name === R.array && R.rid === state.run.run);
    g.classList.toggle("lit", !!(res && res.along && res.along[name] && res.along[name].count));
  }
}

// -- named queries -------------------------------------------------------------------------
function drawNamed() {
  const box = $("named");
  box.innerHTML = "";
  if (!state.run.named.length) { box.innerHTML = '<p class="muted">none</p>'; return; }
  for (const q of state.run.named) {
    const p = document.createElement("p");
    p.className = "named";
    const b = document.createElement("button");
    b.textContent = q.name;
    b.title = q.description || "";
    b.dataset.named = q.name;
    b.addEventListener("click", () => runNamed(q.name));
    p.append(b, document.createTextNode(q.description || `${q.direction} to ${q.to || "-"}`));
    box.appendChild(p);
  }
}

async function runNamed(name, opts) {
  const rid = state.run.run;
  status(`${name} …`);
  state.clickAt = performance.now();
  try {
    const t0 = performance.now();
    const doc = await api(`/api/runs/${rid}/named/${encodeURIComponent(name)}?method=${$("method-select").value}`,
                          { signal: newQuery() });
    state.selection = null;
    doc.rid = rid;
    showAnswer(doc, performance.now() - t0, opts);
  } catch (e) { if (!superseded(e)) status(e.message, true); }
}

// -- arrays and panes ----------------------------------------------------------------------
function paneArray(p) {
  const info = p.rid && state.infos[p.rid];
  return info ? info.arrays.find((a) => a.name === p.array) : null;
}

function openPane(p, rid, name) {
  const info = state.infos[rid];
  const a = info && info.arrays.find((x) => x.name === name);
  if (!a) return;
  p.rid = rid;
  p.array = name;
  p.name.textContent = name;
  p.name.title = rid === state.run.run ? "" : `run ${rid}`;
  p.shape.textContent = `${a.shape.join(" x ") || "scalar"} · ${a.dtype}` +
    (rid === state.run.run ? "" : ` · run ${rid}`);
}

// the left pane: the array one clicks in (its targets and paths follow it)
function openArray(name, fit) {
  const a = state.arrays[name];
  if (!a) return;
  const L = state.panes[0];
  const prev = paneArray(L);
  openPane(L, state.run.run, name);
  state.array = name;
  if (fit || !prev || prev.view[0] !== a.view[0] || prev.view[1] !== a.view[1]) fitOpen(a);
  fillTargets();
  markGraph();
  draw();
  writeLink();
}

// the right pane: the answer's array (or one step of it)
function openAnswer(name, rid) {
  openPane(state.panes[1], rid || state.run.run, name);
  markGraph();
  draw();
  writeLink();
}

function fillTargets() {
  const sel = $("target-select");
  const keep = sel.dataset.want !== undefined ? sel.dataset.want : sel.value;
  const backward = $("direction-backward").checked;
  sel.innerHTML = "";
  const dflt = document.createElement("option");
  dflt.value = "";
  dflt.textContent = backward ? "the workflow inputs" : "the workflow outputs";
  sel.appendChild(dflt);
  for (const a of state.run.arrays) {
    if (a.name === state.array) continue;
    const o = document.createElement("option");
    o.value = a.name;
    o.textContent = a.name;
    sel.appendChild(o);
  }
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
  fillPaths();
}

// the paths from the open array to the chosen target, one by one ("every path": their union);
// the chosen one stays chosen while it is among them
let pathsKey = null;
async function fillPaths() {
  const sel = $("path-select"), label = $("path-label");
  const to = $("target-select").value;
  const keep = sel.dataset.want !== undefined ? sel.dataset.want : sel.value;
  if (!to || !state.array) { sel.innerHTML = ""; label.hidden = true; pathsKey = null; return; }
  const direction = $("direction-backward").checked ? "backward" : "forward";
  const key = `${state.run.run}|${direction}|${state.array}|${to}`;
  if (key === pathsKey && sel.options.length) return;  // the same list: nothing to redo
  const q = new URLSearchParams({ direction, from: state.array, to });
  const s = state.selection;
  if (s && s.array === state.array && s.rid === state.run.run) {
    const spec = startSpec(s.r0, s.c0, s.r1, s.c1);
    if (spec.cells) q.set("cells", spec.cells); else if (spec.box) q.set("box", spec.box);
  }
  let doc;
  try {
    doc = await api(`/api/runs/${state.run.run}/paths?${q}`);
  } catch (e) { status(e.message, true); return; }
  if (to !== $("target-select").value) return;  // the target changed meanwhile
  sel.innerHTML = "";
  pathsKey = key;
  const all = document.createElement("option");
  all.value = "";
  all.textContent = `every path (${doc.paths.length}${doc.paths.length >= 64 ? "+" : ""}, their union)`;
  sel.appendChild(all);
  for (const p of doc.paths) {
    const o = document.createElement("option");
    o.value = p.steps.map(([op, i]) => `${op}:${i}`).join(",");
    const through = p.through.slice(0, -1).join(" → ") || "(one step)";
    o.dataset.through = through;
    o.dataset.global = p.global ? "1" : "";
    o.textContent = (p.label || through) + (p.global ? " [global]" : "") +
      (typeof p.count === "number" ? ` · ${num(p.count)} cells` : "");
    o.title = through;
    sel.appendChild(o);
  }
  if ([...sel.options].some((o) => o.value === keep)) sel.value = keep;
  delete sel.dataset.want;
  label.hidden = doc.paths.length < 2;
}

// the array a path ("op:i,op:i,...") ends at: backward, input i of its last operator;
// forward, its last operator's output
function pathEnd(spec) {
  if (!spec.path) return null;
  const [op, i] = spec.path.split(",").pop().split(":");
  const info = operatorInfo(op);
  if (!info) return null;
  return spec.direction === "forward" ? op : info.inputs[+i];
}

// the controls a link or a restored query asks for
function restoreControls(spec) {
  if (spec.direction) $(`direction-${spec.direction}`).checked = true;
  if (spec.scope) $("scope-select").value = spec.scope;
  if (spec.method) $("method-select").value = spec.method;
  const tsel = $("target-select"), psel = $("path-select");
  tsel.dataset.want = spec.to || pathEnd(spec) || "";
  psel.dataset.want = spec.path || "";
  pathsKey = null;
  fillTargets();
  delete tsel.dataset.want;
}

function viewerSize() {
  const el = state.panes[0].el;
  return { w: el.clientWidth, h: el.clientHeight };
}

function fitWhole(a) {
  const { w, h } = viewerSize();
  const s = Math.min(w / a.view[1], h / a.view[0]);
  state.view = { s, ox: (w - a.view[1] * s) / 2, oy: (h - a.view[0] * s) / 2 };
}

// on opening: the whole array, unless it is so tall or wide that it would be a thin strip;
// then its short side fills the pane, from its top (or left) edge
function fitOpen(a) {
  const { w, h } = viewerSize();
  const whole = Math.min(w / a.view[1], h / a.view[0]);
  const filled = Math.max(w / a.view[1], h / a.view[0]);
  if (filled / whole <= 2) { fitWhole(a); return; }
  const s = filled;
  state.view = { s, ox: Math.max(0, (w - a.view[1] * s) / 2), oy: Math.max(0, (h - a.view[0] * s) / 2) };
}

function zoomAt(factor, x, y) {
  const v = state.view;
  const s = Math.min(64, Math.max(1 / (1 << MAX_ZOOM), v.s * factor));
  v.ox = x - (x - v.ox) * (s / v.s);
  v.oy = y - (y - v.oy) * (s / v.s);
  v.s = s;
  draw();
}

// -- drawing -------------------------------------------------------------------------------
function resizeCanvases(p) {
  const w = p.el.clientWidth, h = p.el.clientHeight;
  for (const c of [p.tiles, p.overlay]) if (c.width !== w || c.height !== h) { c.width = w; c.height = h; }
}

// what a pane shows now: its own array, or (blinking) the left pane's
function shown(p) {
  if (p === state.panes[1] && state.ui.blink && state.ui.blinkOn && state.panes[0].array)
    return { rid: state.panes[0].rid, array: state.panes[0].array };
  return { rid: p.rid, array: p.array };
}

let drawQueued = false;
function draw() {
  if (drawQueued) return;
  drawQueued = true;
  requestAnimationFrame(() => { drawQueued = false; drawNow(); });
}

function drawNow() {
  for (const p of state.panes) {
    resizeCanvases(p);
    const src = shown(p);
    p.drawn = Object.assign({}, state.view, src);
    drawTiles(p, src);
    drawOverlay(p, src);
  }
  drawMinimap();
  writeLink();
}

function tileImage(url) {
  let img = state.tiles.get(url);
  if (!img) {
    img = new Image();
    img.onload = () => draw();
    img.src = url;
    state.tiles.set(url, img);
  }
  return img;
}

function drawTiles(p, src) {
  const c = p.tiles, ctx = c.getContext("2d");
  ctx.clearRect(0, 0, c.width, c.height);
  const info = src.rid && state.infos[src.rid];
  const a = info && info.arrays.find((x) => x.name === src.array);
  if (!a) return;
  const v = state.view;
  ctx.imageSmoothingEnabled = false;
  const z = Math.max(0, Math.min(MAX_ZOOM, Math.floor(Math.log2(1 / v.s) + 1e-9)));
  const span = TILE * (1 << z);
  const [h, w] = a.view;
  const ty0 = Math.max(0, Math.floor(-v.oy / v.s / span));
  const tx0 = Math.max(0, Math.floor(-v.ox / v.s / span));
  const ty1 = Math.min(Math.ceil(h / span), Math.ceil((c.height - v.oy) / v.s / span));
  const tx1 = Math.min(Math.ceil(w / span), Math.ceil((c.width - v.ox) / v.s / span));
  let drawn = 0;
  for (let ty = ty0; ty < ty1; ty++) {
    for (let tx = tx0; tx < tx1; tx++) {
      const img = tileImage(`/api/runs/${src.rid}/arrays/${encodeURIComponent(src.array)}/tiles/${z}/${ty}/${tx}.png`);
      if (img.complete && img.naturalWidth) {
        const cellsH = Math.min(span, h - ty * span), cellsW = Math.min(span, w - tx * span);
        ctx.drawImage(img, v.ox + tx * span * v.s, v.oy + ty * span * v.s, cellsW * v.s, cellsH * v.s);
        drawn++;
      }
    }
  }
  if (drawn) {
    p.loading.hidden = true;
    if (window.__firstImageMs === undefined) window.__firstImageMs = performance.now();
  }
}

// the masks drawn over a pane: the answer's (red), the replay's changed cells (cyan)
function masksOf(src) {
  const out = [];
  const res = currentResult();
  if (res && state.answer.rid === src.rid) {
    const m = (res.along && res.along[src.array]) || (res.array === src.array && res.mask) || null;
    if (m) out.push({ mask: m, rgb: "255, 40, 30" });
  }
  const d = state.diff;
  if (d && d.rid === src.rid && d.array === src.array) out.push({ mask: d, rgb: "0, 220, 255" });
  return out;
}

function drawOverlay(p, src) {
  const c = p.overlay, ctx = c.getContext("2d");
  const v = state.view;
  ctx.clearRect(0, 0, c.width, c.height);
  for (const { mask, rgb } of masksOf(src)) {
    if (!mask.runs) continue;
    if (state.ui.mode === "outline") drawOutline(ctx, c, mask, rgb);
    else {
      ctx.fillStyle = `rgba(${rgb}, ${state.ui.opacity})`;
      eachRect(mask, v, (x, y, w, h) => ctx.fillRect(x, y, w, h));
    }
  }
  const sel = state.selection;
  if (sel && sel.array === src.array && sel.rid === src.rid) {
    ctx.strokeStyle = "#ffd400";
    ctx.lineWidth = 2;
    const pad = v.s < 4 ? 3 : 0;
    ctx.strokeRect(v.ox + sel.c0 * v.s - pad, v.oy + sel.r0 * v.s - pad,
                   (sel.c1 - sel.c0) * v.s + 2 * pad, (sel.r1 - sel.r0) * v.s + 2 * pad);
  }
  if (p === state.panes[1] && state.answer && !state.answerDrawn && masksOf(src).length) {
    state.answerDrawn = true;
    if (state.clickAt !== null) window.__lastAnswerMs = performance.now() - state.clickAt;
  }
}

// the screen rectangles of a run-length mask's cells, on whole pixels (no seams between rows)
function eachRect(m, v, fill) {
  const W = m.view[1];
  const px = Math.max(1, Math.round(Math.min(v.s, 2)));  // a cell stays visible zoomed out
  const rect = (r0, r1, c0, c1) => {
    // both edges rounded the same way: neighbouring rows tile without overlap (an overlap
    // would draw a darker seam where the translucent colour adds up)
    const x0 = Math.round(v.ox + c0 * v.s), y0 = Math.round(v.oy + r0 * v.s);
    const x1 = Math.max(x0 + px, Math.round(v.ox + c1 * v.s));
    const y1 = Math.max(y0 + px, Math.round(v.oy + r1 * v.s));
    fill(x0, y0, x1 - x0, y1 - y0);
  };
  for (let i = 0; i < m.runs.length; i += 2) {
    let start = m.runs[i], n = m.runs[i + 1];
    let r = Math.floor(start / W), col = start - r * W;
    if (col > 0) {  // the end of a first, partial row
      const seg = Math.min(n, W - col);
      rect(r, r + 1, col, col + seg);
      n -= seg; r += 1;
    }
    const rows = Math.floor(n / W);  // whole rows at once
    if (rows > 0) { rect(r, r + rows, 0, W); r += rows; n -= rows * W; }
    if (n > 0) rect(r, r + 1, 0, n);
  }
}

// a mask as one byte per cell (kept on the mask: it is asked for at each redraw)
function bitmap(m) {
  if (m._bits) return m._bits;
  const bits = new Uint8Array(m.view[0] * m.view[1]);
  for (let i = 0; i < m.runs.length; i += 2) bits.fill(1, m.runs[i], m.runs[i] + m.runs[i + 1]);
  m._bits = bits;
  return bits;
}

// the outline: zoomed in, the edges between cells in and out of the mask; zoomed out, the
// mask's border cells
function drawOutline(ctx, c, m, rgb) {
  const v = state.view, [H, W] = m.view, bits = bitmap(m);
  const at = (r, cc) => r >= 0 && cc >= 0 && r < H && cc < W && bits[r * W + cc] === 1;
  ctx.strokeStyle = ctx.fillStyle = `rgba(${rgb}, ${Math.max(state.ui.opacity, 0.5)})`;
  if (v.s >= 3) {
    const r0 = Math.max(0, Math.floor(-v.oy / v.s)), r1 = Math.min(H, Math.ceil((c.height - v.oy) / v.s));
    const c0 = Math.max(0, Math.floor(-v.ox / v.s)), c1 = Math.min(W, Math.ceil((c.width - v.ox) / v.s));
    ctx.lineWidth = 2;
    ctx.beginPath();
    for (let r = r0; r < r1; r++) {
      for (let cc = c0; cc < c1; cc++) {
        if (!at(r, cc)) continue;
        const x = v.ox + cc * v.s, y = v.oy + r * v.s;
        if (!at(r - 1, cc)) { ctx.moveTo(x, y); ctx.lineTo(x + v.s, y); }
        if (!at(r + 1, cc)) { ctx.moveTo(x, y + v.s); ctx.lineTo(x + v.s, y + v.s); }
        if (!at(r, cc - 1)) { ctx.moveTo(x, y); ctx.lineTo(x, y + v.s); }
        if (!at(r, cc + 1)) { ctx.moveTo(x + v.s, y); ctx.lineTo(x + v.s, y + v.s); }
      }
    }
    ctx.stroke();
    return;
  }
  if (!m._edge) {  // the border cells, as a mask of their own
    const runs = [];
    let start = -1;
    for (let i = 0; i <= bits.length; i++) {
      const r = Math.floor(i / W), cc = i - r * W;
      const edge = i < bits.length && bits[i] === 1 &&
        !(at(r - 1, cc) && at(r + 1, cc) && at(r, cc - 1) && at(r, cc + 1));
      if (edge && start < 0) start = i;
      if (!edge && start >= 0) { runs.push(start, i - start); start = -1; }
    }
    m._edge = { runs, view: m.view };
  }
  eachRect(m._edge, v, (x, y, w, h) => ctx.fillRect(x, y, w, h));
}

// -- the minimap ---------------------------------------------------------------------------
function drawMinimap() {
  const c = $("minimap"), ctx = c.getContext("2d");
  const L = state.panes[0], a = paneArray(L);
  ctx.clearRect(0, 0, c.width, c.height);
  if (!a) return;
  const [H, W] = a.view;
  const k = Math.min(c.width / W, c.height / H);
  const mm = { k, x0: (c.width - W * k) / 2, y0: (c.height - H * k) / 2 };
  c._map = mm;
  const z = Math.max(0, Math.min(MAX_ZOOM, Math.floor(Math.log2(1 / k) + 1e-9)));
  const span = TILE * (1 << z);
  ctx.imageSmoothingEnabled = true;
  for (let ty = 0; ty < Math.ceil(H / span); ty++) {
    for (let tx = 0; tx < Math.ceil(W / span); tx++) {
      const img = tileImage(`/api/runs/${L.rid}/arrays/${encodeURIComponent(L.array)}/tiles/${z}/${ty}/${tx}.png`);
      if (img.complete && img.naturalWidth) {
        const ch = Math.min(span, H - ty * span), cw = Math.min(span, W - tx * span);
        ctx.drawImage(img, mm.x0 + tx * span * k, mm.y0 + ty * span * k, cw * k, ch * k);
      }
    }
  }
  const v = state.view, { w, h } = viewerSize();
  ctx.strokeStyle = "#ffd400";
  ctx.lineWidth = 1.5;
  ctx.strokeRect(mm.x0 + (-v.ox / v.s) * k, mm.y0 + (-v.oy / v.s) * k, (w / v.s) * k, (h / v.s) * k);
}

function setupMinimap() {
  const c = $("minimap");
  let down = false;
  const move = (e) => {
    const mm = c._map;
    if (!mm) return;
    const box = c.getBoundingClientRect();
    const col = (e.clientX - box.left - mm.x0) / mm.k, row = (e.clientY - box.top - mm.y0) / mm.k;
    const { w, h } = viewerSize();
    state.view.ox = w / 2 - col * state.view.s;
    state.view.oy = h / 2 - row * state.view.s;
    draw();
  };
  c.addEventListener("mousedown", (e) => { down = true; move(e); e.preventDefault(); });
  window.addEventListener("mousemove", (e) => { if (down) move(e); });
  window.addEventListener("mouseup", () => { down = false; });
}

// -- coordinates: cells, sky ---------------------------------------------------------------
function cellAt(x, y) {
  const v = state.view;
  return { r: Math.floor((y - v.oy) / v.s), c: Math.floor((x - v.ox) / v.s) };
}

// the page position of the centre of view cell (r, c) in a pane (the left one by default):
// for tests and scripts
function cellToClient(r, c, pane) {
  const v = state.view, box = state.panes[pane || 0].el.getBoundingClientRect();
  return { x: box.left + v.ox + (c + 0.5) * v.s, y: box.top + v.oy + (r + 0.5) * v.s };
}

// the same, from the centre of the pane's visible part (how WebDriver aims at an element)
function cellOffset(r, c, pane) {
  const p = cellToClient(r, c, pane), box = state.panes[pane || 0].el.getBoundingClientRect();
  const cx = (Math.max(box.left, 0) + Math.min(box.right, window.innerWidth)) / 2;
  const cy = (Math.max(box.top, 0) + Math.min(box.bottom, window.innerHeight)) / 2;
  return { dx: p.x - cx, dy: p.y - cy };
}

function inView(a, cell) {
  return a && cell.r >= 0 && cell.c >= 0 && cell.r < a.view[0] && cell.c < a.view[1];
}

// view cell -> the array's own coordinates (its picture is rows x the last axis, C order)
function coordsOf(a, r, c) {
  if (a.shape.length === 2) return [r, c];
  if (a.shape.length === 1) return [c];
  if (a.shape.length === 0) return [];
  let flat = r * a.view[1] + c;
  const out = [];
  for (let d = a.shape.length - 1; d >= 0; d--) { out.unshift(flat % a.shape[d]); flat = Math.floor(flat / a.shape[d]); }
  return out;
}

function coords(r, c) {
  return coordsOf(state.arrays[state.array], r, c);
}

// pixel (row, column) -> (RA, Dec) in degrees through a TAN projection (WCS Paper II, with
// phi_p = 180 deg); FITS pixels count from 1, x along columns
function skyOf(wcs, row, col) {
  if (!wcs || !wcs.crval || !wcs.crpix || !wcs.cd) return null;
  const ctype = (wcs.ctype || []).join(" ");
  if (ctype && !/TAN/.test(ctype)) return null;
  const D = Math.PI / 180;
  const px = col + 1 - wcs.crpix[0], py = row + 1 - wcs.crpix[1];
  const x = wcs.cd[0][0] * px + wcs.cd[0][1] * py, y = wcs.cd[1][0] * px + wcs.cd[1][1] * py;
  const r = Math.hypot(x, y);
  const phi = Math.atan2(x, -y);
  const theta = r === 0 ? Math.PI / 2 : Math.atan(180 / (Math.PI * r));
  const [ap, dp] = [wcs.crval[0] * D, wcs.crval[1] * D];
  const dphi = phi - Math.PI;
  const ra = ap + Math.atan2(-Math.cos(theta) * Math.sin(dphi),
                             Math.sin(theta) * Math.cos(dp) - Math.cos(theta) * Math.sin(dp) * Math.cos(dphi));
  const dec = Math.asin(Math.sin(theta) * Math.sin(dp) + Math.cos(theta) * Math.cos(dp) * Math.cos(dphi));
  return { ra: ((ra / D) % 360 + 360) % 360, dec: dec / D };
}

function sexagesimal(deg, hours) {
  const sign = deg < 0 ? "-" : (hours ? "" : "+");
  const digits = hours ? 2 : 1;
  // rounded once, as a whole number of the last digit, so that 59.99.. carries over
  const unit = Math.pow(10, digits);
  let t = Math.round(Math.abs(hours ? deg / 15 : deg) * 3600 * unit);
  const a = Math.floor(t / (3600 * unit)); t -= a * 3600 * unit;
  const b = Math.floor(t / (60 * unit)); t -= b * 60 * unit;
  const p = (n) => String(n).padStart(2, "0");
  return `${sign}${p(a)}:${p(b)}:${(t / unit).toFixed(digits).padStart(3 + digits, "0")}`;
}

// cell values for the readout, fetched a block at a time (GET .../values/{y}/{x}) and kept
const VALUE_BLOCK = 32;
const valueBlocks = new Map();  // "rid/array/ty/tx" -> {rows, cols, values} | "pending"

function valueAt(rid, array, r, c, again) {
  const ty = Math.floor(r / VALUE_BLOCK), tx = Math.floor(c / VALUE_BLOCK);
  const key = `${rid}/${array}/${ty}/${tx}`;
  const got = valueBlocks.get(key);
  if (got === undefined) {
    valueBlocks.set(key, "pending");
    api(`/api/runs/${encodeURIComponent(rid)}/arrays/${encodeURIComponent(array)}/values/${ty}/${tx}`)
      .then((b) => { valueBlocks.set(key, b); again(); })
      .catch(() => valueBlocks.delete(key));
    return undefined;
  }
  if (got === "pending") return undefined;
  const v = got.values[r - got.rows[0]][c - got.cols[0]];
  return v === null ? "NaN" : (typeof v === "number" && !Number.isInteger(v) ? v.toPrecision(6) : String(v));
}

// the readout: under the cursor, the same cell of each pane (they are locked together)
function readout(cell) {
  const lines = [];
  for (const p of state.panes) {
    const src = shown(p);
    const info = src.rid && state.infos[src.rid];
    const a = info && info.arrays.find((x) => x.name === src.array);
    if (!a) continue;
    if (!inView(a, cell)) { lines.push(`${src.array}: outside`); continue; }
    let line = `${src.array}[${coordsOf(a, cell.r, cell.c).join(", ")}]`;
    const value = valueAt(src.rid, src.array, cell.r, cell.c, () => {
      if (state.cursor && state.cursor.r === cell.r && state.cursor.c === cell.c) readout(cell);
    });
    if (value !== undefined) line += ` = ${value}`;
    const inMask = masksOf(src).find((m) => m.rgb.startsWith("255") && m.mask.runs);
    if (inMask) line += bitmap(inMask.mask)[cell.r * a.view[1] + cell.c] ? "  in the answer" : "";
    const sky = a.shape.length === 2 ? skyOf(a.wcs, cell.r, cell.c) : null;
    if (sky) line += `  RA ${sexagesimal(sky.ra, true)}  Dec ${sexagesimal(sky.dec, false)}`;
    lines.push(line);
  }
  $("readout").textContent = lines.join("\n");
}

// -- the panes' mouse ----------------------------------------------------------------------
function setupViewer() {
  let drag = null;
  state.panes.forEach((p, i) => {
    p.el.addEventListener("mousedown", (e) => {
      const box = p.el.getBoundingClientRect();
      drag = { pane: i, x: e.clientX - box.left, y: e.clientY - box.top, moved: false,
               shift: e.shiftKey && i === 0, ox: state.view.ox, oy: state.view.oy };
    });
    p.el.addEventListener("wheel", (e) => {
      e.preventDefault();
      const box = p.el.getBoundingClientRect();
      zoomAt(e.deltaY < 0 ? 1.25 : 0.8, e.clientX - box.left, e.clientY - box.top);
    }, { passive: false });
  });
  window.addEventListener("mousemove", (e) => {
    for (const p of state.panes) {
      const box = p.el.getBoundingClientRect();
      const x = e.clientX - box.left, y = e.clientY - box.top;
      if (x >= 0 && y >= 0 && x < box.width && y < box.height) {
        state.cursor = cellAt(x, y);
        readout(state.cursor);
      }
    }
    if (!drag) return;
    const box = state.panes[drag.pane].el.getBoundingClientRect();
    const x = e.clientX - box.left, y = e.clientY - box.top;
    if (Math.abs(x - drag.x) + Math.abs(y - drag.y) > 4) drag.moved = true;
    if (!drag.moved) return;
    if (drag.shift) {
      const a = cellAt(drag.x, drag.y), b = cellAt(x, y);
      state.selection = { rid: state.panes[0].rid, array: state.array, r0: Math.min(a.r, b.r),
                          c0: Math.min(a.c, b.c), r1: Math.max(a.r, b.r) + 1, c1: Math.max(a.c, b.c) + 1 };
      draw();
    } else {
      state.view.ox = drag.ox + (x - drag.x);
      state.view.oy = drag.oy + (y - drag.y);
      draw();
    }
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const d = drag;
    drag = null;
    if (d.pane !== 0) return;  // the right pane pans and zooms; the left one is clicked
    const box = state.panes[0].el.getBoundingClientRect();
    const a = paneArray(state.panes[0]);
    if (!d.moved) {
      const cell = cellAt(e.clientX - box.left, e.clientY - box.top);
      if (inView(a, cell)) traceCells(cell.r, cell.c, cell.r + 1, cell.c + 1);
    } else if (d.shift && state.selection) {
      const s = state.selection;
      traceCells(Math.max(0, s.r0), Math.max(0, s.c0), Math.min(a.view[0], s.r1), Math.min(a.view[1], s.c1));
    }
  });
  const centre = () => viewerSize();
  $("zoom-in").addEventListener("click", () => { const s = centre(); zoomAt(2, s.w / 2, s.h / 2); });
  $("zoom-out").addEventListener("click", () => { const s = centre(); zoomAt(0.5, s.w / 2, s.h / 2); });
  $("zoom-fit").addEventListener("click", () => { const a = paneArray(state.panes[0]); if (a) { fitWhole(a); draw(); } });
  for (const id of ["direction-backward", "direction-forward"]) $(id).addEventListener("change", fillTargets);
  $("run-select").addEventListener("change", (e) => openRun(e.target.value).catch((err) => status(err.message, true)));
  $("target-select").addEventListener("change", fillPaths);
  $("overlay-mode").addEventListener("change", (e) => { state.ui.mode = e.target.value; draw(); });
  $("overlay-opacity").addEventListener("input", (e) => { state.ui.opacity = +e.target.value; draw(); });
  $("blink").addEventListener("change", (e) => setBlink(e.target.checked));
  $("diff-toggle").addEventListener("change", (e) => showDiff(e.target.checked));
  $("open-parent").addEventListener("click", openParent);
  $("region-file").addEventListener("change", importRegion);
  window.addEventListener("resize", draw);
}

let blinkTimer = null;
function setBlink(on) {
  state.ui.blink = on;
  state.ui.blinkOn = false;
  clearInterval(blinkTimer);
  if (on) blinkTimer = setInterval(() => {
    state.ui.blinkOn = !state.ui.blinkOn;
    const R = state.panes[1], src = shown(R);
    R.name.textContent = src.array ? (state.ui.blinkOn ? `${src.array} (blink: the left pane's)` : src.array) : R.name.textContent;
    draw();
  }, 500);
  else if (state.panes[1].array) state.panes[1].name.textContent = state.panes[1].array;
  draw();
}

// -- a replay beside its parent ------------------------------------------------------------
async function showDiff(on) {
  if (!on) { state.diff = null; draw(); return; }
  const R = state.panes[1], L = state.panes[0];
  const rid = state.run.run;
  const array = R.rid === rid && R.array ? R.array : L.array;
  try {
    const doc = await api(`/api/runs/${rid}/diff/${encodeURIComponent(array)}`);
    const m = doc.mask || {};
    const view = m.view || [doc.shape.length >= 2 ? doc.shape.slice(0, -1).reduce((x, y) => x * y, 1) : 1,
                            doc.shape.length ? doc.shape[doc.shape.length - 1] : 1];
    state.diff = { rid, array, runs: m.runs || (Array.isArray(doc.mask) ? doc.mask : null), view,
                   count: doc.changed };
    status(`${num(doc.changed)} cells of ${array} differ from run ${doc.parent}`);
    draw();
  } catch (e) { status(`changed cells: ${e.message}`, true); $("diff-toggle").checked = false; }
}

async function openParent() {
  const listed = state.runs.find((r) => r.id === state.run.run) || {};
  const parent = state.run.parent || listed.parent;
  if (!parent) return;
  try {
    await runInfo(parent);
    const R = state.panes[1], L = state.panes[0];
    // the current array goes to the right, its parent's to the left
    const array = R.array && R.rid === state.run.run ? R.array : L.array;
    if (!(R.array && R.rid === state.run.run)) openPane(R, state.run.run, array);
    openPane(L, parent, array);
    markGraph();
    draw();
    status(`left: ${array} of the parent run ${parent}; right: ${array} of ${state.run.run}`);
  } catch (e) { status(e.message, true); }
}

// -- queries -------------------------------------------------------------------------------
function controlsSpec() {
  const spec = {
    direction: $("direction-backward").checked ? "backward" : "forward",
    from: state.array,
    method: $("method-select").value,
    scope: $("scope-select").value,
  };
  const to = $("target-select").value, via = $("path-select").value;
  if (to && via) spec.path = via;
  else if (to) spec.to = to;
  return spec;
}

function startSpec(r0, c0, r1, c1) {
  const a = state.arrays[state.array];
  if (r1 - r0 === 1 && c1 - c0 === 1) return { cells: coords(r0, c0).join(",") };
  if (a.shape.length === 2) return { box: `${r0}:${r1},${c0}:${c1}` };
  const cells = [];
  for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) cells.push(coords(r, c).join(","));
  return { cells: cells.join(";") };
}

function querySpec(r0, c0, r1, c1) {
  return Object.assign(controlsSpec(), startSpec(r0, c0, r1, c1));
}

async function traceCells(r0, c0, r1, c1) {
  if (state.panes[0].rid !== state.run.run) openArray(state.panes[0].array);  // back from the parent
  state.selection = { rid: state.run.run, array: state.array, r0, c0, r1, c1 };
  draw();
  await runSpec(querySpec(r0, c0, r1, c1));
}

// the start of a spec as a selection (to draw it), when it is cells or a box of a 2-D array
function selectionOf(spec) {
  const a = state.arrays[spec.from];
  if (!a || a.shape.length !== 2) return null;
  if (spec.box) {
    const m = /^(\d+):(\d+),(\d+):(\d+)$/.exec(spec.box);
    if (m) return { rid: state.run.run, array: spec.from, r0: +m[1], r1: +m[2], c0: +m[3], c1: +m[4] };
  } else if (spec.cells && /^\d+,\d+$/.test(spec.cells)) {
    const [r, c] = spec.cells.split(",").map(Number);
    return { rid: state.run.run, array: spec.from, r0: r, r1: r + 1, c0: c, c1: c + 1 };
  }
  return null;
}

async function runSpec(spec, opts) {
  const rid = state.run.run;
  if (spec.from && spec.from !== state.array) openArray(spec.from, false);
  state.clickAt = performance.now();
  const sel = selectionOf(spec);
  if (sel) state.selection = sel;
  const start = spec.region ? "a region" : spec.cells ? "[" + spec.cells + "]" : spec.box;
  status(`${spec.direction} lineage of ${spec.from} ${start} …`);
  state.busy += 1;
  document.body.dataset.busy = state.busy;
  try {
    const t0 = performance.now();
    const doc = await api(`/api/runs/${rid}/query`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(spec),
      signal: newQuery(),
    });
    doc.spec = spec;
    doc.rid = rid;
    showAnswer(doc, performance.now() - t0, opts);
  } catch (e) {
    if (!superseded(e)) status(e.message, true);
  } finally {
    state.busy -= 1;
    document.body.dataset.busy = state.busy;
  }
}

async function importRegion(e) {
  const file = e.target.files && e.target.files[0];
  if (!file || !state.array) return;
  const text = await file.text();
  e.target.value = "";
  state.selection = null;
  await runSpec(Object.assign(controlsSpec(), { region: text }));
}

function currentResult() {
  return state.answer ? state.answer.results[state.result] : null;
}

function showAnswer(doc, ms, opts) {
  state.answer = doc;
  state.result = 0;
  state.answerDrawn = false;
  const res = currentResult();
  const scoped = doc.results.some((r) => r.scope !== undefined);
  if (scoped) $("scope-label").hidden = false;  // a server that knows scopes
  status(`${doc.direction} lineage of ${doc.from}: ` +
         doc.results.map((r) => `${r.count.toLocaleString("en")} cells in ${r.array}`).join(", ") +
         ` (${ms.toFixed(0)} ms end to end, ${(doc.elapsed_s * 1000).toFixed(1)} ms on the server)`);
  renderResult();
  openAnswer(res.array, doc.rid);
  if (!(opts && opts.keepView)) fitToMask();
}

// a new answer's cells, in view: when they are not all on screen, the panes move and zoom to
// their bounding box (with a margin)
function maskBox(m) {
  if (!m || !m.runs || !m.runs.length) return null;
  const W = m.view[1];
  let r0 = Infinity, r1 = -1, c0 = Infinity, c1 = -1;
  for (let i = 0; i < m.runs.length; i += 2) {
    const s = m.runs[i], e = s + m.runs[i + 1] - 1;
    const ra = Math.floor(s / W), rb = Math.floor(e / W);
    r0 = Math.min(r0, ra); r1 = Math.max(r1, rb);
    if (ra === rb) { c0 = Math.min(c0, s - ra * W); c1 = Math.max(c1, e - rb * W); }
    else { c0 = 0; c1 = W - 1; }
  }
  return { r0, r1: r1 + 1, c0, c1: c1 + 1 };
}

function fitToMask() {
  const R = state.panes[1];
  const masks = masksOf({ rid: R.rid, array: R.array });
  const b = masks.length ? maskBox(masks[0].mask) : null;
  if (!b) return;
  const v = state.view, { w, h } = viewerSize();
  const inside = v.ox + b.c0 * v.s >= 0 && v.oy + b.r0 * v.s >= 0 &&
                 v.ox + b.c1 * v.s <= w && v.oy + b.r1 * v.s <= h;
  if (inside) return;
  const mr = Math.max(4, (b.r1 - b.r0) * 0.15), mc = Math.max(4, (b.c1 - b.c0) * 0.15);
  const s = Math.min(16, w / (b.c1 - b.c0 + 2 * mc), h / (b.r1 - b.r0 + 2 * mr));
  const rc = (b.r0 + b.r1) / 2, cc = (b.c0 + b.c1) / 2;
  state.view = { s, ox: w / 2 - cc * s, oy: h / 2 - rc * s };
  draw();
}

function showResult(i) {
  state.result = i;
  state.answerDrawn = false;
  renderResult();
  openAnswer(currentResult().array, state.answer.rid);
}

function showStep(array) {
  openAnswer(array, state.answer.rid);
  renderResult();
}

function downloadLinks(doc, res) {
  const rid = doc.rid;
  if (doc.named) {
    const base = `/api/runs/${rid}/named/${encodeURIComponent(doc.named)}`;
    return `<a href="${base}.npy" download>mask .npy</a><a href="${base}.fits" download>mask .fits</a>` +
           `<a href="${base}.reg" download id="region-link">ds9 region .reg</a>`;
  }
  const spec = Object.assign({}, doc.spec, doc.spec.path ? {} : { to: res.array });
  const q = new URLSearchParams(spec).toString();
  return `<a href="/api/runs/${rid}/query.npy?${q}" download>mask .npy</a>` +
         `<a href="/api/runs/${rid}/query.fits?${q}" download>mask .fits</a>` +
         `<a href="/api/runs/${rid}/query.reg?${q}" download id="region-link">ds9 region .reg</a>`;
}

// what a strategy's name means (subzero/modes.py), for the graph's hover text
function strategyWords(name) {
  if (name === "blackbox") return "nothing stored; a query re-runs the operator on the cells it needs";
  if (name === "map") return "nothing stored; a query applies the operator's mapping functions";
  const m = /^(full|pay|comp)-(one|many)-(bwd|fwd)$/.exec(name);
  if (!m) return name;
  const what = { full: "every cell's input cells stored", pay: "a small payload stored per cell",
                 comp: "mapping functions, plus payloads stored for the cells they do not fit" }[m[1]];
  const enc = m[2] === "one" ? "one record per cell" : "one record per region (with an R-tree)";
  const dir = m[3] === "bwd" ? "keyed by output cell: fast backward" : "keyed by input cell: fast forward";
  return `${what}; ${enc}; ${dir}`;
}

// "and bgmean1 (MeanBroadcast): every one of the 1,026,513 cells of flatcorrect1", with
// the operator's description on hover
function globalLine(g) {
  const what = typeof g.cells === "number"
    ? (g.cells === 1 ? `the one cell of ${g.array}` : `every one of the ${num(g.cells)} cells of ${g.array}`)
    : `all of ${g.array}`;
  const cls = g.class ? ` (${esc(g.class)})` : "";
  return `<span title="${esc(g.description || "")}">and <strong>${esc(g.operator)}</strong>${cls}: ` +
         `${esc(what)}</span>`;
}

function renderResult() {
  const box = $("result");
  const doc = state.answer;
  if (!doc) { box.innerHTML = '<p class="muted">No query yet.</p>'; return; }
  const res = currentResult();
  let html = "";
  if (doc.named) html += `<p>named query <strong>${esc(doc.named)}</strong></p>`;
  html += `<p><span class="count" id="result-count" data-array="${esc(res.array)}"` +
          (res.scope ? ` data-scope="${esc(res.scope)}"` : "") + `>${res.count.toLocaleString("en")}</span>` +
          ` cells of <strong>${esc(res.array)}</strong> ${esc(res.shape.join(" x "))} (${doc.direction} from ${esc(doc.from)})</p>`;
  if (res.scope) {
    html += `<p class="scope" id="result-scope">${res.scope === "all"
      ? "every dependency, global ones included"
      : "local dependencies: the cells these cells were computed from cell by cell"}`;
    if (res.scope === "all" && doc.spec) html += ' <button id="draw-local">local only</button>';
    html += "</p>";
  }
  if (Array.isArray(res.global) && res.global.length) {
    html += '<ul id="global-deps">';
    res.global.forEach((g, i) => {
      html += `<li data-array="${esc(g.array)}">${globalLine(g)}` +
              (res.scope !== "all" && doc.spec ? ` <button data-global="${i}">draw</button>` : "") + "</li>";
    });
    html += "</ul>";
  }
  if (doc.results.length > 1) {
    html += "<table><tr><th>target</th><th>cells</th></tr>";
    doc.results.forEach((r, i) => {
      html += `<tr class="pick${i === state.result ? " chosen" : ""}" data-result="${i}"><td>${esc(r.array)}</td><td>${r.count.toLocaleString("en")}</td></tr>`;
    });
    html += "</table>";
  }
  html += `<p class="downloads">${downloadLinks(doc, res)}</p>`;
  html += "<table id=\"steps\"><tr><th>operator</th><th>reached</th><th>method</th><th>in</th><th>out</th><th>ms</th></tr>";
  const R = state.panes[1];
  for (const s of res.steps) {
    const chosen = s.reached === R.array ? " chosen" : "";
    const op = operatorInfo(s.operator);
    const tip = [op && op.description, s.note].filter(Boolean).join(" · ");
    html += `<tr class="pick${chosen}" data-reached="${esc(s.reached)}" title="${esc(tip)}"><td>${esc(s.operator)}:${s.input}` +
            (s.global ? '<span class="tag">global</span>' : "") + "</td>" +
            `<td>${esc(s.reached)}</td><td>${esc(s.method)}</td><td>${s.in_count.toLocaleString("en")}</td>` +
            `<td>${s.out_count.toLocaleString("en")}</td><td>${(s.elapsed_s * 1000).toFixed(2)}</td></tr>`;
  }
  html += "</table>";
  box.innerHTML = html;
  for (const tr of box.querySelectorAll("tr[data-result]")) tr.addEventListener("click", () => showResult(+tr.dataset.result));
  for (const tr of box.querySelectorAll("tr[data-reached]")) tr.addEventListener("click", () => showStep(tr.dataset.reached));
  for (const b of box.querySelectorAll("button[data-global]"))
    b.addEventListener("click", () => runSpec(Object.assign({}, doc.spec, { scope: "all" })));
  const local = box.querySelector("#draw-local");
  if (local) local.addEventListener("click", () => runSpec(Object.assign({}, doc.spec, { scope: "local" })));
}

// show view cell (r, c) at the panes' centre, ``s`` screen pixels per cell
function centerOn(r, c, s) {
  const { w, h } = viewerSize();
  state.view = { s, ox: w / 2 - (c + 0.5) * s, oy: h / 2 - (r + 0.5) * s };
  drawNow();
}

// how many pixels of a pane's overlay (the right one by default: the answer's) are drawn in
// the answer's red, or with color "cyan" in a replay's changed cells' (what a test can read
// off the page)
function overlayPixels(pane, color) {
  drawNow();
  const c = state.panes[pane === undefined ? 1 : pane].overlay;
  if (!c.width || !c.height) return 0;
  const data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  const cyan = color === "cyan";
  let n = 0;
  for (let i = 3; i < data.length; i += 4) {
    if (data[i] === 0) continue;
    const [r, g, b] = [data[i - 3], data[i - 2], data[i - 1]];
    if (cyan ? (r < 120 && g > 120 && b > 200) : (r > 200 && g < 120)) n++;
  }
  return n;
}

// what each pane drew last: its run, array and view (the same view for both: they are locked)
function panes() {
  return state.panes.map((p) => Object.assign({ id: p.el.id }, p.drawn));
}

// -- start ---------------------------------------------------------------------------------
state.panes = [makePane("viewer", "array-name", "array-shape"), makePane("viewer2", "answer-name", "answer-shape")];
window.subzero = { state, cellToClient, cellOffset, centerOn, overlayPixels, openArray, openRun,
                   runNamed, runSpec, panes, skyOf, sexagesimal, readout, drawNow };
setupViewer();
setupMinimap();
loadRuns().catch((e) => status(e.message, true));
