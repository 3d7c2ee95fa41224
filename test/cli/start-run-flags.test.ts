import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { DevEvents, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, runCli, startNode } from '../helpers/node.js';
import { ForeignPeer } from '../helpers/peer.js';

/**
 * The flags README "Command line" and "Dev mode" promise, through the real CLI: `dms start
 * --dev` turns dev mode on (the dev stream, the page, the redacted config), `--dev-payloads`
 * also shows payloads on the stream, and `dms run --local` keeps a job on this node.
 */

let plain: NodeProcess;
let dev: NodeProcess;
let payloads: NodeProcess;
/** A bidder beside the plain node: it sees every job the node offers to the network. */
let peer: ForeignPeer;

beforeAll(async () => {
  [plain, dev, payloads] = await Promise.all([startNode({}), startNode({ args: ['--dev'] }), startNode({ args: ['--dev-payloads'] })]);
  peer = await ForeignPeer.connectedTo(plain);
  peer.transport.subscribe(DEPLOYMENT_TOPIC);
}, 90_000);
afterAll(async () => {
  await peer?.stop();
  await stopCluster([plain, dev, payloads].filter(Boolean));
});

const status = async (n: NodeProcess, path: string) => {
  const res = await fetch(`${n.url}${path}`);
  await res.body?.cancel();
  return res.status;
};
const config = async (n: NodeProcess) => ((await (await fetch(`${n.url}/api/v1/config`)).json()) as { config: unknown }).config;

/** The envelope event of a hello with `payload` entering root on `n`. */
async function helloSeen(n: NodeProcess, payload: unknown) {
  const watch = await DevEvents.open(n.url, ['envelope']);
  try {
    await new DmsClient({ url: n.url, timeoutMs: 10_000 }).invoke({ inbox: 'root' }, '/public/hello', payload);
    return await watch.waitFor('the hello delivered to root', (e) => e.type === 'envelope' && e.direction === 'in' && e.actor === 'root' && e.behavior === '/public/hello', 10_000);
  } finally {
    watch.close();
  }
}

describe('dms start --dev', () => {
  it('turns dev mode on: the dev stream and page answer, /api/v1/config shows the config; payloads stay off the stream', { timeout: 30_000 }, async () => {
    expect(await status(dev, '/api/v1/dev/stream')).toBe(200);
    expect(await status(dev, '/dev')).toBe(200);
    expect(await config(dev)).toMatchObject({ general: { debug: true, dev_payloads: false } });
    expect(await helloSeen(dev, { secret: 'kept-off' })).not.toHaveProperty('payload');
  });

  it('control: without it the dev routes answer 404 and the config is hidden', async () => {
    expect(await status(plain, '/api/v1/dev/stream')).toBe(404);
    expect(await status(plain, '/dev')).toBe(404);
    expect(typeof (await config(plain))).toBe('string');
  });
});

describe('dms start --dev-payloads', () => {
  it('turns dev mode on and shows each envelope\'s payload on the dev stream', { timeout: 30_000 }, async () => {
    expect(await config(payloads)).toMatchObject({ general: { debug: true, dev_payloads: true } });
    expect(await helloSeen(payloads, { secret: 'shown' })).toMatchObject({ payload: { secret: 'shown' } });
  });
});

describe('dms run --local', () => {
  const bidRequestFor = (id: string) => peer.arrived.find((e) => e.be === '/dms/deployment/bid' && (decodePayload(e.msg) as any).jobs?.some((j: any) => j.job_id === id));
  const run = (...extra: string[]) => runCli(['--home', plain.home, 'run', 'none', '--executor', 'null', '--cpu', '1000', '--id-only', ...extra]);

  it('control: a job this node cannot hold, with a peer connected, is accepted and offered to the network', { timeout: 30_000 }, async () => {
    const r = await run();
    expect(r.code, r.stderr).toBe(0);
    const id = r.stdout.trim();
    onTestFinished(async () => void (await fetch(`${plain.url}/api/v1/jobs/${id}`, { method: 'DELETE' })));
    await waitFor(`a bid request for job ${id} at the peer`, () => bidRequestFor(id), { timeoutMs: 10_000, intervalMs: 50 });
  });

  it('never leaves this node: the same job is refused at once, as too big for this node, and offered to nobody', { timeout: 30_000 }, async () => {
    const before = peer.arrived.length;
    const r = await run('--local');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^dms: needs 1000 cores; this node has at most [\d.]+ \(no known node could hold it\) \(HTTP 409\)\n$/);
    expect(peer.arrived.slice(before).filter((e) => e.be === '/dms/deployment/bid')).toEqual([]);
  });
});
