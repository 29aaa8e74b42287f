// SubZero lineage explorer: the page over `subzero serve`'s JSON API. No build step, no
// library: a workflow graph in SVG, a tiled image viewer on a canvas, lineage overlays
// drawn from run-length masks ([start, length, ...] over the flattened array).
"use strict";

const TILE = 256;
const MAX_ZOOM = 12;
const $ = (id) => document.getElementById(id);
const state = {
  run: null,          // the run's info (GET /api/runs/{run})
  arrays: {},         // name -> array info
  array: null,        // the array on view
  view: { s: 1, ox: 0, oy: 0 },  // screen px per cell; screen position of cell (0, 0)
  tiles: new Map(),   // url -> Image
  answer: null,       // the last query's answer
  result: 0,          // which of its results (targets) is shown
  overlay: null,      // {runs, view:[h, w]} drawn over the array on view
  selection: null,    // {r0, c0, r1, c1} view cells of the query's start
  busy: 0,
  asking: null,       // the AbortController of the query on its way
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

// -- runs ----------------------------------------------------------------------------------
async function loadRuns() {
  const runs = await api("/api/runs");
  const sel = $("run-select");
  sel.innerHTML = "";
  const complete = runs.filter((r) => r.status === "complete").reverse();
  for (const r of complete) {
    const o = document.createElement("option");
    o.value = r.id;
    o.textContent = `${r.id} · ${r.workflow} · ${r.strategy || "-"}` + (r.parent ? ` (from ${r.parent})` : "");
    sel.appendChild(o);
  }
  if (!complete.length) { status("This home has no complete run yet: subzero run ... first.", true); return; }
  const wanted = new URLSearchParams(location.search).get("run");
  if (wanted && complete.some((r) => r.id === wanted)) sel.value = wanted;
  await openRun(sel.value);
}

async function openRun(rid) {
  status(`loading run ${rid} …`);
  const info = await api(`/api/runs/${encodeURIComponent(rid)}`);
  state.run = info;
  state.arrays = Object.fromEntries(info.arrays.map((a) => [a.name, a]));
  state.answer = null;
  state.overlay = null;
  state.selection = null;
  $("run-summary").textContent = `${info.workflow} · ${info.strategy || "-"} · ` +
    `${info.runtime_s ? info.runtime_s.toFixed(2) + " s" : ""} · lineage ${human(info.lineage_bytes)}`;
  showCodeWarning(info);
  drawGraph();
  drawNamed();
  renderResult();
  const first = info.outputs[0] || info.arrays[0].name;
  openArray(first, true);
  status(`run ${rid}: click a pixel of an array to trace its lineage`);
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
    title.textContent = op ? `${a.name} = ${op.class}(${op.inputs.join(", ")}); strategies ` +
      `${op.strategies.join(", ")}; lineage ${human(op.lineage_bytes)}; runtime ` +
      `${op.runtime_s ? op.runtime_s.toFixed(3) + " s" : "-"}` : `${a.name}: workflow input`;
    g.append(rect, t1, t2, title);
    g.addEventListener("click", () => openArray(a.name));
    svg.appendChild(g);
  }
  markGraph();
}

function markGraph() {
  const res = currentResult();
  for (const g of document.querySelectorAll("#graph .node")) {
    const name = g.dataset.array;
    g.classList.toggle("open", name === state.array);
    g.classList.toggle("lit", !!(res && res.along[name] && res.along[name].count));
  }
}

// -- named queries -------------------------------------------------------------------------
function drawNamed() {
  const box = $("named");
  box.innerHTML = "";
  if (!state.run.named.length) { box.innerHTML = '<p class="muted">none</p>'; return; }
  for (const q of state.run.named) {
    const b = document.createElement("button");
    b.textContent = q.name;
    b.title = q.description;
    b.dataset.named = q.name;
    b.addEventListener("click", () => runNamed(q.name));
    box.appendChild(b);
  }
}

async function runNamed(name) {
  const rid = state.run.run;
  status(`${name} …`);
  try {
    const t0 = performance.now();
    const doc = await api(`/api/runs/${rid}/named/${encodeURIComponent(name)}?method=${$("method-select").value}`,
                          { signal: newQuery() });
    state.selection = null;
    showAnswer(doc, performance.now() - t0);
  } catch (e) { if (!superseded(e)) status(e.message, true); }
}

