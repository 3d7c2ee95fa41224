/**
 * The outbox of cancels the providers missed (actors/executors/cancel-outbox.ts) over its store:
 * what a restarted requester asks again, and what it lets go. The store is a table in memory,
 * as storage/cancels.ts keeps it on disk (test/storage/storage.test.ts).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { CancelOutbox, type CancelStore } from '../../actors/executors/cancel-outbox.js';
import { DmsError } from '../../runtime/errors.js';
import type { StoredCancel, WaitingCancel } from '../../storage/cancels.js';
import { waitFor } from '../helpers/network.js';

class MemoryStore implements CancelStore {
  rows = new Map<string, StoredCancel>();
  async list(): Promise<StoredCancel[]> {
    return [...this.rows.values()].sort((a, b) => a.since - b.since);
  }
  async put(c: WaitingCancel): Promise<void> {
    this.rows.set(c.job_id, { ...c, placed_again: false });
  }
  async remove(jobId: string, since?: number): Promise<void> {
    if (since === undefined || this.rows.get(jobId)?.since === since) this.rows.delete(jobId);
  }
}

const quiet = { info: () => undefined, warn: () => undefined };
const HOUR = 3600_000;
let outboxes: CancelOutbox[] = [];
afterEach(() => {
  for (const o of outboxes) o.close();
  outboxes = [];
});

/** An outbox asking every 10 ms; `answer` says what each provider answers (default: it confirms). */
function outbox(store: CancelStore, answer: (node: string, jobId: string) => void = () => undefined) {
  const asked: string[] = [];
  const o = new CancelOutbox(async (node, jobId) => {
    asked.push(`${jobId}@${node}`);
    answer(node, jobId);
  }, quiet, store, 10);
  outboxes.push(o);
  return { o, asked };
}

describe('cancels the providers missed, asked again', () => {
  it('say how long ago the run was given up, so that a provider placed the job again stops no newer run', async () => {
    const ages: number[] = [];
    const o = new CancelOutbox(async (_node, _jobId, _reason, givenUpMs) => {
      ages.push(givenUpMs);
      if (ages.length < 3) throw new DmsError('unroutable', 'the provider is away');
    }, quiet, undefined, 10);
    outboxes.push(o);
    await o.add('j1', 'p', 'cancelled');
    await waitFor('the cancel asked three times', () => ages.length >= 3, { timeoutMs: 5_000 });
    // Each ask carries the age at its own asking, counted from the give-up, not from the ask before.
    expect(ages[0]).toBeGreaterThanOrEqual(0);
    expect(ages[2]).toBeGreaterThan(ages[0]);
  });
});

describe('cancels the providers missed, stored', () => {
  it('are stored before add resolves, and asked again by the next process until confirmed', async () => {
    const store = new MemoryStore();
    const first = outbox(store, () => {
      throw new DmsError('unroutable', 'the provider is away');
    });
    await first.o.add('j1', 'p', 'cancelled');
    expect([...store.rows.keys()]).toEqual(['j1']);
    await waitFor('the cancel asked while the provider is away', () => first.asked.length > 0, { timeoutMs: 5_000 });
    // The process dies (or stops cleanly): the row stays.
    first.o.close();
    expect([...store.rows.keys()]).toEqual(['j1']);

    const next = outbox(store);
    await next.o.open();
    await waitFor('the stored cancel asked and confirmed', () => next.asked.includes('j1@p') && store.rows.size === 0, { timeoutMs: 5_000 });
  });

  it('lets go of a stored cancel whose job runs on that node again, and of one given up too long ago', async () => {
    const store = new MemoryStore();
    const now = Date.now();
    store.rows.set('again', { job_id: 'again', node: 'p', reason: 'lost', since: now - 1_000, placed_again: true });
    store.rows.set('stale', { job_id: 'stale', node: 'p', reason: 'lost', since: now - 25 * HOUR, placed_again: false });
    store.rows.set('kept', { job_id: 'kept', node: 'p', reason: 'cancelled', since: now - HOUR, placed_again: false });
    const { o, asked } = outbox(store);
    await o.open();
    await waitFor('the one cancel still owed asked and confirmed', () => store.rows.size === 0 || undefined, { timeoutMs: 5_000 });
    expect(asked).toEqual(['kept@p']);
  });

  it('forgets the cancel of a job started there again, in storage too, before the start goes on', async () => {
    const store = new MemoryStore();
    const { o, asked } = outbox(store, () => {
      throw new DmsError('unroutable', 'the provider is away');
    });
    await o.add('j1', 'p', 'lost');
    await o.forget('j1');
    expect(store.rows.size).toBe(0);
    await new Promise((r) => setTimeout(r, 50));
    expect(asked).toEqual([]);
  });

  it('does not bring back a stored cancel a start forgot while the rows were still being read', async () => {
    // The node serves before the rows are read (open is not waited for): a start there may come first.
    const store = new MemoryStore();
    store.rows.set('j1', { job_id: 'j1', node: 'p', reason: 'lost', since: Date.now() - 1_000, placed_again: false });
    let release!: () => void;
    const slow: CancelStore = {
      list: async () => {
        await new Promise<void>((r) => (release = r));
        return store.list();
      },
      put: (c) => store.put(c),
      remove: (id, since) => store.remove(id, since),
    };
    const { o, asked } = outbox(slow);
    const opened = o.open();
    const forgotten = o.forget('j1');
    release();
    await Promise.all([opened, forgotten]);
    expect(store.rows.size).toBe(0);
    await new Promise((r) => setTimeout(r, 50));
    expect(asked).toEqual([]);
  });

  it('drops the cancel when the provider says nothing runs there, and keeps asking one that does not answer', async () => {
    const store = new MemoryStore();
    const { o } = outbox(store, (node) => {
      if (node === 'gone') throw new DmsError('not_found', 'no such job');
      throw new DmsError('timeout', 'no answer');
    });
    await o.add('j1', 'gone', 'cancelled');
    await o.add('j2', 'silent', 'cancelled');
    await waitFor('the cancel of a job unknown there dropped', () => !store.rows.has('j1') || undefined, { timeoutMs: 5_000 });
    expect([...store.rows.keys()]).toEqual(['j2']);
  });
});
