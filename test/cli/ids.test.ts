import { describe, expect, it } from 'vitest';
import { pickByPrefix, shortId } from '../../cli/ids.js';

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