// -- arrays and the viewer -----------------------------------------------------------------
function openArray(name, fit) {
  const a = state.arrays[name];
  if (!a) return;
  const prev = state.array && state.arrays[state.array];
  state.array = name;
  $("array-name").textContent = name;
  $("array-shape").textContent = `${a.shape.join(" x ") || "scalar"} · ${a.dtype}`;
  if (fit || !prev || prev.view[0] !== a.view[0] || prev.view[1] !== a.view[1]) fitView();
  fillTargets();
  const res = currentResult();
  state.overlay = res && res.along[name] ? res.along[name] : null;
  markGraph();
  draw();
}

function fillTargets() {
  const sel = $("target-select");
  const keep = sel.value;
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

// the paths from the open array to the chosen target, one by one ("every path": their union)
async function fillPaths() {
  const sel = $("path-select"), label = $("path-label");
  const to = $("target-select").value;
  sel.innerHTML = "";
  label.hidden = true;
  if (!to || !state.array) return;
  const direction = $("direction-backward").checked ? "backward" : "forward";
  const q = new URLSearchParams({ direction, from: state.array, to });
  let doc;
  try {
    doc = await api(`/api/runs/${state.run.run}/paths?${q}`);
  } catch (e) { status(e.message, true); return; }
  if (to !== $("target-select").value) return;  // the target changed meanwhile
  const all = document.createElement("option");
  all.value = "";
  all.textContent = `every path (${doc.paths.length}${doc.paths.length >= 64 ? "+" : ""}, their union)`;
  sel.appendChild(all);
  for (const p of doc.paths) {
    const o = document.createElement("option");
    o.value = p.steps.map(([op, i]) => `${op}:${i}`).join(",");
    o.textContent = p.through.slice(0, -1).join(" → ") || "(one step)";
    o.title = o.textContent;
    sel.appendChild(o);
  }
  label.hidden = doc.paths.length < 2;
}

function viewerSize() {
  const el = $("viewer");
  return { w: el.clientWidth, h: el.clientHeight };
}

function fitView() {
  const a = state.arrays[state.array];
  const { w, h } = viewerSize();
  const s = Math.min(w / a.view[1], h / a.view[0]);
  state.view = { s, ox: (w - a.view[1] * s) / 2, oy: (h - a.view[0] * s) / 2 };
}

function zoomAt(factor, x, y) {
  const v = state.view;
  const s = Math.min(64, Math.max(1 / (1 << MAX_ZOOM), v.s * factor));
  v.ox = x - (x - v.ox) * (s / v.s);
  v.oy = y - (y - v.oy) * (s / v.s);
  v.s = s;
  draw();
}

function resizeCanvases() {
  const { w, h } = viewerSize();
  for (const id of ["tiles", "overlay"]) {
    const c = $(id);
    if (c.width !== w || c.height !== h) { c.width = w; c.height = h; }
  }
}

function draw() {
  if (!state.array) return;
  resizeCanvases();
  drawTiles();
  drawOverlay();
}

function drawTiles() {
  const a = state.arrays[state.array];
  const c = $("tiles"), ctx = c.getContext("2d");
  const v = state.view;
  ctx.imageSmoothingEnabled = false;
  ctx.clearRect(0, 0, c.width, c.height);
  const z = Math.max(0, Math.min(MAX_ZOOM, Math.floor(Math.log2(1 / v.s) + 1e-9)));
  const span = TILE * (1 << z);
  const [h, w] = a.view;
  const ty0 = Math.max(0, Math.floor(-v.oy / v.s / span));
  const tx0 = Math.max(0, Math.floor(-v.ox / v.s / span));
  const ty1 = Math.min(Math.ceil(h / span), Math.ceil((c.height - v.oy) / v.s / span));
  const tx1 = Math.min(Math.ceil(w / span), Math.ceil((c.width - v.ox) / v.s / span));
  const rid = state.run.run;
  for (let ty = ty0; ty < ty1; ty++) {
    for (let tx = tx0; tx < tx1; tx++) {
      const url = `/api/runs/${rid}/arrays/${encodeURIComponent(state.array)}/tiles/${z}/${ty}/${tx}.png`;
      let img = state.tiles.get(url);
      if (!img) {
        img = new Image();
        img.onload = () => draw();
        img.src = url;
        state.tiles.set(url, img);
      }
      if (img.complete && img.naturalWidth) {
        const cellsH = Math.min(span, h - ty * span), cellsW = Math.min(span, w - tx * span);
        ctx.drawImage(img, v.ox + tx * span * v.s, v.oy + ty * span * v.s, cellsW * v.s, cellsH * v.s);
      }
    }
  }
}

function drawOverlay() {
  const c = $("overlay"), ctx = c.getContext("2d");
  const v = state.view;
  ctx.clearRect(0, 0, c.width, c.height);
  const ov = state.overlay;
  const px = Math.max(1, Math.round(Math.min(v.s, 2)));  // a cell stays visible zoomed out
  if (ov && ov.runs) {
    const W = ov.view[1];
    // opaque enough to find a few cells; see-through when the lineage covers much of the
    // array, so that the image under it still shows
    const size = ov.view[0] * ov.view[1];
    ctx.fillStyle = `rgba(255, 40, 30, ${ov.count > size / 4 ? 0.4 : 0.75})`;
    // cells [c0, c1) of rows [r0, r1), on whole pixels (no seams between rows)
    const rect = (r0, r1, c0, c1) => {
      // both edges rounded the same way: neighbouring rows tile without overlap (an
      // overlap would draw a darker seam where the translucent red adds up)
      const x0 = Math.round(v.ox + c0 * v.s), y0 = Math.round(v.oy + r0 * v.s);
      const x1 = Math.max(x0 + px, Math.round(v.ox + c1 * v.s));
      const y1 = Math.max(y0 + px, Math.round(v.oy + r1 * v.s));
      ctx.fillRect(x0, y0, x1 - x0, y1 - y0);
    };
    for (let i = 0; i < ov.runs.length; i += 2) {
      let start = ov.runs[i], n = ov.runs[i + 1];
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
  const sel = state.selection;
  if (sel && sel.array === state.array) {
    ctx.strokeStyle = "#ffd400";
    ctx.lineWidth = 2;
    const pad = v.s < 4 ? 3 : 0;
    ctx.strokeRect(v.ox + sel.c0 * v.s - pad, v.oy + sel.r0 * v.s - pad,
                   (sel.c1 - sel.c0) * v.s + 2 * pad, (sel.r1 - sel.r0) * v.s + 2 * pad);
  }
}

function cellAt(x, y) {
  const v = state.view;
  return { r: Math.floor((y - v.oy) / v.s), c: Math.floor((x - v.ox) / v.s) };
}

// the page position of the centre of view cell (r, c): for tests and scripts
function cellToClient(r, c) {
  const v = state.view, box = $("viewer").getBoundingClientRect();
  return { x: box.left + v.ox + (c + 0.5) * v.s, y: box.top + v.oy + (r + 0.5) * v.s };
}

// the same, from the centre of the viewer's visible part (how WebDriver aims at an element)
function cellOffset(r, c) {
  const p = cellToClient(r, c), box = $("viewer").getBoundingClientRect();
  const cx = (Math.max(box.left, 0) + Math.min(box.right, window.innerWidth)) / 2;
  const cy = (Math.max(box.top, 0) + Math.min(box.bottom, window.innerHeight)) / 2;
  return { dx: p.x - cx, dy: p.y - cy };
}

function inArray(cell) {
  const a = state.arrays[state.array];
  return cell.r >= 0 && cell.c >= 0 && cell.r < a.view[0] && cell.c < a.view[1];
}

// view cell -> the array's own coordinates (its picture is rows x the last axis, C order)
function coords(r, c) {
  const a = state.arrays[state.array];
  if (a.shape.length === 2) return [r, c];
  if (a.shape.length === 1) return [c];
  if (a.shape.length === 0) return [];
  let flat = r * a.view[1] + c;
  const out = [];
  for (let d = a.shape.length - 1; d >= 0; d--) { out.unshift(flat % a.shape[d]); flat = Math.floor(flat / a.shape[d]); }
  return out;
}

function setupViewer() {
  const el = $("viewer");
  let drag = null;
  el.addEventListener("mousedown", (e) => {
    const box = el.getBoundingClientRect();
    drag = { x: e.clientX - box.left, y: e.clientY - box.top, moved: false, shift: e.shiftKey,
             ox: state.view.ox, oy: state.view.oy };
  });
  window.addEventListener("mousemove", (e) => {
    const box = el.getBoundingClientRect();
    const x = e.clientX - box.left, y = e.clientY - box.top;
    if (state.array && x >= 0 && y >= 0 && x < box.width && y < box.height) {
      const cell = cellAt(x, y);
      $("hover").textContent = inArray(cell) ? `${state.array}[${coords(cell.r, cell.c).join(", ")}]` : "";
    }
    if (!drag) return;
    if (Math.abs(x - drag.x) + Math.abs(y - drag.y) > 4) drag.moved = true;
    if (!drag.moved) return;
    if (drag.shift) {
      const a = cellAt(drag.x, drag.y), b = cellAt(x, y);
      state.selection = { array: state.array, r0: Math.min(a.r, b.r), c0: Math.min(a.c, b.c),
                          r1: Math.max(a.r, b.r) + 1, c1: Math.max(a.c, b.c) + 1 };
      drawOverlay();
    } else {
      state.view.ox = drag.ox + (x - drag.x);
      state.view.oy = drag.oy + (y - drag.y);
      draw();
    }
  });
  window.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const box = el.getBoundingClientRect();
    const d = drag;
    drag = null;
    if (!d.moved) {
      const cell = cellAt(e.clientX - box.left, e.clientY - box.top);
      if (inArray(cell)) traceCells(cell.r, cell.c, cell.r + 1, cell.c + 1);
    } else if (d.shift && state.selection) {
      const s = state.selection, a = state.arrays[state.array];
      traceCells(Math.max(0, s.r0), Math.max(0, s.c0), Math.min(a.view[0], s.r1), Math.min(a.view[1], s.c1));
    }
  });
  el.addEventListener("wheel", (e) => {
    e.preventDefault();
    const box = el.getBoundingClientRect();
    zoomAt(e.deltaY < 0 ? 1.25 : 0.8, e.clientX - box.left, e.clientY - box.top);
  }, { passive: false });
  $("zoom-in").addEventListener("click", () => { const s = viewerSize(); zoomAt(2, s.w / 2, s.h / 2); });
  $("zoom-out").addEventListener("click", () => { const s = viewerSize(); zoomAt(0.5, s.w / 2, s.h / 2); });
  $("zoom-fit").addEventListener("click", () => { fitView(); draw(); });
  for (const id of ["direction-backward", "direction-forward"]) $(id).addEventListener("change", fillTargets);
  $("run-select").addEventListener("change", (e) => openRun(e.target.value));
  $("target-select").addEventListener("change", fillPaths);
  window.addEventListener("resize", draw);
}

// -- queries -------------------------------------------------------------------------------
function querySpec(r0, c0, r1, c1) {
  const a = state.arrays[state.array];
  const spec = {
    direction: $("direction-backward").checked ? "backward" : "forward",
    from: state.array,
    method: $("method-select").value,
  };
  const to = $("target-select").value, via = $("path-select").value;
  if (to && via) spec.path = via;
  else if (to) spec.to = to;
  if (r1 - r0 === 1 && c1 - c0 === 1) spec.cells = coords(r0, c0).join(",");
  else if (a.shape.length === 2) spec.box = `${r0}:${r1},${c0}:${c1}`;
  else {
    const cells = [];
    for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) cells.push(coords(r, c).join(","));
    spec.cells = cells.join(";");
  }
  return spec;
}

