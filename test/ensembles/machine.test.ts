/**
 * The ensemble machine (actors/ensembles/machine.ts) alone: its effects replaced by recorders,
 * its parts' reports sent by hand, so each rule is seen without a node, an executor or a network.
 */
import { describe, expect, it } from 'vitest';
import { createActor, fromPromise, waitFor } from 'xstate';
import type { PartChanged } from '../../behaviors/ensembles/schema.js';
import { ensembleMachine, type PartCtx, type PlaceRoundInput } from '../../actors/ensembles/machine.js';

const ID = '00000000-0000-4000-8000-00000000000e';
const jobOf = (part: string, n = 0) => `00000000-0000-4000-8000-${String(n).padStart(4, '0')}${part.padEnd(8, '0').slice(0, 8).replace(/[^0-9a-f]/g, 'a')}`;

function part(name: string, extra: Partial<PartCtx> = {}): PartCtx {
  return { part: name, kind: 'task', optional: false, restartOn: 'never', maxRestarts: 3, restarts: 0, jobId: jobOf(name), status: 'pending', node: null, assigned: false, ports: [], exclude: [], error: null, ...extra };
}

/** A machine whose rounds answer with `rounds` in turn (a map of part to node, or an error text). */
function harness(parts: PartCtx[], rounds: (Record<string, string> | string)[]) {
  const placed: string[][] = [];
  const stopped: string[] = [];
  const restarted: string[] = [];
  const cancelled: { jobId: string; reason: string }[] = [];
  let revoked = 0;
  const machine = ensembleMachine.provide({
    actors: {
      place: fromPromise(async ({ input }: { input: PlaceRoundInput }) => {
        placed.push(input.parts.map((p) => p.part).sort());
        const next = rounds.shift();
        if (next === undefined || typeof next === 'string') throw new Error(next ?? 'no more rounds');
        return next;
      }),
    },
    actions: {
      stopParts: ({ context }) => stopped.push(...Object.values(context.parts).filter((p) => p.status !== 'completed' && p.status !== 'failed').map((p) => p.part)),
      restart: (_, { part }) => restarted.push(part),
      cancelPart: (_, params) => cancelled.push(params),
      revoke: () => void revoked++,
    },
  });
  const actor = createActor(machine, { input: { id: ID, parts: Object.fromEntries(parts.map((p) => [p.part, p])), backoff: { firstMs: 10, maxMs: 40 } } });
  actor.start();
  const report = (name: string, status: PartChanged['status'], node: string | null, extra: Partial<PartChanged> = {}) =>
    actor.send({ type: 'part', change: { job_id: actor.getSnapshot().context.parts[name]!.jobId!, ensemble: ID, part: name, status, node, error: null, exclude: [], ...extra } });
  return { actor, placed, stopped, restarted, cancelled, report, revoked: () => revoked };
}

