/**
 * A volume a job has not finished with (README "Job outputs", Volumes): deleting it while a
 * pending or running job mounts it is refused with 409 naming the job (it was deleted, and the
 * running job's writes went on into a directory nobody listed or counted, while a new volume of
 * that name began empty), and so is a snapshot while such a job mounts it writable (files it
 * removed meanwhile failed the snapshot with 500). Once the job ends, both work. In process: the
 * node's REST, resource manager and job store, with the null executor.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalNode } from '../helpers/local-node.js';
import { type JobNodeScene, jobNodeScene, nullJob, type Rest, startLocalJobNode, until } from '../jobs/helpers.js';

describe('a volume a job has not finished with', { timeout: 60_000 }, () => {
  let scene: JobNodeScene<LocalNode> | undefined;
  let rest: Rest;
  beforeAll(async () => void ({ rest } = scene = await jobNodeScene(startLocalJobNode)));
  afterAll(() => scene?.stop());

  /** A null job running for a minute that mounts volume `name`. */
  const mounting = async (name: string, writable: boolean) => {
    const spec = { ...nullJob({ name: `uses-${name}`, durationMs: 60_000 }), inputs: [{ source: `volume:${name}`, path: '/v', ...(writable ? { writable } : {}) }] };
    const made = await rest.post('/api/v1/jobs', spec);
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    const id = made.body.id as string;
    await until(`job ${id} running`, async () => (await rest.get(`/api/v1/jobs/${id}`)).body.status === 'running');
    return id;
  };

  it('refuses to delete a volume a running job mounts, naming it, and deletes it once the job ended', async () => {
    expect((await rest.post('/api/v1/volumes', { name: 'busy', size: '1MiB' })).status).toBe(201);
    const id = await mounting('busy', false);
    const refused = await rest.delete('/api/v1/volumes/busy');
    expect(refused.status).toBe(409);
    expect(refused.body.error).toBe(`volume busy: cannot delete it while job ${id} (running) mounts it; cancel the job or wait until it ends`);
    expect((await rest.get('/api/v1/volumes')).body.map((v: { name: string }) => v.name)).toContain('busy');
    expect((await rest.delete(`/api/v1/jobs/${id}`)).status).toBe(200);
    expect((await rest.delete('/api/v1/volumes/busy')).status).toBe(200);
  });

  it('refuses a snapshot while a job mounts the volume writable; a reader does not stop it', async () => {
    expect((await rest.post('/api/v1/volumes', { name: 'live', size: '1MiB' })).status).toBe(201);
    const reader = await mounting('live', false);
    const writer = await mounting('live', true);
    const refused = await rest.post('/api/v1/volumes/live/snapshot', {});
    expect(refused.status).toBe(409);
    expect(refused.body.error).toBe(`volume live: cannot snapshot it while job ${writer} (running) mounts it writable; cancel the job or wait until it ends`);
    expect((await rest.delete(`/api/v1/jobs/${writer}`)).status).toBe(200);
    // An empty volume holds nothing to store (400); what matters is that it is no longer refused.
    expect((await rest.post('/api/v1/volumes/live/snapshot', {})).status).not.toBe(409);
    expect((await rest.delete(`/api/v1/jobs/${reader}`)).status).toBe(200);
  });
});
