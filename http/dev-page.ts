/**
 * The dev page (`GET /dev`, dev mode only): one self-contained HTML document, no build step and
 * nothing fetched from elsewhere. It reads the dev stream (behaviors/dev.ts) with EventSource
 * and shows the node's actors with their mailbox depth, a live message log with filters, and
 * the state timelines of jobs and other machines.
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
  main { display:grid; grid-template-columns: 260px 1fr 340px; gap:1px; background:var(--line); height:calc(100vh - 41px); }
  section { background:var(--bg); overflow:auto; padding:8px 10px; }
  h2 { font-size:12px; text-transform:uppercase; letter-spacing:.06em; color:var(--dim); margin:4px 0 8px; }
  table { border-collapse:collapse; width:100%; }
  td, th { padding:2px 6px; text-align:left; white-space:nowrap; border-bottom:1px solid #1e252d; }
  th { color:var(--dim); font-weight:normal; position:sticky; top:0; background:var(--bg); }
  .bar { height:6px; background:#243040; border-radius:3px; overflow:hidden; min-width:60px; }
  .bar > div { height:100%; background:var(--out); }
  .in { color:var(--in); } .out { color:var(--out); } .dead { color:var(--bad); } .dim { color:var(--dim); }
  .filters { display:flex; gap:6px; margin-bottom:8px; flex-wrap:wrap; }
  .filters input, .filters select, button { background:var(--panel); color:var(--text); border:1px solid var(--line); border-radius:4px; padding:3px 6px; font:inherit; }
  .timeline { margin-bottom:10px; }
  .timeline .name { color:var(--warn); }
  .steps { color:var(--text); word-break:break-word; }
  .steps .step { white-space:nowrap; }
</style>
</head>
<body>
<header>
  <h1>DMS dev</h1>
  <span id="status">connecting…</span>
  <span class="dim">events: <span id="count">0</span>, dropped: <span id="dropped">0</span></span>
</header>
<main>
  <section>
    <h2>Actors</h2>
    <table id="actors"><thead><tr><th>actor</th><th>mailbox</th><th></th></tr></thead><tbody></tbody></table>
  </section>
  <section>
    <h2>Messages</h2>
    <div class="filters">
      <input id="f-actor" placeholder="actor" aria-label="actor filter">
      <input id="f-behavior" placeholder="behavior" aria-label="behavior filter">
      <select id="f-type" aria-label="type filter">
        <option value="">all kinds</option><option value="envelope">envelopes</option><option value="dead-letter">dead letters</option>
        <option value="transition">transitions</option><option value="lifecycle">lifecycle</option>
      </select>
      <button id="pause">pause</button>
      <button id="clear">clear</button>
    </div>
    <table id="log"><thead><tr><th>time</th><th>actor</th><th></th><th>behavior</th><th>peer</th><th>size</th><th>verified</th><th>reply</th></tr></thead><tbody></tbody></table>
  </section>
  <section>
    <h2>State timelines</h2>
    <div id="timelines"></div>
  </section>
</main>
<script>
(() => {
  const MAX_ROWS = 500, MAX_TIMELINES = 100, MAX_STEPS = 30;
  const $ = (id) => document.getElementById(id);
  const actors = new Map();
  const timelines = new Map();
  let count = 0, dropped = 0, paused = false;
  const events = [];

  const text = (v) => (v === undefined || v === null ? '' : String(v));
  const cell = (row, value, cls) => { const td = row.insertCell(); td.textContent = text(value); if (cls) td.className = cls; return td; };
  const shortPeer = (p) => (p && p.length > 12 ? '…' + p.slice(-8) : p || '');
  const filters = () => ({ actor: $('f-actor').value.trim(), behavior: $('f-behavior').value.trim(), type: $('f-type').value });
  const matches = (e, f) =>
    (!f.type || e.type === f.type) &&
    (!f.actor || (e.actor || '').includes(f.actor) || (e.to && e.to.inbox.includes(f.actor))) &&
    (!f.behavior || (e.behavior || '').includes(f.behavior));

  function logRow(e) {
    if (e.type === 'mailbox' || e.type === 'dropped') return null;
    const row = document.createElement('tr');
    row.dataset.type = e.type;
    cell(row, e.at.slice(11, 23), 'dim');
    if (e.type === 'envelope') {
      cell(row, e.actor);
      cell(row, e.direction === 'in' ? '→ in' : '← out', e.direction);
      cell(row, e.behavior + (e.topic ? ' [' + e.topic + ']' : ''));
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
      cell(row, e.from + ' → ' + e.to); cell(row, ''); cell(row, ''); cell(row, e.event, 'dim');
    } else if (e.type === 'lifecycle') {
      cell(row, e.actor); cell(row, '●', 'dim'); cell(row, 'lifecycle'); cell(row, e.state);
      cell(row, ''); cell(row, ''); cell(row, '');
    }
    return row;
  }

  function renderLog() {
    const body = $('log').tBodies[0];
    body.replaceChildren();
    const f = filters();
    for (const e of events) if (matches(e, f)) { const r = logRow(e); if (r) body.prepend(r); }
  }

  function addToLog(e) {
    events.push(e);
    if (events.length > MAX_ROWS) events.shift();
    if (paused || !matches(e, filters())) return;
    const r = logRow(e);
    if (!r) return;
    const body = $('log').tBodies[0];
    body.prepend(r);
    while (body.rows.length > MAX_ROWS) body.deleteRow(body.rows.length - 1);
  }

  function renderActors() {
    const body = $('actors').tBodies[0];
    body.replaceChildren();
    for (const [name, a] of [...actors].sort()) {
      const row = body.insertRow();
      row.dataset.actor = name;
      cell(row, name);
      cell(row, a.depth === undefined ? '' : a.depth + '/' + a.capacity, 'dim');
      const bar = row.insertCell().appendChild(document.createElement('div'));
      bar.className = 'bar';
      const fill = bar.appendChild(document.createElement('div'));
      fill.style.width = a.capacity ? Math.min(100, (100 * a.depth) / a.capacity) + '%' : '0';
      if (a.state && a.state !== 'running') row.classList.add('dim');
    }
  }

  function addTransition(e) {
    const key = e.actor + ' ' + e.machine + (e.instance ? ' ' + e.instance : '');
    if (e.machine === 'actor-lifecycle') return;
    let t = timelines.get(key);
    if (!t) {
      t = { name: e.machine + (e.instance ? ' ' + e.instance.slice(0, 8) : '') + ' (' + e.actor + ')', steps: [] };
      timelines.set(key, t);
      if (timelines.size > MAX_TIMELINES) timelines.delete(timelines.keys().next().value);
    }
    if (t.steps.length === 0 && e.from !== '(start)') t.steps.push({ state: e.from, at: '' });
    t.steps.push({ state: e.to, at: e.at.slice(11, 23) });
    if (t.steps.length > MAX_STEPS) t.steps.shift();
    const box = $('timelines');
    box.replaceChildren();
    for (const tl of [...timelines.values()].reverse()) {
      const div = box.appendChild(document.createElement('div'));
      div.className = 'timeline';
      div.appendChild(document.createElement('div')).className = 'name';
      div.firstChild.textContent = tl.name;
      const steps = div.appendChild(document.createElement('div'));
      steps.className = 'steps';
      tl.steps.forEach((s, i) => {
        const span = steps.appendChild(document.createElement('span'));
        span.className = 'step';
        span.textContent = (i ? ' → ' : '') + s.state;
        span.title = s.at;
      });
    }
  }

  function onEvent(e) {
    count++;
    $('count').textContent = count;
    if (e.type === 'dropped') { dropped += e.count; $('dropped').textContent = dropped; return; }
    if (e.type === 'mailbox') { actors.set(e.actor, { ...actors.get(e.actor), depth: e.depth, capacity: e.capacity }); renderActors(); return; }
    if (e.type === 'lifecycle') { actors.set(e.actor, { ...actors.get(e.actor), state: e.state }); renderActors(); }
    if (e.type === 'envelope' && !actors.has(e.actor)) { actors.set(e.actor, {}); renderActors(); }
    if (e.type === 'transition') addTransition(e);
    addToLog(e);
  }

  for (const id of ['f-actor', 'f-behavior', 'f-type']) $(id).addEventListener('input', renderLog);
  $('pause').addEventListener('click', () => { paused = !paused; $('pause').textContent = paused ? 'resume' : 'pause'; if (!paused) renderLog(); });
  $('clear').addEventListener('click', () => { events.length = 0; renderLog(); });

  const source = new EventSource(${JSON.stringify(DEV_STREAM_PATH)});
  source.addEventListener('open', () => { $('status').textContent = 'live'; $('status').className = 'live'; });
  source.addEventListener('error', () => { $('status').textContent = 'disconnected, retrying…'; $('status').className = ''; });
  source.addEventListener('dms', (m) => onEvent(JSON.parse(m.data)));
})();
</script>
</body>
</html>
`;