async function traceCells(r0, c0, r1, c1) {
  state.selection = { array: state.array, r0, c0, r1, c1 };
  drawOverlay();
  const spec = querySpec(r0, c0, r1, c1);
  const rid = state.run.run;
  status(`${spec.direction} lineage of ${spec.from} ${spec.cells ? "[" + spec.cells + "]" : spec.box} …`);
  state.busy += 1;
  document.body.dataset.busy = state.busy;
  try {
    const t0 = performance.now();
    const doc = await api(`/api/runs/${rid}/query`, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(spec),
      signal: newQuery(),
    });
    doc.spec = spec;
    showAnswer(doc, performance.now() - t0);
  } catch (e) {
    if (!superseded(e)) status(e.message, true);
  } finally {
    state.busy -= 1;
    document.body.dataset.busy = state.busy;
  }
}

function currentResult() {
  return state.answer ? state.answer.results[state.result] : null;
}

function showAnswer(doc, ms) {
  state.answer = doc;
  state.result = 0;
  const res = currentResult();
  status(`${doc.direction} lineage of ${doc.from}: ` +
         doc.results.map((r) => `${r.count.toLocaleString("en")} cells in ${r.array}`).join(", ") +
         ` (${ms.toFixed(0)} ms end to end, ${(doc.elapsed_s * 1000).toFixed(1)} ms on the server)`);
  renderResult();
  openArray(res.array);
}

