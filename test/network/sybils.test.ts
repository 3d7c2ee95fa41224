/**
 * Sybils on one IP (issue 26): identities are free, so an attacker on the same address as two
 * genuine nodes (here all on 127.0.0.1) can make many, connect each, subscribe and leave.
 * gossipsub counts every peer it saw on an IP, and keeps a departed peer's record (IP included)
 * for its score retention time; past the IP-colocation threshold every peer on that IP, the
 * genuine ones too, is penalised by the square of the surplus. With gossipsub's defaults 16
 * sybils put the other genuine node at -245, below the graylist (-80): its gossip is ignored
 * and nothing is published to it, for an hour. The node's own scoring (runtime/network/score.ts)
 * must leave broadcasts and bids between the genuine nodes working.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEPLOYMENT_TOPIC } from '../../behaviors/jobs/deployment.js';
import { DmsClient } from '../../client/client.js';
import { startCluster, stopCluster, waitFor } from '../helpers/network.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { sybilVisit } from '../helpers/peer.js';
import { rest } from '../helpers/rest.js';

const HELLO_TOPIC = '/dms/hello';
const SYBILS = 16;
const GiB = 1024 ** 3;

let nodes: LocalNode[] = [];
let a: LocalNode;
let b: LocalNode;

/** The DIDs that answered a hello broadcast from `from` within `ttlMs`. */
async function helloAnswers(from: LocalNode, ttlMs: number): Promise<string[]> {
  const replies = await new DmsClient({ url: from.url, timeoutMs: ttlMs + 5_000 }).broadcast<{ did: string }>(HELLO_TOPIC, '/broadcast/hello', {}, { limit: 2, ttlMs });
  return replies.map((r) => r.payload.did).sort();
}

/** Both nodes hear each other's broadcasts: each one's hello reaches the other, whose answer comes back. */
async function broadcastsBothWays(ttlMs: number): Promise<void> {
  const both = [a.did, b.did].sort();
  expect(await helloAnswers(a, ttlMs)).toEqual(both);
  expect(await helloAnswers(b, ttlMs)).toEqual(both);
}

beforeAll(async () => {
  nodes = await startCluster(2, { start: startLocalNode });
  [a, b] = nodes;
  // Only b can hold the job below: a must place it through a bid request on the deployment topic.
  expect((await rest(a, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 0.5, memory: 512 * 1024 * 1024 } })).status).toBe(200);
  expect((await rest(b, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 2, memory: 2 * GiB } })).status).toBe(200);
  await waitFor('a and b to hear each other\'s hello broadcasts', () => broadcastsBothWays(3_000).then(() => true), { timeoutMs: 40_000, intervalMs: 500 });
}, 120_000);
afterAll(() => stopCluster(nodes));

describe('16 sybils on the genuine nodes\' IP', () => {
  it('connect, subscribe and leave; afterwards a and b still exchange broadcasts and a job placed from a is bid for and run by b', { timeout: 240_000 }, async () => {
    for (let i = 0; i < SYBILS; i++) await sybilVisit([a, b], [HELLO_TOPIC, DEPLOYMENT_TOPIC]);

    await broadcastsBothWays(5_000);
    const { status, json: job } = await rest(a, 'POST', '/api/v1/jobs', { name: 'after-sybils', image: 'none', executor: 'null', resources: { cpu: 1, memory: '1GiB' } });
    expect(status, JSON.stringify(job)).toBe(201);
    const done = await waitFor(`job ${job.id} completed`, async () => {
      const j = (await rest(a, 'GET', `/api/v1/jobs/${job.id}`)).json;
      if (j?.status !== 'completed') throw new Error(`${j?.status} ${j?.pending_reason ?? ''} ${j?.error ?? ''}`);
      return j;
    }, { timeoutMs: 40_000, intervalMs: 200 });
    expect(done.node).toBe(b.peerId);
  });
});