describe('ensemble machine', () => {
  it('places every part in one round, and is running once every part runs', async () => {
    const h = harness([part('server', { kind: 'service' }), part('client')], [{ server: 'B', client: 'C' }]);
    await waitFor(h.actor, (s) => s.matches('active') && s.context.parts.server!.assigned);
    expect(h.placed).toEqual([['client', 'server']]);
    expect(h.actor.getSnapshot().context.parts.client).toMatchObject({ node: 'C', assigned: true });
    // Each part is a child machine of the ensemble's, named <ensemble>/<part>: its lane on the dev page.
    const child = (name: string) => (h.actor.getSnapshot().children as Record<string, { getSnapshot(): { value: unknown } }>)[`${ID}/${name}`]!.getSnapshot().value;
    expect(child('server')).toBe('assigned');
    h.report('server', 'running', 'B');
    expect(child('server')).toBe('running');
    expect(child('client')).toBe('assigned');
    expect(h.actor.getSnapshot().context.ran).toBe(false);
    h.report('client', 'running', 'C');
    expect(h.actor.getSnapshot().context.ran).toBe(true);
    // The task completes: the service is stopped, and the ensemble completes once it ended.
    h.report('client', 'completed', 'C');
    expect(h.actor.getSnapshot().value).toBe('stopping');
    expect(h.stopped).toEqual(['server']);
    h.report('server', 'failed', 'B', { error: 'cancelled: its ensemble completed' });
    expect(h.actor.getSnapshot().value).toBe('completed');
    expect(h.revoked()).toBe(1);
  });

  it('a round that could not reserve every part waits a back-off, then places them all again', async () => {
    const h = harness([part('a'), part('b')], ['part b: nobody can hold it', 'part b: still nobody', { a: 'X', b: 'Y' }]);
    await waitFor(h.actor, (s) => s.matches('waiting'));
    expect(h.actor.getSnapshot().context.reason).toBe('waiting for nodes: part b: nobody can hold it');
    await waitFor(h.actor, (s) => s.matches('active') && s.context.parts.b!.assigned, { timeout: 2_000 });
    expect(h.placed).toEqual([['a', 'b'], ['a', 'b'], ['a', 'b']]);
  });

  it('before it ran, a part whose start was refused lets go of every other part, and the next round places them all', async () => {
    const h = harness([part('server', { kind: 'service' }), part('client'), part('db', { kind: 'service' }), part('init')], [
      { server: 'B', client: 'C', db: 'C', init: 'B' },
      { server: 'C', client: 'C', db: 'B' },
    ]);
    await waitFor(h.actor, (s) => s.context.parts.server!.assigned);
    const [serverJob, dbJob] = [jobOf('server'), jobOf('db')];
    h.report('server', 'running', 'B');
    h.report('init', 'running', 'B');
    h.report('init', 'completed', 'B');
    // db started; client's start was refused by C: back to pending, C excluded.
    h.report('db', 'running', 'C');
    h.report('client', 'pending', null, { exclude: ['C'], error: 'image not found' });
    const reason = 'its ensemble is placed again: part client did not start on node C: image not found';
    // Every part holding a node is let go (its job cancelled) and given a new job; the task that
    // completed stays completed, and the refused part keeps its job and exclusions.
    expect(h.cancelled.sort((a, b) => a.jobId.localeCompare(b.jobId))).toEqual([{ jobId: dbJob, reason }, { jobId: serverJob, reason }].sort((a, b) => a.jobId.localeCompare(b.jobId)));
    expect(h.restarted.sort()).toEqual(['db', 'server']);
    expect(h.actor.getSnapshot().context.reason).toBe('placing every part again: part client did not start on node C: image not found');
    expect(h.actor.getSnapshot().context.parts.init!.status).toBe('completed');
    expect(h.actor.getSnapshot().context.parts.client).toMatchObject({ jobId: jobOf('client'), status: 'pending', exclude: ['C'] });
    // No round while a new job is being made: the round waits for both, then places all three.
    expect(h.placed).toHaveLength(1);
    h.actor.send({ type: 'restarted', part: 'server', jobId: jobOf('server', 1) });
    expect(h.placed).toHaveLength(1);
    // The old jobs' reports change nothing.
    h.report('server', 'running', 'B', { job_id: serverJob });
    h.actor.send({ type: 'restarted', part: 'db', jobId: jobOf('db', 1) });
    await waitFor(h.actor, (s) => s.context.parts.db!.node === 'B' && s.context.parts.db!.assigned);
    expect(h.placed[1]).toEqual(['client', 'db', 'server']);
    expect(h.actor.getSnapshot().context.parts.restarts).toBeUndefined();
    expect(Object.values(h.actor.getSnapshot().context.parts).map((p) => p.restarts)).toEqual([0, 0, 0, 0]);
  });

  it('a part whose node was lost is placed again alone, with the others running on', async () => {
    const h = harness([part('server', { kind: 'service' }), part('client')], [{ server: 'B', client: 'C' }, { server: 'C' }]);
    await waitFor(h.actor, (s) => s.context.parts.server!.assigned);
    h.report('server', 'running', 'B');
    h.report('client', 'running', 'C');
    h.report('server', 'pending', null, { exclude: ['B'] });
    await waitFor(h.actor, (s) => s.context.parts.server!.node === 'C');
    expect(h.placed[1]).toEqual(['server']);
    expect(h.actor.getSnapshot().context.parts.server!.exclude).toEqual(['B']);
  });

  it('a failed part with restarts left gets a new job; without, the ensemble fails and stops the rest', async () => {
    const h = harness([part('w', { restartOn: 'failure', maxRestarts: 1 }), part('s', { kind: 'service' })], [{ w: 'A', s: 'A' }, { w: 'A' }]);
    await waitFor(h.actor, (s) => s.context.parts.w!.assigned);
    h.report('w', 'running', 'A');
    h.report('s', 'running', 'A');
    h.report('w', 'failed', 'A', { error: 'exited with code 1' });
    expect(h.restarted).toEqual(['w']);
    expect((h.actor.getSnapshot().children as Record<string, { getSnapshot(): { value: unknown } }>)[`${ID}/w`]!.getSnapshot().value).toBe('restarting');
    expect(h.actor.getSnapshot().context.parts.w).toMatchObject({ status: 'pending', jobId: null, restarts: 1 });
    h.actor.send({ type: 'restarted', part: 'w', jobId: jobOf('w', 1) });
    await waitFor(h.actor, (s) => s.context.parts.w!.assigned);
    h.report('w', 'failed', 'A', { error: 'exited with code 1' });
    expect(h.actor.getSnapshot().value).toBe('stopping');
    expect(h.actor.getSnapshot().context.reason).toBe('part w failed after 1 restart(s): exited with code 1');
    expect(h.stopped).toEqual(['s']);
  });

  it('a part found failed with restarts left when the machine is rebuilt (node recovery) gets a new job', async () => {
    // Rebuilt from stored rows after its job failed at the node's start-up: no report comes for it.
    const failed = { restartOn: 'failure' as const, maxRestarts: 2, status: 'failed' as const, node: 'A', error: 'the null executor keeps no run across a restart' };
    const h = harness([part('w', failed), part('s', { kind: 'service', status: 'running', node: 'A' })], [{ w: 'A' }]);
    expect(h.restarted).toEqual(['w']);
    expect(h.actor.getSnapshot().value).toBe('active');
    expect(h.actor.getSnapshot().context.parts.w).toMatchObject({ status: 'pending', jobId: null, restarts: 1 });
    // The failure's report, if it still comes, is about the old job and changes nothing.
    h.actor.send({ type: 'part', change: { job_id: jobOf('w'), ensemble: ID, part: 'w', status: 'failed', node: 'A', error: null, exclude: [] } });
    expect(h.restarted).toEqual(['w']);
    h.actor.send({ type: 'restarted', part: 'w', jobId: jobOf('w', 1) });
    await waitFor(h.actor, (s) => s.context.parts.w!.assigned);
    expect(h.placed).toEqual([['w']]);
    // Past its restarts it fails the ensemble as it would have while the node ran.
    const spent = harness([part('w', { ...failed, restarts: 2 }), part('s', { kind: 'service', status: 'running', node: 'A' })], []);
    expect(spent.restarted).toEqual([]);
    expect(spent.actor.getSnapshot().value).toBe('stopping');
    expect(spent.actor.getSnapshot().context.reason).toBe('part w failed after 2 restart(s): the null executor keeps no run across a restart');
  });

  it('a part that fails while another waits to be placed again is restarted once the ensemble is active', async () => {
    const h = harness([part('w', { restartOn: 'failure', maxRestarts: 1, status: 'running', node: 'A' }), part('s', { kind: 'service', status: 'running', node: 'A' })], ['nobody', { s: 'A' }]);
    // s's node is lost: s alone is placed again, finds no node at first, and w fails in the back-off.
    h.report('s', 'pending', null);
    await waitFor(h.actor, (s) => s.matches('waiting'));
    h.report('w', 'failed', 'A', { error: 'exited with code 1' });
    await waitFor(h.actor, (s) => s.context.parts.w!.restarts === 1, { timeout: 2_000 });
    expect(h.restarted).toEqual(['w']);
  });

  it('a part whose new job cannot be made fails the ensemble, naming why', async () => {
    const h = harness([part('w', { restartOn: 'failure', maxRestarts: 2 }), part('s', { kind: 'service' })], [{ w: 'A', s: 'A' }]);
    await waitFor(h.actor, (s) => s.context.parts.w!.assigned);
    h.report('w', 'running', 'A');
    h.report('s', 'running', 'A');
    h.report('w', 'failed', 'A', { error: 'exited with code 1' });
    expect(h.restarted).toEqual(['w']);
    h.actor.send({ type: 'restart_failed', part: 'w', reason: 'the node is stopping' });
    expect(h.actor.getSnapshot().value).toBe('stopping');
    expect(h.actor.getSnapshot().context.reason).toBe('part w failed after 1 restart(s): could not be started again: the node is stopping');
    expect((h.actor.getSnapshot().children as Record<string, { getSnapshot(): { value: unknown } }>)[`${ID}/w`]!.getSnapshot().value).toBe('failed');
    h.report('s', 'failed', 'A');
    expect(h.actor.getSnapshot().value).toBe('failed');
  });

  it('an optional part that fails does not fail the ensemble', async () => {
    const h = harness([part('main'), part('extra', { optional: true })], [{ main: 'A', extra: 'A' }]);
    await waitFor(h.actor, (s) => s.context.parts.main!.assigned);
    h.report('extra', 'failed', 'A', { error: 'exited with code 2' });
    expect(h.actor.getSnapshot().value).toBe('active');
    h.report('main', 'running', 'A');
    h.report('main', 'completed', 'A');
    expect(h.actor.getSnapshot().value).toBe('completed');
  });

  it('a cancel stops every part and the ensemble fails with the reason, also while waiting', async () => {
    const h = harness([part('a'), part('b')], ['nobody']);
    await waitFor(h.actor, (s) => s.matches('waiting'));
    h.actor.send({ type: 'cancel', reason: 'cancelled' });
    expect(h.stopped.sort()).toEqual(['a', 'b']);
    h.report('a', 'failed', null);
    h.report('b', 'failed', null);
    expect(h.actor.getSnapshot().value).toBe('failed');
    expect(h.actor.getSnapshot().context.reason).toBe('cancelled');
  });
});