function showResult(i) {
  state.result = i;
  renderResult();
  openArray(currentResult().array);
}

function showStep(array) {
  openArray(array);
  renderResult();
}

function downloadLinks(doc, res) {
  const rid = state.run.run;
  if (doc.named) {
    const base = `/api/runs/${rid}/named/${encodeURIComponent(doc.named)}`;
    return `<a href="${base}.npy" download>mask .npy</a><a href="${base}.fits" download>mask .fits</a>`;
  }
  const spec = Object.assign({}, doc.spec, doc.spec.path ? {} : { to: res.array });
  const q = new URLSearchParams(spec).toString();
  return `<a href="/api/runs/${rid}/query.npy?${q}" download>mask .npy</a>` +
         `<a href="/api/runs/${rid}/query.fits?${q}" download>mask .fits</a>`;
}

function esc(s) {
  return String(s).replace(/[&<>"]/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[ch]));
}

function renderResult() {
  const box = $("result");
  const doc = state.answer;
  if (!doc) { box.innerHTML = '<p class="muted">No query yet.</p>'; return; }
  const res = currentResult();
  let html = "";
  if (doc.named) html += `<p>named query <strong>${esc(doc.named)}</strong></p>`;
  html += `<p><span class="count" id="result-count" data-array="${esc(res.array)}">${res.count.toLocaleString("en")}</span>` +
          ` cells of <strong>${esc(res.array)}</strong> ${esc(res.shape.join(" x "))} (${doc.direction} from ${esc(doc.from)})</p>`;
  if (doc.results.length > 1) {
    html += "<table><tr><th>target</th><th>cells</th></tr>";
    doc.results.forEach((r, i) => {
      html += `<tr class="pick${i === state.result ? " chosen" : ""}" data-result="${i}"><td>${esc(r.array)}</td><td>${r.count.toLocaleString("en")}</td></tr>`;
    });
    html += "</table>";
  }
  html += `<p class="downloads">${downloadLinks(doc, res)}</p>`;
  html += "<table id=\"steps\"><tr><th>operator</th><th>reached</th><th>method</th><th>in</th><th>out</th><th>ms</th></tr>";
  for (const s of res.steps) {
    const chosen = s.reached === state.array ? " chosen" : "";
    html += `<tr class="pick${chosen}" data-reached="${esc(s.reached)}" title="${esc(s.note || "")}"><td>${esc(s.operator)}:${s.input}</td>` +
            `<td>${esc(s.reached)}</td><td>${esc(s.method)}</td><td>${s.in_count.toLocaleString("en")}</td>` +
            `<td>${s.out_count.toLocaleString("en")}</td><td>${(s.elapsed_s * 1000).toFixed(2)}</td></tr>`;
  }
  html += "</table>";
  box.innerHTML = html;
  for (const tr of box.querySelectorAll("tr[data-result]")) tr.addEventListener("click", () => showResult(+tr.dataset.result));
  for (const tr of box.querySelectorAll("tr[data-reached]")) tr.addEventListener("click", () => showStep(tr.dataset.reached));
}

// show view cell (r, c) at the viewer's centre, ``s`` screen pixels per cell
function centerOn(r, c, s) {
  const { w, h } = viewerSize();
  state.view = { s, ox: w / 2 - (c + 0.5) * s, oy: h / 2 - (r + 0.5) * s };
  draw();
}

// how many pixels of the overlay are drawn (what a test can read off the page)
function overlayPixels() {
  const c = $("overlay");
  const data = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 3; i < data.length; i += 4) if (data[i] > 0 && data[i - 3] > 200 && data[i - 2] < 120) n++;
  return n;
}

// -- start ---------------------------------------------------------------------------------
window.subzero = { state, cellToClient, cellOffset, centerOn, overlayPixels, openArray, openRun, runNamed };
setupViewer();
loadRuns().catch((e) => status(e.message, true));
