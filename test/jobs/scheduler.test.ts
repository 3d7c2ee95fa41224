// The local scheduler against a resource manager that is only its ledger (the real arithmetic):
// which waiting jobs a pass asks about once resources are freed, and what their machines hear.
import { describe, expect, it, vi } from 'vitest';
import type { ReserveReply } from '../../behaviors/jobs/resources.js';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import type { JobRun } from '../../actors/orchestrator/run.js';
import { Scheduler } from '../../actors/orchestrator/scheduler.js';
import { ResourceLedger } from '../../actors/resources/ledger.js';
import { silentLogger } from '../../runtime/log.js';

const MiB = 1024 * 1024;
const cores = (n: number): ResourceSpec => ({ cpu: { cores: n }, memory: { size: MiB }, storage: { size: 0 } });
/** A share of `n` cores with room in memory for every job of these tests. */
const share = (n: number): ResourceSpec => ({ ...cores(n), memory: { size: 1024 * MiB } });

/** What the manager says with each reply: free now, the whole share, and the ledger's version. */
const freeNow = (ledger: ResourceLedger) => ({ free: ledger.free(), offering: ledger.offering, version: ledger.version });

function setup(offered: number) {
  const ledger = new ResourceLedger(share(offered));
  const asked: string[][] = [];
  const granted: string[] = [];
  const refused: Array<[string, string]> = [];
  const scheduler = new Scheduler(
    {
      async reserve(jobs): Promise<ReserveReply> {
        asked.push(jobs.map((j) => j.job_id));
        const reply: ReserveReply = { granted: [], refused: [], ...freeNow(ledger) };
        for (const { job_id, resources } of jobs) {
          const reason = ledger.shortfall(resources);
          if (reason) reply.refused.push({ job_id, reason });
          else {
            ledger.reserve(job_id, resources);
            reply.granted.push(job_id);
          }
        }
        return { ...reply, ...freeNow(ledger) };
      },
      granted: (run) => granted.push(run.id),
      unwanted: () => undefined,
      refused: (run, reason) => refused.push([run.id, reason]),
    },
    silentLogger(),
  );
  const add = (id: string, n: number) => scheduler.add({ id, job: { resources: cores(n) } } as unknown as JobRun);
  /** Frees what `id` holds, as the orchestrator's release does: the manager's reply says what is free now. */
  const release = (id: string) => {
    ledger.release(id);
    scheduler.freed(freeNow(ledger));
  };
  const passes = async (n: number) => vi.waitFor(() => expect(asked).toHaveLength(n), { timeout: 2_000, interval: 2 });
  scheduler.resume();
  return { ledger, scheduler, asked, granted, refused, add, release, passes };
}

describe('the local scheduler', () => {
  it('asks about one waiting job, not every one, when a job frees the room of one', async () => {
    const s = setup(4);
    for (let i = 0; i < 100; i++) s.add(`job-${i}`, 1);
    await s.passes(1);
    expect(s.granted).toEqual(['job-0', 'job-1', 'job-2', 'job-3']);
    expect(s.refused).toHaveLength(96);

    s.release('job-1');
    await s.passes(2);
    expect(s.asked[1]).toEqual(['job-4']);
    expect(s.granted.at(-1)).toBe('job-4');

    // Two freed at once: the two oldest waiting are asked, in order.
    s.ledger.release('job-0');
    s.release('job-2');
    await s.passes(3);
    expect(s.asked[2]).toEqual(['job-5', 'job-6']);
    // Nobody refused again was told again.
    expect(s.refused).toHaveLength(96);
  });

  it('asks a smaller job behind a larger one that still does not fit', async () => {
    const s = setup(2);
    s.add('a', 2);
    s.add('big', 2);
    s.add('small', 1);
    await s.passes(1);
    expect(s.granted).toEqual(['a']);
    // a ends and something else takes half its room (a lease for another node's job).
    s.ledger.release('a');
    s.ledger.reserve('other', cores(1));
    s.scheduler.freed(freeNow(s.ledger));
    await s.passes(2);
    // One core free: the two-core job is not asked, the one-core job behind it is.
    expect(s.asked[1]).toEqual(['small']);
  });

  it('asks every waiting job when the manager did not say what is free', async () => {
    const s = setup(1);
    for (let i = 0; i < 5; i++) s.add(`job-${i}`, 1);
    await s.passes(1);
    s.ledger.offer(share(3));
    s.scheduler.freed({ version: s.ledger.version });
    await s.passes(2);
    expect(s.asked[1]).toEqual(['job-1', 'job-2', 'job-3', 'job-4']);
    expect(s.granted).toEqual(['job-0', 'job-1', 'job-2']);
  });

  it('ignores a word on what is free older than the one it has', async () => {
    const s = setup(1);
    for (let i = 0; i < 4; i++) s.add(`job-${i}`, 1);
    await s.passes(1);
    const stale = freeNow(s.ledger);
    s.ledger.offer(share(3));
    s.scheduler.freed(freeNow(s.ledger));
    // A reply read before the share grew arrives after: it must not shrink what may be asked.
    s.scheduler.freed(stale);
    await s.passes(2);
    expect(s.asked[1]).toEqual(['job-1', 'job-2']);
  });

  it('a schedule sent by hand with a version far ahead leaves every waiting job asked, never none', async () => {
    const s = setup(1);
    for (let i = 0; i < 4; i++) s.add(`job-${i}`, 1);
    await s.passes(1);
    s.scheduler.freed({ version: Number.MAX_SAFE_INTEGER });
    await s.passes(2);
    // The manager's later replies are older by that version and ignored: the scheduler keeps asking everyone.
    s.release('job-0');
    await s.passes(3);
    expect(s.asked[2]).toEqual(['job-1', 'job-2', 'job-3']);
    expect(s.granted).toEqual(['job-0', 'job-1']);
  });

  it('tells a job refused again only when the reason changed', async () => {
    const s = setup(1);
    s.add('a', 1);
    s.add('b', 2);
    await s.passes(1);
    expect(s.refused.map(([id]) => id)).toEqual(['b']);
    s.scheduler.freed({ version: s.ledger.version });
    await s.passes(2);
    expect(s.refused).toHaveLength(1);
    // One core free now: too little for b, so freeing it asks nobody.
    s.release('a');
    await new Promise((r) => setTimeout(r, 20));
    expect(s.asked).toHaveLength(2);
    // Asked again, b is refused for another reason (one core free, not none): it is told.
    s.scheduler.freed({ version: s.ledger.version });
    await s.passes(3);
    expect(s.refused).toHaveLength(2);
    expect(s.refused[1][1]).not.toBe(s.refused[0][1]);
  });

  it('says a job asking more than the whole share could never be reserved here, once the manager said what the share is', async () => {
    const s = setup(2);
    // Nothing heard from the manager yet: not known, so the job is asked about here first.
    expect(s.scheduler.beyondShare(cores(3))).toBeNull();
    s.add('a', 1);
    await s.passes(1);
    expect(s.scheduler.beyondShare(cores(3))).toMatch(/^not enough cpu/);
    // What merely does not fit now (one core of two is held) is not beyond the share.
    expect(s.scheduler.beyondShare(cores(2))).toBeNull();
    // A word without the share (it may have grown): not known again until the next reply.
    s.ledger.offer(share(4));
    s.scheduler.freed({ version: s.ledger.version });
    expect(s.scheduler.beyondShare(cores(3))).toBeNull();
    s.release('a');
    expect(s.scheduler.beyondShare(cores(3))).toBeNull();
    expect(s.scheduler.beyondShare(cores(5))).toMatch(/^not enough cpu/);
  });
});
