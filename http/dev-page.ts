/**
 * The dev page (`GET /dev`, dev mode only): one self-contained HTML document, no build step and
 * nothing fetched from elsewhere. It reads the dev stream (behaviors/dev.ts) with EventSource
 * and shows:
 *
 *   Actors     every actor of the node with its mailbox depth (the stream's `mailbox` samples,
 *              one a second) and lifecycle state; clicking one filters the log by it.
 *   Messages   the live log of envelopes in and out, dead letters, transitions and lifecycle
 *              changes, newest first, filtered by actor, behavior, topic and kind (the same
 *              filters as the stream's query), with pause and clear.
 *   Timelines  the state history of every machine that reports `transition` events, grouped by
 *              instance: a job's `job` machine (orchestrator), its `executor-run` and any other
 *              machine named after the same job id (placement) share one card, each machine a
 *              lane. Nothing here names a machine, so new kinds appear without changes.
 *
 * The page is served with a CSP that allows exactly this script and style (their hashes, see
 * http/routes/dev.ts): no inline handlers, no external resources. Everything shown is set
 * with textContent. Elements carry `data-*` attributes naming what they show, for tests.
 * It is a TypeScript template literal: the script avoids backticks, `${` and backslashes.
 */
import { DEV_STREAM_PATH } from '../behaviors/dev.js';

export const DEV_PAGE_PATH = '/dev';

