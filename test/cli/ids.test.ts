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
});
