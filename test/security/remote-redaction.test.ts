// Job environments are secrets (issue 8, item 13): a remote caller the operator granted
// /dms/job/status and /dms/job/list sees the job, but "[redacted]" for every environment
// value. Against a real node process, the caller a foreign libp2p peer with a key of its own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Job } from '../../behaviors/jobs/schema.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { waitFor } from '../helpers/network.js';
import { type NodeProcess, runCli, startNode } from '../helpers/node.js';
import { type ForeignPeer, type StrangerAtNodeScene, strangerBesideANode } from '../helpers/peer.js';
import { nullJob, Rest } from '../jobs/helpers.js';

let scene: StrangerAtNodeScene | undefined;
let node: NodeProcess;
let peer: ForeignPeer;

beforeAll(async () => void ({ node, peer } = scene = await strangerBesideANode(() => startNode({ config: { jobs: { stop_grace_s: 1 } } }))), 60_000);
afterAll(() => scene?.stop());

let asked = 0;
/** The peer's call of a job behavior on the node, answered at a reply inbox of its own. */
async function call(be: string, payload: unknown): Promise<any> {
  const cont = `/private/r/${++asked}`;
  await peer.send(peer.envelope(node, { be, inbox: 'orchestrator', cont, payload }));
  return decodePayload((await peer.waitReply(cont)).msg);
}

describe('a remote caller granted the job read behaviors', () => {
  it('gets job status and lists with every environment value "[redacted]"', { timeout: 90_000 }, async () => {
    const rest = new Rest(node.url);
    const base = nullJob({ stdout: 'x', durationMs: 60_000 });
    const job = await rest.submit({ ...base, environment: { ...base.environment, API_TOKEN: 's3cret' } });
    // The operator, locally, sees the values.
    expect(job.environment.API_TOKEN).toBe('s3cret');

    // Refused before the grant: the reply is a refusal, not the job.
    expect(await call('/dms/job/status', { id: job.id })).toMatchObject({ kind: 'forbidden' });

    const grant = await runCli(['--home', node.home, 'cap', 'grant', peer.key.did, '--cap', '/dms/job/status', '--cap', '/dms/job/list', '--expiry', '1h']);
    expect(grant.code, grant.stderr).toBe(0);
    const status: Job = await waitFor('the grant to take effect', async () => {
      const r = await call('/dms/job/status', { id: job.id });
      return r.kind === 'forbidden' ? undefined : r;
    }, { timeoutMs: 30_000 });
    expect(status.id).toBe(job.id);
    expect(status.environment).toEqual({ DMS_NULL_STDOUT: '[redacted]', DMS_NULL_DURATION_MS: '[redacted]', API_TOKEN: '[redacted]' });

    const list = await call('/dms/job/list', { limit: 1000 });
    const listed = (list.jobs as Job[]).find((j) => j.id === job.id)!;
    expect(listed.environment.API_TOKEN).toBe('[redacted]');
    expect(JSON.stringify(list)).not.toContain('s3cret');
    expect(JSON.stringify(status)).not.toContain('s3cret');

    await rest.delete(`/api/v1/jobs/${job.id}`);
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });
});
