/**
 * The container an ensemble's part becomes (actors/executors/container-spec.ts): its ensemble's
 * networks only, whoever's job it is and whatever `jobs.allow_network` says, the other parts'
 * names in its hosts file, and labels a restarted node finds it by.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { containerSpec, DEFAULT_CONTAINER_LIMITS } from '../../actors/executors/container-spec.js';
import { jobOf } from '../executors/helpers.js';

const part = { networks: ['dms-ens-e-1234abcd', 'dms-ens-e-1234abcd-1'], extraHosts: ['server.internal:172.18.0.1', 'db.internal:172.19.0.1'] };

describe("an ensemble part's container", () => {
  it('joins its first ensemble network, with the other parts as extra hosts and its ensemble and part as labels', () => {
    const ensemble = randomUUID();
    const job = jobOf({ executor: 'docker', requester: '12D3KooWStranger', ensemble, part: 'client', ports: [8080] });
    const spec = containerSpec(job, 'p', DEFAULT_CONTAINER_LIMITS, [], part);
    expect(spec.HostConfig).toMatchObject({ NetworkMode: 'dms-ens-e-1234abcd', ExtraHosts: part.extraHosts, CapDrop: ['ALL'] });
    expect(spec.Labels).toMatchObject({ 'dms.ensemble': ensemble, 'dms.part': 'client' });
  });

  it("is kept to its ensemble's network when it is this node's own job, even with jobs.allow_network", () => {
    const job = jobOf({ executor: 'docker', requester: null, ensemble: randomUUID(), part: 'server' });
    expect(containerSpec(job, 'p', { ...DEFAULT_CONTAINER_LIMITS, allowNetwork: true }, [], part).HostConfig!.NetworkMode).toBe('dms-ens-e-1234abcd');
  });

  it('is unchanged for a job that is no part', () => {
    const job = jobOf({ executor: 'docker', requester: '12D3KooWStranger' });
    const spec = containerSpec(job, 'p');
    expect(spec.HostConfig).toMatchObject({ NetworkMode: 'none' });
    expect(spec.HostConfig!.ExtraHosts).toBeUndefined();
    expect(spec.Labels).not.toHaveProperty('dms.ensemble');
  });
});
