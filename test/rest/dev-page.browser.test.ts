// The dev page (GET /dev) end to end in headless Chromium (Debian's `chromium` package, driven
// by playwright-core; no browser is ever downloaded). A real node in dev mode serves the page;
// the test sends envelopes and submits a null-executor job over REST while the page watches,
// and checks what a developer would look at: the message in the live log, filters hiding and
// showing it, every actor with its mailbox depth, and the job's state timeline. The page reads
// the stream as the local caller (REST auth off, loopback), which is admin; see README, Dev mode.
//
// Without /usr/bin/chromium the test is skipped, saying so, unless DMS_REQUIRE_CHROMIUM=1
// (.ci/run sets it), where a missing browser fails it. The screenshot of the page showing the
// live log is saved as test-output/dev-page.png.
import { existsSync, mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { DevEvent } from '../../behaviors/dev.js';
import { DmsClient } from '../../client/index.js';
import { newCaller, rootOf, wire } from '../helpers/envelopes.js';
import { freePort } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';
import { nullJob, Rest } from '../jobs/helpers.js';

const CHROMIUM = process.env.DMS_CHROMIUM ?? '/usr/bin/chromium';
const REQUIRED = process.env.DMS_REQUIRE_CHROMIUM === '1';
const HAVE_CHROMIUM = existsSync(CHROMIUM);
const MISSING = `${CHROMIUM} is missing: install Debian's chromium package (apt-get install chromium; .ci/run does)`;
const OUTPUT_DIR = fileURLToPath(new URL('../../test-output/', import.meta.url));

/** Long enough for a loaded two-core machine; every wait is on state, never a fixed sleep. */
const WAIT = { timeout: 30_000 };

if (!HAVE_CHROMIUM && REQUIRED) {
  it('has Chromium to test the dev page with (DMS_REQUIRE_CHROMIUM=1)', () => {
    throw new Error(MISSING);
  });
} else if (!HAVE_CHROMIUM) {
  console.warn(`skipping the dev page browser test: ${MISSING}`);
}

describe.skipIf(!HAVE_CHROMIUM)(`the dev page in headless Chromium${HAVE_CHROMIUM ? '' : ` (skipped: ${MISSING})`}`, () => {
  let node: NodeProcess;
  let browser: Browser;
  let page: Page;
  /** What the page reported that it should not have: script errors, CSP refusals, failed loads. */
  const problems: string[] = [];

  /** A page on another origin, served for real: Chromium treats an intercepted response as public, not loopback. */
  let pageServer: Server;
  let PAGE_ORIGIN: string;

  beforeAll(async () => {
    const pagePort = await freePort();
    PAGE_ORIGIN = `http://localhost:${pagePort}`;
    pageServer = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>another origin</title>'));
    await new Promise<void>((resolve) => pageServer.listen(pagePort, '127.0.0.1', resolve));
    const rest = { cors: { origins: [PAGE_ORIGIN] } };
    [node, browser] = await Promise.all([
      startNode({ config: { general: { debug: true, log_level: 'warn' }, network: { enabled: false }, jobs: { stop_grace_s: 1 }, rest }, timeoutMs: 45_000 }),
      chromium.launch({
        executablePath: CHROMIUM,
        args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check', '--disable-extensions'],
        timeout: 60_000,
      }),
    ]);
    page = await browser.newPage({ viewport: { width: 1600, height: 900 } });
    page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console: ${m.text()}`);
    });
    page.on('requestfailed', (r) => {
      // The stream is cut when the page closes at the end; nothing else may fail.
      if (!r.url().includes('/api/v1/dev/stream')) problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
    });
    const res = await page.goto(`${node.url}/dev`, WAIT);
    expect(res?.status()).toBe(200);
    // The page's EventSource reached the stream: Host, Origin and auth let a browser on this machine in.
    await page.locator('#status.live').waitFor(WAIT);
  }, 120_000);

  afterAll(async () => {
    pageServer?.close();
    await browser?.close();
    await node?.stop();
    if (node) removeHome(node.home);
  });

  const client = () => new DmsClient({ url: node.url, timeoutMs: 20_000 });
  const logRows = (behavior: string) => page.locator(`#log tbody tr[data-type="envelope"][data-actor="root"][data-behavior="${behavior}"]`);

  it('runs its script under its own CSP without errors', () => {
    expect(problems).toEqual([]);
  });

  it('shows a message sent during the test in the live log, and saves a screenshot of it', { timeout: 90_000 }, async () => {
    await client().invoke({ inbox: 'root' }, '/public/hello', { greeting: 'from the browser test' });
    const row = logRows('/public/hello').first();
    await row.waitFor(WAIT);
    await expect(row.innerText()).resolves.toMatch(/root\s+→ in\s+\/public\/hello\s+user-[^\s]*@…\S+\s+\d+ B\s+node/);
    // The reply root sent back is there too.
    await page.locator('#log tbody tr[data-type="envelope"][data-actor="root"]', { hasText: '← out' }).first().waitFor(WAIT);
    // The screenshot also shows the actors with their depths (sampled once a second).
    await page.locator('#actors tbody tr[data-actor="root"][data-depth]').waitFor(WAIT);
    mkdirSync(OUTPUT_DIR, { recursive: true });
    await page.screenshot({ path: join(OUTPUT_DIR, 'dev-page.png') });
    expect(problems).toEqual([]);
  });

  it('filters the log: a behavior filter hides the hello and shows the status request, clearing it shows both', { timeout: 90_000 }, async () => {
    await page.locator('#f-behavior').fill('/public/status');
    await logRows('/public/hello').first().waitFor({ ...WAIT, state: 'detached' });
    await client().invoke({ inbox: 'root' }, '/public/status', {});
    await logRows('/public/status').first().waitFor(WAIT);
    expect(await logRows('/public/hello').count()).toBe(0);

    await page.locator('#f-behavior').fill('');
    await logRows('/public/hello').first().waitFor(WAIT);
    await logRows('/public/status').first().waitFor(WAIT);

    // The kind filter: transitions only leaves no envelope.
    await page.locator('#f-type').selectOption('transition');
    await page.locator('#log tbody tr[data-type="envelope"]').first().waitFor({ ...WAIT, state: 'detached' });
    await page.locator('#f-type').selectOption('');
    await logRows('/public/hello').first().waitFor(WAIT);
  });

  it("lists the node's actors with their mailbox depth, and clicking one filters the log by it", { timeout: 90_000 }, async () => {
    const root = page.locator('#actors tbody tr[data-actor="root"][data-depth]');
    await root.waitFor(WAIT);
    await expect(root.locator('td.depth').innerText()).resolves.toMatch(/^\d+\/4096$/);
    for (const actor of ['orchestrator', 'executor/null']) await page.locator(`#actors tbody tr[data-actor="${actor}"][data-depth]`).waitFor(WAIT);
    // The REST callers' reply inboxes (user-…) are in the log, not in the list of actors.
    expect(await page.locator('#actors tbody tr[data-actor^="user-"]').count()).toBe(0);

    await root.click();
    await expect(page.locator('#f-actor').inputValue()).resolves.toBe('root');
    await page.locator('#log tbody tr:not([data-actor="root"])').first().waitFor({ ...WAIT, state: 'detached' });
    await logRows('/public/hello').first().waitFor(WAIT);
    await root.click();
    await expect(page.locator('#f-actor').inputValue()).resolves.toBe('');
  });

  it('keeps a click on an actor whose press and release a redraw of the list falls between', { timeout: 90_000 }, async () => {
    const root = page.locator('#actors tbody tr[data-actor="root"][data-depth]');
    await root.waitFor(WAIT);
    expect(await page.locator('#f-actor').inputValue()).toBe('');
    await page.evaluate(() => {
      const w = window as unknown as { redraws: number };
      w.redraws = 0;
      new MutationObserver(() => w.redraws++).observe(document.querySelector('#actors tbody')!, { childList: true, subtree: true });
    });
    const box = (await root.boundingBox())!;
    await page.mouse.move(box.x + 20, box.y + box.height / 2);
    await page.mouse.down();
    // The next mailbox sample redraws the list while the button is held.
    await page.waitForFunction(() => (window as unknown as { redraws: number }).redraws > 0, undefined, WAIT);
    await page.mouse.up();
    await expect(page.locator('#f-actor').inputValue()).resolves.toBe('root');
    await root.click();
    await expect(page.locator('#f-actor').inputValue()).resolves.toBe('');
  });

  it("shows a null-executor job's state timeline, its job machine and executor run on one card", { timeout: 90_000 }, async () => {
    const rest = new Rest(node.url);
    const job = await rest.submit(nullJob({ name: 'dev-page-job', durationMs: 200 }));
    await rest.waitFor(job.id, ['completed'], 60_000);
    const card = page.locator(`#timelines .card[data-instance="${job.id}"]`);
    await card.locator('.lane[data-machine="job"] .step.last[data-state="completed"]').waitFor(WAIT);
    const lane = await card.locator('.lane[data-machine="job"]').innerText();
    expect(lane).toMatch(/^job \(orchestrator\)\s+pending → starting → running → .*completed$/);
    await card.locator('.lane[data-machine="executor-run"]').waitFor(WAIT);

    // The machine filter keeps only the lanes of that machine.
    await page.locator('#f-machine').fill('executor-run');
    await card.locator('.lane[data-machine="job"]').waitFor({ ...WAIT, state: 'detached' });
    await card.locator('.lane[data-machine="executor-run"]').waitFor(WAIT);
    await page.locator('#f-machine').fill('');
    await page.screenshot({ path: join(OUTPUT_DIR, 'dev-page-job.png') });
    expect(problems).toEqual([]);
  });

  it("serves the page's own requests, which carry its Origin: same-origin is not foreign", { timeout: 90_000 }, async () => {
    const body = wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r' });
    const sent = page.waitForRequest((r) => r.url().endsWith('/api/v1/actor/invoke'), WAIT);
    const status = await page.evaluate(
      (b) => fetch('/api/v1/actor/invoke', { method: 'POST', headers: { 'content-type': 'application/json' }, body: b }).then((r) => r.status),
      body,
    );
    expect(await (await sent).headerValue('origin')).toBe(node.url);
    expect(status).toBe(200);
  });

  it('refuses a page on an origin listed in rest.cors.origins that sends no credentials: no job is made', { timeout: 90_000 }, async () => {
    const jobs = async () => {
      const body = (await (await fetch(`${node.url}/api/v1/jobs`)).json()) as unknown[] | { jobs: unknown[] };
      return (Array.isArray(body) ? body : body.jobs).length;
    };
    const before = await jobs();
    const other = await browser.newPage();
    try {
      await other.goto(`${PAGE_ORIGIN}/`, WAIT);
      const spec = JSON.stringify(nullJob({ name: 'drive-by', durationMs: 10 }));
      const outcome = await other.evaluate(
        async ([url, b]) => {
          const json = await fetch(`${url}/api/v1/jobs`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: b }).then(
            async (r) => `status ${r.status} ${await r.text()}`,
            (e: Error) => `refused: ${e.name}`,
          );
          // A simple request needs no preflight: the node must refuse it itself (the answer stays opaque).
          await fetch(`${url}/api/v1/jobs`, { method: 'POST', mode: 'no-cors', headers: { 'content-type': 'text/plain' }, body: b }).catch(() => undefined);
          return json;
        },
        [node.url, spec] as const,
      );
      // The refusal's body may be readable (CORS headers for a listed origin) or not: never a job.
      expect(outcome).toMatch(/^(status 403 .*needs an API key or JWT|refused: TypeError)/);
    } finally {
      await other.close();
    }
    expect(await jobs()).toBe(before);
  });

  it('refuses what a page of another site asks without CORS: the dev stream from a no-cors fetch, the jobs from an image', { timeout: 90_000 }, async () => {
    // The page never reads these answers, but a stream it opened held one of the node's watcher
    // slots and had events built for it for as long as the page stayed open.
    const other = await browser.newPage();
    try {
      await other.goto(`${PAGE_ORIGIN}/`, WAIT);
      // What the node answered, as the browser's network layer saw it: Chromium blocks an opaque
      // JSON answer before the page (ORB), so neither the page nor Playwright sees it.
      const cdp = await other.context().newCDPSession(other);
      await cdp.send('Network.enable');
      const urls = new Map<string, string>();
      const statuses = new Map<string, number>();
      // By request id: the two events come in either order.
      cdp.on('Network.requestWillBeSent', (e) => urls.set(e.requestId, e.request.url));
      cdp.on('Network.responseReceivedExtraInfo', (e) => statuses.set(e.requestId, e.statusCode));
      const statusOf = (url: string) => [...statuses].find(([id]) => urls.get(id) === url)?.[1];
      const answered = (path: string) => vi.waitFor(() => statusOf(`${node.url}${path}`) ?? Promise.reject(new Error(`no answer to ${path} yet`)), { timeout: 30_000, interval: 50 });
      const stream = answered('/api/v1/dev/stream');
      const image = answered('/api/v1/jobs');
      await other.evaluate((url) => {
        void fetch(`${url}/api/v1/dev/stream`, { mode: 'no-cors' }).catch(() => undefined);
        const img = document.createElement('img');
        img.src = `${url}/api/v1/jobs`;
        document.body.append(img);
      }, node.url);
      expect(await stream).toBe(403);
      expect(await image).toBe(403);
    } finally {
      await other.close();
    }
  });

  it('draws any machine that reports transitions: a placement machine joins its job\'s card with no change to the page', { timeout: 90_000 }, async () => {
    // Placement machines are not in the node yet; their events are what the stream's contract
    // says a transition is. This page reads a stream of such events served in place of the node's.
    const jobId = '5f0c2a9e-placement-test';
    const at = new Date().toISOString();
    const t = (actor: string, machine: string, from: string, to: string, event: string): DevEvent => ({ type: 'transition', at, actor, machine, instance: jobId, from, to, event });
    const events: DevEvent[] = [
      t('orchestrator', 'job', '(start)', 'pending', 'xstate.init'),
      t('orchestrator', 'placement', '(start)', 'bidding', 'xstate.init'),
      t('orchestrator', 'placement', 'bidding', 'awarded', 'bid_accepted'),
      t('orchestrator', 'job', 'pending', 'starting', 'placed'),
    ];
    const other = await browser.newPage();
    try {
      other.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
      await other.route('**/api/v1/dev/stream', (route) =>
        route.fulfill({
          status: 200,
          headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-store' },
          // `retry` keeps the page from reading the same events again when this body ends.
          body: 'retry: 3600000\n\n' + events.map((e) => `event: dms\ndata: ${JSON.stringify(e)}\n\n`).join(''),
        }),
      );
      await other.goto(`${node.url}/dev`, WAIT);
      const card = other.locator(`#timelines .card[data-instance="${jobId}"]`);
      await card.locator('.lane[data-machine="placement"] .step.last[data-state="awarded"]').waitFor(WAIT);
      expect(await card.locator('.lane[data-machine="placement"]').innerText()).toMatch(/^placement \(orchestrator\)\s+bidding → awarded$/);
      expect(await card.locator('.lane[data-machine="job"]').innerText()).toMatch(/^job \(orchestrator\)\s+pending → starting$/);
      // The machine filter takes the new kind's name like any other.
      await other.locator('#f-machine').fill('placement');
      await card.locator('.lane[data-machine="job"]').waitFor({ ...WAIT, state: 'detached' });
      await card.locator('.lane[data-machine="placement"]').waitFor(WAIT);
      // And the transitions are in the log, where the kind filter finds them.
      await other.locator('#f-type').selectOption('transition');
      await other.locator('#log tbody tr[data-type="transition"][data-behavior="placement"]').nth(1).waitFor(WAIT);
    } finally {
      await other.close();
    }
    expect(problems).toEqual([]);
  });
  it('keeps every column of the log on screen at 1400 px: size, verified and reply too', { timeout: 90_000 }, async () => {
    await page.setViewportSize({ width: 1400, height: 900 });
    try {
      await page.locator('#f-actor').fill('');
      await page.locator('#f-behavior').fill('');
      // Long cells, as a real log has: a peer's caller inbox and a nested behavior path.
      await client().invoke({ inbox: 'root' }, '/public/status', { padding: 'x'.repeat(2000) });
      await logRows('/public/status').first().waitFor(WAIT);
      const off = await page.evaluate(() => {
        const section = document.querySelector('#log')!.closest('section')!.getBoundingClientRect();
        const cells = [...Array.from(document.querySelectorAll('#log thead th')), ...Array.from(document.querySelectorAll('#log tbody tr:first-child td'))];
        return cells.filter((c) => c.getBoundingClientRect().right > section.right + 0.5).map((c) => c.textContent || `column ${Array.from(c.parentElement!.children).indexOf(c)}`);
      });
      expect(off).toEqual([]);
    } finally {
      await page.setViewportSize({ width: 1600, height: 900 });
    }
  });
});
