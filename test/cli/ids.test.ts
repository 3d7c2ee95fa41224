import { describe, expect, it } from 'vitest';
import { pickByPrefix, resolveEnsembleId, resolveJobId, shortId } from '../../cli/ids.js';
import { RestClient } from '../../client/rest.js';

const IDS = ['3f2a9c10-0000-4000-8000-000000000001', '3f2b0000-0000-4000-8000-000000000002', 'a0000000-0000-4000-8000-000000000003'];

describe('pickByPrefix', () => {
  it('takes a whole id or any unique prefix of one', () => {
    expect(pickByPrefix('job', IDS[2], IDS)).toBe(IDS[2]);
    expect(pickByPrefix('job', 'a', IDS)).toBe(IDS[2]);
    expect(pickByPrefix('job', '3f2a', IDS)).toBe(IDS[0]);
    expect(pickByPrefix('job', ' 3F2B ', IDS)).toBe(IDS[1]);
  });

  it('refuses a prefix shared by several ids, listing them', () => {
    expect(() => pickByPrefix('job', '3f2', IDS)).toThrow(
      `'3f2' matches 2 jobs: ${IDS[0]}, ${IDS[1]}; give more characters`,
    );
  });

  it('refuses a prefix of no id, and an empty one', () => {
    expect(() => pickByPrefix('allocation', 'b', IDS)).toThrow("no allocation id starts with 'b'");
    expect(() => pickByPrefix('job', '  ', IDS)).toThrow('give a job id');
  });
});

it('shortId keeps the first 8 characters', () => {
  expect(shortId(IDS[0])).toBe('3f2a9c10');
});

describe('looking a prefix up on the node', () => {
  // A page holds at most 8 MiB (behaviors/jobs/jobs.ts MAX_LIST_BYTES): one of large jobs or
  // specs holds fewer than asked, and the look-up stopped there, as if it were the last.
  const ids = ['1a000000', '2b000000', '3c000000', '4d000000', '5e000000'].map((p) => `${p}-0000-4000-8000-000000000000`);
  const get = async (path: string) => {
    const url = new URL(path, 'http://node');
    const offset = Number(url.searchParams.get('offset') ?? 0);
    const limit = Number(url.searchParams.get('limit'));
    return ids.slice(offset, offset + Math.min(2, limit)).map((id) => ({ id, name: `n-${id.slice(0, 2)}`, status: 'running' }));
  };
  // The client's own paging over a node whose pages hold two, whatever is asked.
  const pagedByTwo = Object.assign(Object.create(RestClient.prototype) as RestClient, {
    get,
    page: async (path: string) => ({ items: await get(path), total: ids.length }),
  });

  it('reads on past a page shorter than asked, to the end', async () => {
    expect(await resolveJobId(pagedByTwo, '5e')).toBe(ids[4]);
    expect(await resolveEnsembleId(pagedByTwo, '4d')).toBe(ids[3]);
    expect(await resolveEnsembleId(pagedByTwo, 'n-5e')).toBe(ids[4]);
    await expect(resolveJobId(pagedByTwo, '9f')).rejects.toThrow("no job id starts with '9f'");
  });

  it('finds an ensemble past the newest 100 by name, and takes one a new ensemble pushed to the next page for one', async () => {
    // Newest first, 100 a page: one made after the first page is read pushes every later one down by one.
    const node = () => {
      const list = Array.from({ length: 150 }, (_, i) => ({ id: `${(0x1000 + i).toString(16).padStart(8, '0')}-0000-4000-8000-000000000000`, name: `e-${i}`, status: 'running' }));
      let pagesRead = 0;
      const rest = Object.assign(Object.create(RestClient.prototype) as RestClient, {
        page: async (path: string) => {
          if (pagesRead++ === 1) list.unshift({ id: 'ffffffff-0000-4000-8000-000000000000', name: 'new', status: 'pending' });
          const offset = Number(new URL(path, 'http://node').searchParams.get('offset') ?? 0);
          return { items: list.slice(offset, offset + 100), total: list.length };
        },
      });
      return { rest, idOf: (name: string) => list.find((e) => e.name === name)!.id };
    };
    const a = node();
    expect(await resolveEnsembleId(a.rest, 'e-149')).toBe(a.idOf('e-149'));
    // e-99 ends the first page and starts the second: read twice, still one ensemble of that name.
    const b = node();
    expect(await resolveEnsembleId(b.rest, 'e-99')).toBe(b.idOf('e-99'));
  });
});

describe('an ensemble name several ensembles share', () => {
  const id = (n: number) => `${String(n).repeat(8)}-0000-4000-8000-000000000000`;
  const nodeWith = (list: { id: string; name: string; status: string }[]) =>
    Object.assign(Object.create(RestClient.prototype) as RestClient, { page: async () => ({ items: list, total: list.length }) });

  it('means the one not yet ended, when exactly one is', async () => {
    const rest = nodeWith([
      { id: id(3), name: 'web', status: 'running' },
      { id: id(2), name: 'web', status: 'completed' },
      { id: id(1), name: 'web', status: 'failed' },
    ]);
    expect(await resolveEnsembleId(rest, 'web')).toBe(id(3));
  });

  it('is refused, naming each, when none or several are live', async () => {
    const ended = nodeWith([
      { id: id(2), name: 'web', status: 'completed' },
      { id: id(1), name: 'web', status: 'failed' },
    ]);
    await expect(resolveEnsembleId(ended, 'web')).rejects.toThrow("2 ensembles are named 'web': 22222222 (completed), 11111111 (failed); give its id");
    const live = nodeWith([
      { id: id(3), name: 'web', status: 'pending' },
      { id: id(2), name: 'web', status: 'running' },
      { id: id(1), name: 'web', status: 'completed' },
    ]);
    await expect(resolveEnsembleId(live, 'web')).rejects.toThrow("3 ensembles are named 'web': 33333333 (pending), 22222222 (running), 11111111 (completed); give its id");
  });
});