export const DEV_PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>DMS dev</title>
<style>
  :root { --bg:#0f1419; --panel:#171d24; --line:#2a333d; --text:#d8dee6; --dim:#8795a3; --in:#7fd38f; --out:#7fb4ff; --warn:#ffb86b; --bad:#ff7b7b; }
  * { box-sizing: border-box; }
  body { margin:0; font:13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background:var(--bg); color:var(--text); }
  header { display:flex; gap:16px; align-items:center; padding:8px 14px; border-bottom:1px solid var(--line); background:var(--panel); }
  header h1 { font-size:15px; margin:0; }
  #status { color:var(--dim); }
  #status.live { color:var(--in); }
  #status.down { color:var(--bad); }
  main { display:grid; grid-template-columns: 300px minmax(0, 1fr) 400px; gap:1px; background:var(--line); height:calc(100vh - 41px); }
  section { background:var(--bg); overflow:auto; padding:8px 10px; }
  h2 { font-size:12px; text-transform:uppercase; letter-spacing:.06em; color:var(--dim); margin:4px 0 8px; }
  table { border-collapse:collapse; width:100%; }
  td, th { padding:2px 6px; text-align:left; white-space:nowrap; border-bottom:1px solid #1e252d; }
  td { max-width:220px; overflow:hidden; text-overflow:ellipsis; }
  th { color:var(--dim); font-weight:normal; position:sticky; top:0; background:var(--bg); }
  #actors tbody tr { cursor:pointer; }
  #actors tbody tr:hover, #actors tbody tr.selected { background:var(--panel); }
  #actors td:first-child { max-width:170px; }
  #actors td:last-child { width:70px; }
  /* The log's columns share the panel's width rather than scroll out of it: the narrow ones get
     what their text needs, the rest split what is left and cut their text with an ellipsis. */
  #log { table-layout:fixed; }
  #log td { max-width:none; }
  #log th:nth-child(1) { width:112px; } #log th:nth-child(3) { width:60px; }
  #log th:nth-child(6) { width:72px; } #log th:nth-child(7) { width:80px; } #log th:nth-child(8) { width:76px; }
  @media (max-width: 1500px) { main { grid-template-columns: 240px minmax(0, 1fr) 320px; } }
  .bar { height:6px; background:#243040; border-radius:3px; overflow:hidden; width:60px; }
  .bar > div { height:100%; background:var(--out); }
  .bar.busy > div { background:var(--warn); }
  .in { color:var(--in); } .out { color:var(--out); } .dead { color:var(--bad); } .dim { color:var(--dim); }
  .filters { display:flex; gap:6px; margin-bottom:8px; flex-wrap:wrap; align-items:center; }
  .filters input { width:130px; }
  .filters input, .filters select, button { background:var(--panel); color:var(--text); border:1px solid var(--line); border-radius:4px; padding:3px 6px; font:inherit; }
  .empty { color:var(--dim); font-style:italic; }
  .card { border:1px solid var(--line); border-radius:4px; padding:5px 8px; margin-bottom:8px; background:var(--panel); }
  .card .title { color:var(--warn); margin-bottom:3px; word-break:break-all; }
  .lane { margin:2px 0 0; }
  .lane .machine { display:block; color:var(--dim); }
  .steps { display:block; padding-left:12px; word-break:break-word; }
  .step { white-space:nowrap; }
  .step.last { font-weight:bold; }
  .step.completed, .step.succeeded, .step.done { color:var(--in); }
  .step.failed, .step.error, .step.lost, .step.cancelled { color:var(--bad); }
</style>
</head>
<body>
<header>
  <h1>DMS dev</h1>
  <span id="status">connecting…</span>
  <span class="dim">events: <span id="count">0</span>, shown: <span id="shown">0</span>, dropped by the node: <span id="dropped">0</span></span>
</header>
<main>
  <section>
    <h2>Actors</h2>
    <table id="actors"><thead><tr><th>actor</th><th>mailbox</th><th></th></tr></thead><tbody></tbody></table>
    <p id="actors-empty" class="empty">waiting for the first mailbox sample…</p>
  </section>
  <section>
    <h2>Messages</h2>
    <div class="filters">
      <input id="f-actor" placeholder="actor" aria-label="actor filter">
      <input id="f-behavior" placeholder="behavior" aria-label="behavior filter">
      <input id="f-topic" placeholder="topic" aria-label="topic filter">
      <select id="f-type" aria-label="kind filter">
        <option value="">all kinds</option><option value="envelope">envelopes</option><option value="dead-letter">dead letters</option>
        <option value="transition">transitions</option><option value="lifecycle">lifecycle</option>
      </select>
      <button id="pause">pause</button>
      <button id="clear">clear</button>
    </div>
    <table id="log"><thead><tr><th>time</th><th>actor</th><th></th><th>behavior / machine</th><th>peer / change</th><th>size</th><th>verified</th><th>reply</th></tr></thead><tbody></tbody></table>
  </section>
  <section>
    <h2>State timelines</h2>
    <div class="filters">
      <input id="f-machine" placeholder="machine (job, placement…)" aria-label="machine filter">
      <input id="f-instance" placeholder="job / instance id" aria-label="instance filter">
    </div>
    <div id="timelines"><p class="empty">no machine has changed state since the page opened</p></div>
  </section>
</main>
<script>
(() => {
  const MAX_EVENTS = 1000, MAX_ROWS = 500, MAX_GROUPS = 100, MAX_STEPS = 40;
  const $ = (id) => document.getElementById(id);

  // What the page knows, updated by onEvent and drawn by the render functions.
  const actors = new Map();     // name -> { depth, capacity, sampled (the sample's time), state }
  let lastSample = '';          // the time of the newest mailbox sample round
  const groups = new Map();     // instance (or actor + machine) -> { title, lanes: Map, last }
  const events = [];            // the log, oldest first, at most MAX_EVENTS
  let count = 0, dropped = 0, paused = false;

  const text = (v) => (v === undefined || v === null ? '' : String(v));
  const el = (parent, tag, content, cls) => {
    const e = parent.appendChild(document.createElement(tag));
    if (content !== undefined) e.textContent = text(content);
    if (cls) e.className = cls;
    return e;
  };
  // A cell too long to show whole shows it on hover.
  const fitTitle = (td) => { td.title = td.textContent.length > 30 ? td.textContent : ''; return td; };
  const cell = (row, value, cls) => fitTitle(el(row, 'td', value, cls));
  const shortPeer = (p) => (p && p.length > 12 ? '…' + p.slice(-8) : p || '');
  const time = (at) => at.slice(11, 23);

  // Redraws are batched: a burst of events costs one redraw of each part, not one per event.
  const pending = new Set();
  const later = (render) => {
    if (pending.size === 0) setTimeout(() => { const fns = [...pending]; pending.clear(); fns.forEach((f) => f()); }, 50);
    pending.add(render);
  };

  // ---- the message log ----
  const filters = () => ({
    actor: $('f-actor').value.trim(), behavior: $('f-behavior').value.trim(),
    topic: $('f-topic').value.trim(), type: $('f-type').value,
  });
  const actorOf = (e) => e.actor || (e.to && e.to.inbox) || '';
  const behaviorOf = (e) => e.behavior || e.machine || '';
  const matches = (e, f) =>
    (!f.type || e.type === f.type) &&
    (!f.actor || actorOf(e).includes(f.actor)) &&
    (!f.behavior || behaviorOf(e).includes(f.behavior)) &&
    (!f.topic || (e.topic || '').includes(f.topic));

  function logRow(e) {
    const row = document.createElement('tr');
    row.dataset.type = e.type;
    row.dataset.actor = actorOf(e);
    row.dataset.behavior = behaviorOf(e);
    cell(row, time(e.at), 'dim');
    if (e.type === 'envelope') {
      cell(row, e.actor);
      cell(row, e.direction === 'in' ? '→ in' : '← out', e.direction);
      // A reply's behavior names the request's nonce: its last digits tell replies apart.
      const be = e.behavior.startsWith('/private/reply/') ? '/private/reply/…' + e.behavior.slice(-6) : e.behavior;
      cell(row, be + (e.topic ? ' [' + e.topic + ']' : '')).title = e.behavior;
      const peer = e.direction === 'in' ? e.from : e.to;
      cell(row, peer.inbox + (peer.host ? '@' + shortPeer(peer.host) : ''), 'dim');
      cell(row, e.size + ' B', 'dim');
      cell(row, e.verified, 'dim');
      cell(row, e.reply_ms === undefined ? '' : e.reply_ms.toFixed(1) + ' ms');
      if (e.payload !== undefined) row.title = JSON.stringify(e.payload);
    } else if (e.type === 'dead-letter') {
      cell(row, e.to.inbox); cell(row, '✗ dead', 'dead'); cell(row, e.behavior); cell(row, e.reason, 'dim');
      cell(row, ''); cell(row, ''); cell(row, '');
    } else if (e.type === 'transition') {
      cell(row, e.actor); cell(row, '↻', 'dim'); cell(row, e.machine + (e.instance ? ' ' + e.instance.slice(0, 8) : ''));
      cell(row, (e.from_path || e.from) + ' → ' + (e.to_path || e.to) + ' on ' + e.event); cell(row, ''); cell(row, ''); cell(row, '');
    } else {
      cell(row, e.actor); cell(row, '●', 'dim'); cell(row, 'lifecycle'); cell(row, e.state);
      cell(row, ''); cell(row, ''); cell(row, '');
    }
    return row;
  }

  function renderLog() {
    const body = $('log').tBodies[0];
    const f = filters();
    const rows = [];
    for (let i = events.length - 1; i >= 0 && rows.length < MAX_ROWS; i--) if (matches(events[i], f)) rows.push(logRow(events[i]));
    body.replaceChildren(...rows);
    $('shown').textContent = rows.length;
  }

  function addToLog(e) {
    events.push(e);
    if (events.length > MAX_EVENTS) events.shift();
    if (!paused) later(renderLog);
  }

  // ---- actors ----
  function renderActors() {
    const body = $('actors').tBodies[0];
    const selected = $('f-actor').value.trim();
    $('actors-empty').hidden = actors.size > 0;
    // Each actor keeps its row and cells across redraws, which change only their text and
    // classes: a click pressed on a row before a mailbox sample redrew the list and released
    // after it would otherwise end on an element that is gone, and be lost.
    const rows = new Map([...body.rows].map((r) => [r.dataset.actor, r]));
    let at = 0;
    for (const [name, a] of [...actors].sort((x, y) => (x[0] < y[0] ? -1 : 1))) {
      let row = rows.get(name);
      if (!row) {
        row = document.createElement('tr');
        row.dataset.actor = name;
        el(row, 'td');
        el(row, 'td', undefined, 'depth dim');
        el(el(el(row, 'td'), 'div', undefined, 'bar'), 'div');
      }
      if (body.rows[at] !== row) body.insertBefore(row, body.rows[at] ?? null);
      at++;
      if (a.depth !== undefined) row.dataset.depth = a.depth;
      else delete row.dataset.depth;
      // An actor missing from the latest samples has stopped (its lifecycle says how, if seen).
      const gone = a.sampled && Date.parse(lastSample) - Date.parse(a.sampled) > 2500;
      const state = a.state && a.state !== 'running' ? a.state : gone ? 'gone' : '';
      row.classList.toggle('selected', name === selected);
      row.classList.toggle('dim', Boolean(state));
      const [label, depth, meter] = row.cells;
      label.textContent = name + (state ? ' (' + state + ')' : '');
      fitTitle(label);
      depth.textContent = a.depth === undefined ? '' : a.depth + '/' + a.capacity;
      const bar = meter.firstChild;
      bar.className = a.depth ? 'bar busy' : 'bar';
      bar.firstChild.style.width = a.capacity ? Math.min(100, (100 * a.depth) / a.capacity) + '%' : '0';
    }
    while (body.rows.length > at) body.deleteRow(at);
  }

  // ---- state timelines ----
  function addTransition(e) {
    if (e.machine === 'actor-lifecycle') return;   // shown in the actors list and the log
    const key = e.instance || e.actor + ' ' + e.machine;
    let g = groups.get(key);
    if (g) groups.delete(key);                     // re-inserted below: most recent last
    else g = { title: e.instance || e.machine + ' (' + e.actor + ')', instance: e.instance || '', lanes: new Map() };
    groups.set(key, g);
    if (groups.size > MAX_GROUPS) groups.delete(groups.keys().next().value);
    const laneKey = e.actor + ' ' + e.machine;
    let lane = g.lanes.get(laneKey);
    if (!lane) g.lanes.set(laneKey, (lane = { machine: e.machine, actor: e.actor, steps: [] }));
    // A move within a nested state (pending.queued → pending.offering) stays on its step, noted as a sub-state.
    const sub = (path, top) => (path && path.length > top.length ? path.slice(top.length + 1) : '');
    if (lane.steps.length === 0 && e.from !== '(start)') lane.steps.push({ state: e.from, at: '', event: '', subs: sub(e.from_path, e.from) ? [sub(e.from_path, e.from)] : [] });
    const last = lane.steps[lane.steps.length - 1];
    const inner = sub(e.to_path, e.to);
    if (last && last.state === e.to && e.from === e.to) { if (inner) last.subs.push(inner); last.at = time(e.at); last.event = e.event; }
    else lane.steps.push({ state: e.to, at: time(e.at), event: e.event, subs: inner ? [inner] : [] });
    if (lane.steps.length > MAX_STEPS) lane.steps.shift();
    later(renderTimelines);
  }

  function renderTimelines() {
    const box = $('timelines');
    const machine = $('f-machine').value.trim(), instance = $('f-instance').value.trim();
    box.replaceChildren();
    for (const g of [...groups.values()].reverse()) {
      if (instance && !g.instance.includes(instance)) continue;
      const lanes = [...g.lanes.values()].filter((l) => !machine || l.machine.includes(machine));
      if (lanes.length === 0) continue;
      const card = el(box, 'div', undefined, 'card');
      card.dataset.instance = g.instance;
      el(card, 'div', g.title, 'title');
      for (const l of lanes) {
        const div = el(card, 'div', undefined, 'lane');
        div.dataset.machine = l.machine;
        el(div, 'span', l.machine + (g.instance ? ' (' + l.actor + ')' : ''), 'machine');
        const steps = el(div, 'span', undefined, 'steps');
        l.steps.forEach((s, i) => {
          const last = i === l.steps.length - 1;
          // Sub-states show once the step moved within itself: a job placed here at once reads pending → starting.
          const label = s.state + (s.subs.length > 1 ? ' (' + s.subs.join(' → ') + ')' : '');
          const span = el(steps, 'span', (i ? ' → ' : '') + label, 'step ' + s.state + (last ? ' last' : ''));
          span.dataset.state = s.state;
          span.title = s.at + (s.event ? ' on ' + s.event : '');
        });
      }
    }
    if (!box.firstChild) el(box, 'p', groups.size ? 'no timeline matches the filters' : 'no machine has changed state since the page opened', 'empty');
  }

  // ---- the stream ----
  function onEvent(e) {
    count++;
    $('count').textContent = count;
    switch (e.type) {
      case 'dropped':
        dropped += e.count; $('dropped').textContent = dropped; return;
      case 'mailbox':
        if (e.at > lastSample) lastSample = e.at;
        actors.set(e.actor, { ...actors.get(e.actor), depth: e.depth, capacity: e.capacity, sampled: e.at }); later(renderActors); return;
      case 'lifecycle':
        actors.set(e.actor, { ...actors.get(e.actor), state: e.state }); later(renderActors); break;
      case 'transition':
        addTransition(e); break;
    }
    addToLog(e);
  }

  for (const id of ['f-actor', 'f-behavior', 'f-topic', 'f-type']) $(id).addEventListener('input', () => { renderLog(); renderActors(); });
  for (const id of ['f-machine', 'f-instance']) $(id).addEventListener('input', renderTimelines);
  $('actors').addEventListener('click', (ev) => {
    const row = ev.target.closest('tr[data-actor]');
    if (!row) return;
    $('f-actor').value = $('f-actor').value.trim() === row.dataset.actor ? '' : row.dataset.actor;
    renderLog(); renderActors();
  });
  $('pause').addEventListener('click', () => { paused = !paused; $('pause').textContent = paused ? 'resume' : 'pause'; if (!paused) renderLog(); });
  $('clear').addEventListener('click', () => { events.length = 0; renderLog(); });

  const source = new EventSource(${JSON.stringify(DEV_STREAM_PATH)});
  source.addEventListener('open', () => { $('status').textContent = 'live'; $('status').className = 'live'; });
  source.addEventListener('error', () => {
    $('status').textContent = source.readyState === EventSource.CLOSED ? 'stream refused (dev mode off, or an admin credential needed)' : 'disconnected, retrying…';
    $('status').className = 'down';
  });
  source.addEventListener('dms', (m) => onEvent(JSON.parse(m.data)));
})();
</script>
</body>
</html>
`;
