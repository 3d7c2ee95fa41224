import * as z from 'zod';
import { describe, expect, it } from 'vitest';
import { describeIssues } from '../../runtime/issues.js';

const Schema = z
  .object({
    port: z.number().max(65535),
    name: z.string(),
    labels: z.record(z.string().regex(/^[a-z]+$/, 'names are lowercase letters'), z.string()).optional(),
  })
  .strict();

const issues = (value: unknown, opts = {}) => describeIssues(Schema.safeParse(value).error!, opts);

describe('describeIssues', () => {
  it('names each field that is wrong, on one line', () => {
    expect(issues({ port: 70000, name: 'n', extra: 1 })).toBe("port: at most 65535; unknown key 'extra'");
  });

  it('says a missing field is required, and puts the prefix before every path', () => {
    expect(issues({ port: 1 })).toBe('name is required');
    expect(issues({ port: 1 }, { prefix: 'rest' })).toBe('rest.name is required');
  });

  it('names a record key that fails its schema, and what a key must be', () => {
    expect(issues({ port: 1, name: 'n', labels: { ok: 'x', 'Bad Key': 'y' } })).toBe("labels: key 'Bad Key': names are lowercase letters");
    const long = 'X'.repeat(500);
    expect(issues({ port: 1, name: 'n', labels: { [long]: 'y' } })).toBe(`labels: key '${'X'.repeat(64)}…': names are lowercase letters`);
  });

  it('says a bound in words, and leaves a bound given its own message as it is', () => {
    const Bounds = z.strictObject({
      n: z.number().min(1).max(10),
      gt: z.number().gt(0).lt(5),
      s: z.string().min(1).max(3),
      l: z.array(z.number()).min(2).max(4),
      own: z.number().max(2, 'two at most, as the README says'),
    });
    const say = (v: unknown) => describeIssues(Bounds.safeParse(v).error!);
    expect(say({ n: 11, gt: 0, s: '', l: [1], own: 3 })).toBe('n: at most 10; gt: more than 0; s: must not be empty; l: at least 2 items; own: two at most, as the README says');
    expect(say({ n: 0, gt: 5, s: 'long', l: [1, 2, 3, 4, 5], own: 1 })).toBe('n: at least 1; gt: less than 5; s: at most 3 characters; l: at most 4 items');
  });

  it('says plainly that the whole value is of another type', () => {
    expect(issues(null)).toBe('an object is expected, not null');
    expect(issues([1])).toBe('an object is expected, not a list');
    expect(describeIssues(z.string().safeParse(3).error!)).toBe('string is expected, not number');
  });

  it('names at most `limit` issues', () => {
    expect(issues({ port: 'a', name: 1 }, { limit: 1 }).split('; ')).toHaveLength(1);
  });
});
