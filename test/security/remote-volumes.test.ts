/**
 * A volume is its node's own (README "Job outputs"): its operator's jobs mount it. A requester
 * that sends a provider a job naming `volume:<name>` as an input must not get the provider's
 * volume mounted into its container, read-only or writable. The provider is a node in process
 * with a real Docker engine; the requester is a libp2p peer speaking the deployment behaviors.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { dockerForTests, TEST_IMAGE } from '../helpers/docker.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';
import { ForeignPeer } from '../helpers/peer.js';

const { problem } = await dockerForTests('a stranger mounting a volume');
const MiB = 1024 * 1024;

describe.skipIf(problem !== null)("another node's job and this node's volumes", { timeout: 60_000 }, () => {
  let provider: LocalNode;
  let peer: ForeignPeer;
  const json = (method: string, body: unknown) => ({ method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  beforeAll(async () => {
    provider = await startLocalNode();
    expect((await fetch(`${provider.url}/api/v1/device/config`, json('PUT', { onboarded: { cpu: 1, memory: '512MiB', storage: '64MiB' } }))).status).toBe(200);
    expect((await fetch(`${provider.url}/api/v1/volumes`, json('POST', { name: 'secrets', size: '1MiB' }))).status).toBe(201);
    writeFileSync(join(provider.home, 'data', 'volumes', 'data', 'secrets', 'secret.txt'), 'the operator\'s own\n');
    peer = await ForeignPeer.connectedTo(provider);
  }, 60_000);
  afterAll(async () => {
    await peer?.stop();
    await provider?.stop();
  });

  async function ask(be: string, payload: unknown): Promise<any> {
    const cont = `/private/r/${randomUUID()}`;
    await peer.send(peer.envelope(provider, { be: `/dms/deployment/${be}`, inbox: 'deployment', cont, payload }));
    return decodePayload((await peer.waitReply(cont, 10_000)).msg);
  }

  for (const writable of [false, true]) {
    it(`refuses to start one that mounts a volume ${writable ? 'writable' : 'read-only'}, naming it, and runs nothing`, async () => {
      const id = randomUUID();
      const resources = { cpu: { cores: 0.25 }, memory: { size: 64 * MiB }, storage: { size: 0 } };
      const bid = await ask('bid', { jobs: [{ job_id: id, resources, executor: 'docker' }] });
      expect(bid.answers?.[0], JSON.stringify(bid)).toMatchObject({ job_id: id });
      expect(await ask('reserve', { job_id: id, resources, lease_ms: 10_000 })).toHaveProperty('until');
      const started = await ask('start', {
        job: {
          id, name: 'take', image: TEST_IMAGE, executor: 'docker', resources,
          command: 'cat /v/secret.txt; echo taken > /v/taken',
          inputs: [{ source: 'volume:secrets', path: '/v', ...(writable ? { writable: true } : {}) }],
        },
      });
      expect(started).toEqual({ kind: 'forbidden', error: "inputs: volume:secrets is this node's own: a job of another node's cannot mount a volume" });
      // Nothing of it runs here; the lease stays the requester's until it lets it go, as after any refused start.
      expect((await fetch(`${provider.url}/api/v1/jobs/${id}`)).status).toBe(404);
      expect(await ask('release', { job_id: id })).toEqual({});
      await waitFor('the share free again', async () => (await (await fetch(`${provider.url}/api/v1/resources/usage`)).json()).allocated.cpu.cores === 0, { timeoutMs: 10_000 });
      expect(existsSync(join(provider.home, 'data', 'volumes', 'data', 'secrets', 'taken'))).toBe(false);
    });
  }
});
