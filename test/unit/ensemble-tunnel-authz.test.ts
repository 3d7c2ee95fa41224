/**
 * The provider's check of a tunnel (daemon/tunnels.ts authorizer) for a part of an ensemble: the
 * job's requester, as before, or a node the requester's unexpired grant names as a host of a
 * part. A stranger, an expired or revoked grant, a job that is no part, an undeclared port: refused.
 */
import { randomUUID } from 'node:crypto';
import type Docker from 'dockerode';
import { describe, expect, it } from 'vitest';
import { GrantRegistry } from '../../actors/ensembles/grants.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { authorizer } from '../../daemon/tunnels.js';
import type { Storage } from '../../storage/index.js';
import { jobOf } from '../executors/helpers.js';

const HERE = 'provider-p';
const R = 'requester-r';
const MEMBER = 'member-m';
const STRANGER = 'stranger-s';

const docker = { getContainer: () => ({ inspect: async () => ({ NetworkSettings: { Networks: { ens: { IPAddress: '10.9.0.2' } } } }) }) } as unknown as Docker;

function setUp(job: Partial<Job> = {}) {
  let t = 1_000_000;
  const grants = new GrantRegistry(undefined, () => t);
  const ensemble = randomUUID();
  const server: Job = { ...jobOf({ executor: 'docker', image: 'x', ports: [8080], requester: R, ensemble, part: 'server' }), status: 'running', container_id: 'c1', node: HERE, ...job };
  const storage = { jobs: { get: async (id: string) => (id === server.id ? server : null) } } as unknown as Storage;
  const check = authorizer(HERE, storage, docker, grants);
  const grant = (expiresIn = 60_000) =>
    grants.put(R, { ensemble, version: 1, expires_at: t + expiresIn, parts: [{ part: 'server', job_id: server.id, node: HERE, ports: [8080] }, { part: 'client', job_id: randomUUID(), node: MEMBER, ports: [] }] });
  return { server, ensemble, grants, check, grant, advance: (ms: number) => (t += ms) };
}

describe('tunnels to a part of an ensemble', () => {
  it('let a node the requester granted as a host of a part through to a declared port, as the requester itself', async () => {
    const { server, check, grant } = setUp();
    grant();
    expect(await check(MEMBER, { job_id: server.id, port: 8080 })).toEqual({ host: '10.9.0.2', port: 8080 });
    expect(await check(R, { job_id: server.id, port: 8080 })).toEqual({ host: '10.9.0.2', port: 8080 });
  });

  it('refuse a stranger, a member for an undeclared port, and everyone but the requester without a grant', async () => {
    const { server, check, grant } = setUp();
    await expect(check(MEMBER, { job_id: server.id, port: 8080 })).rejects.toThrow(/not a job peer member-m placed on this node, nor a host of its ensemble/);
    grant();
    await expect(check(STRANGER, { job_id: server.id, port: 8080 })).rejects.toThrow(/not a job peer stranger-s placed/);
    await expect(check(MEMBER, { job_id: server.id, port: 9090 })).rejects.toThrow(/does not declare port 9090/);
  });

  it('refuse a member once the grant expired or was revoked', async () => {
    const { server, ensemble, check, grant, grants, advance } = setUp();
    grant(1_000);
    expect(await check(MEMBER, { job_id: server.id, port: 8080 })).toBeTruthy();
    advance(1_000);
    await expect(check(MEMBER, { job_id: server.id, port: 8080 })).rejects.toThrow(/nor a host of its ensemble/);
    grant();
    grants.revoke(R, ensemble);
    await expect(check(MEMBER, { job_id: server.id, port: 8080 })).rejects.toThrow(/nor a host of its ensemble/);
  });

  it('refuse a member for a job that is no part, even with a grant naming it', async () => {
    const { server, check, grant } = setUp({ ensemble: null, part: null });
    grant();
    await expect(check(MEMBER, { job_id: server.id, port: 8080 })).rejects.toThrow(/not a job peer member-m placed/);
  });

  it("read the grant of this node's own ensembles for a part it runs as its own (requester null)", async () => {
    const t = 1_000_000;
    const grants = new GrantRegistry(undefined, () => t);
    const ensemble = randomUUID();
    const own: Job = { ...jobOf({ executor: 'docker', image: 'x', ports: [8080], requester: null, ensemble, part: 'server' }), status: 'running', container_id: 'c1', node: null };
    const storage = { jobs: { get: async () => own } } as unknown as Storage;
    const check = authorizer(HERE, storage, docker, grants);
    await expect(check(MEMBER, { job_id: own.id, port: 8080 })).rejects.toThrow(/forbidden|not a job/);
    grants.put(HERE, { ensemble, version: 1, expires_at: t + 60_000, parts: [{ part: 'server', job_id: own.id, node: HERE, ports: [8080] }, { part: 'client', job_id: randomUUID(), node: MEMBER, ports: [] }] });
    expect(await check(MEMBER, { job_id: own.id, port: 8080 })).toEqual({ host: '10.9.0.2', port: 8080 });
    // A grant by someone else for the same ensemble id opens nothing.
    grants.put(STRANGER, { ensemble, version: 5, expires_at: t + 60_000, parts: [{ part: 'client', job_id: randomUUID(), node: STRANGER, ports: [] }] });
    await expect(check(STRANGER, { job_id: own.id, port: 8080 })).rejects.toThrow(/not a job peer stranger-s placed/);
  });
});
