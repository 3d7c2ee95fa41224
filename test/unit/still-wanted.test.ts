/**
 * The provider's side of "is this job still wanted?" (actors/deployment/still-wanted.ts) over a
 * fake network: whom it asks, when, and what it stops. The requester's side, and the whole of it
 * across real nodes: test/security/still-wanted-authz.test.ts, test/multinode/still-wanted.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StillWanted, type StillWantedIo } from '../../actors/deployment/still-wanted.js';
import type { WantedReply } from '../../behaviors/jobs/deployment.js';
import { DmsError } from '../../runtime/errors.js';
import { waitFor } from '../helpers/network.js';

const quiet = { info: () => undefined, warn: () => undefined };
const R = '12D3KooWRequester';
const S = '12D3KooWSecond';
let made: StillWanted[] = [];
afterEach(() => {
  for (const w of made) w.close();
  made = [];
});

/** A provider whose requesters answer with `answer` (a throw: no answer). */
function provider(placed: { id: string; requester: string }[], answer: (requester: string, jobId: string) => WantedReply, unfollowedMs = 3_600_000) {
  const asked: string[] = [];
  const stopped = new Map<string, string>();
  const io: StillWantedIo = {
    ask: async (requester, jobId) => {
      asked.push(`${jobId}@${requester}`);
      return answer(requester, jobId);
    },
    stop: (jobId, reason) => void stopped.set(jobId, reason),
    placedHere: async () => placed,
  };
  const w = new StillWanted({ io, log: quiet, unfollowedMs, pickUpPauses: [1, 1] });
  made.push(w);
  return { w, asked, stopped };
}

const offline = () => {
  throw new DmsError('timeout', 'no answer');
};

describe('a provider asking whether the jobs it runs for other nodes are still wanted', () => {
  it('at start-up asks about each job picked up again, and stops those ended, run elsewhere or unknown there, naming the answer', async () => {
    const answers: Record<string, WantedReply> = {
      a: { job_id: 'a', answer: 'following' },
      b: { job_id: 'b', answer: 'ended', status: 'failed' },
      c: { job_id: 'c', answer: 'elsewhere' },
      d: { job_id: 'd', answer: 'unknown' },
    };
    const { w, asked, stopped } = provider(['a', 'b', 'c', 'd'].map((id) => ({ id, requester: R })), (_, id) => answers[id]!);
    await w.pickUp();
    expect(asked).toEqual(['a', 'b', 'c', 'd'].map((id) => `${id}@${R}`));
    expect([...stopped.keys()]).toEqual(['b', 'c', 'd']);
    expect(stopped.get('b')).toBe(`its requester ${R} answers that the job has ended there (failed)`);
    expect(stopped.get('c')).toContain('no longer follows the job here');
    expect(stopped.get('d')).toBe(`its requester ${R} answers that it does not know the job`);
  });

  it('runs a job on while its requester does not answer, and asks that requester nothing more that round', async () => {
    const { w, asked, stopped } = provider(
      [
        { id: 'a', requester: R },
        { id: 'b', requester: R },
        { id: 'c', requester: S },
      ],
      (requester, id) => (requester === R ? offline() : { job_id: id, answer: 'unknown' }),
    );
    await w.pickUp();
    expect(asked.sort()).toEqual([`a@${R}`, `c@${S}`]);
    expect([...stopped.keys()]).toEqual(['c']);
  });

  it('asks again a requester it could not reach at start-up, before it has connected', async () => {
    let tries = 0;
    const { w, stopped } = provider([{ id: 'a', requester: R }], (_, id) => {
      if (++tries < 3) throw new DmsError('unroutable', 'not connected yet');
      return { job_id: id, answer: 'unknown' };
    });
    await w.pickUp();
    expect(tries).toBe(3);
    expect([...stopped.keys()]).toEqual(['a']);
  });

  it('takes an answer about another job for no answer: it stops nothing', async () => {
    const { w, stopped } = provider([{ id: 'a', requester: R }], () => ({ job_id: 'other', answer: 'unknown' }));
    await w.pickUp();
    expect(stopped.size).toBe(0);
  });

  it('asks about a job started here once its requester has stopped polling it; one it follows runs on', async () => {
    // Followed jobs are answered `following`, should a stalled event loop let one come due.
    const { w, asked, stopped } = provider([], (_, id) => ({ job_id: id, answer: id === 'polled' ? 'following' : 'unknown' }), 300);
    w.started('polled', R);
    w.started('left', R);
    const poll = setInterval(() => w.heard('polled'), 50);
    try {
      await waitFor('the unpolled job stopped', () => stopped.has('left'), { timeoutMs: 5_000 });
      expect(asked).toContain(`left@${R}`);
      await new Promise((r) => setTimeout(r, 700));
      expect([...stopped.keys()]).toEqual(['left']);
    } finally {
      clearInterval(poll);
    }
  });

  it('forgets a job that ended here: nobody is asked about it', async () => {
    const { w, asked } = provider([], (_, id) => ({ job_id: id, answer: 'unknown' }), 100);
    w.started('done', R);
    w.ended('done');
    await new Promise((r) => setTimeout(r, 350));
    expect(asked).toEqual([]);
  });
});
