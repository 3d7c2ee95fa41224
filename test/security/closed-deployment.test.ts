/**
 * `capabilities.open_deployment: false` on a node in process: its deployment behaviors are
 * then for holders of a `/dms/deployment` grant only. A stranger's bid request is refused with
 * the capability it lacks, the same stranger holding a grant from the node's operator is
 * answered, and a node with the default (open) answers the stranger without one.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeTokenList, issueToken } from '../../runtime/capability/token.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { type StrangerScene, strangerBesideTwoNodes } from '../helpers/peer.js';

let scene: StrangerScene<LocalNode> | undefined;
const resources = { cpu: { cores: 0.5 }, memory: { size: 64 * 1024 * 1024 }, storage: { size: 0 } };

beforeAll(async () => {
  // a closed, b open as by default; both offer a share, so only the capability decides.
  scene = await strangerBesideTwoNodes({ start: startLocalNode, node: (i) => ({ config: i === 0 ? { capabilities: { open_deployment: false } } : {} }) });
  for (const node of [scene.a, scene.b]) {
    const res = await fetch(`${node.url}/api/v1/device/config`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ onboarded: { cpu: 1, memory: '1GiB' } }) });
    expect(res.status).toBe(200);
  }
  await scene.peer.connect(scene.b);
}, 120_000);
afterAll(() => scene?.stop());

/** The stranger asks `node` to bid for a job, carrying `cap` if given; the reply's payload. */
async function askBid(node: LocalNode, cap?: Uint8Array): Promise<any> {
  const { peer } = scene!;
  const job_id = randomUUID();
  const cont = `/private/r/${randomUUID()}`;
  await peer.send(peer.envelope(node, { be: '/dms/deployment/bid', inbox: 'deployment', cont, cap, payload: { jobs: [{ job_id, resources, executor: 'null' }] } }));
  return { job_id, reply: decodePayload((await peer.waitReply(cont, 15_000)).msg) };
}

describe('capabilities.open_deployment: false', { timeout: 45_000 }, () => {
  it('refuses a stranger without a grant, naming the capability', async () => {
    const { reply } = await askBid(scene!.a);
    expect(reply).toEqual({ kind: 'forbidden', error: `capability /dms/deployment not granted to ${scene!.peer.key.did}` });
  });

  it('answers the same stranger once the operator grants it /dms/deployment', async () => {
    const { a, peer } = scene!;
    const grant = issueToken(a.operator(), { act: 'invoke', aud: peer.key.did, cap: ['/dms/deployment'], exp: nowNs() + msToNs(60_000) });
    const { job_id, reply } = await askBid(a, encodeTokenList([grant]));
    expect(reply).toMatchObject({ node: a.peerId, answers: [{ job_id }] });
    expect(reply.answers[0]).not.toHaveProperty('declined');
  });

  it('control: a node left open answers the stranger without a grant', async () => {
    const { job_id, reply } = await askBid(scene!.b);
    expect(reply).toMatchObject({ node: scene!.b.peerId, answers: [{ job_id }] });
    expect(reply.answers[0]).not.toHaveProperty('declined');
  });
});
