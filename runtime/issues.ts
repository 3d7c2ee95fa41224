import type * as z from 'zod';
import { invalid } from './errors.js';

export interface IssueOptions {
  /** Put before every path: the config key a value was checked for (`rest.port`). */
  prefix?: string;
  /** Name at most this many issues (a hostile envelope can carry thousands). */
  limit?: number;
}

/**
 * Zod issues as one line naming each field that is wrong (`rest.port: Too big: expected number
 * to be <=65535; unknown key 'x'`): it ends up in a REST answer's `error` or a CLI's `dms: …`
 * line, where z.prettifyError's one line per issue does not fit.
 */
export function describeIssues(error: z.ZodError, opts: IssueOptions = {}): string {
  const issues = opts.limit === undefined ? error.issues : error.issues.slice(0, opts.limit);
  return issues.map((i) => describeIssue(i, opts)).join('; ');
}

function describeIssue(i: z.core.$ZodIssue, { prefix = '' }: IssueOptions): string {
  const key = [prefix, ...i.path.map(String)].filter(Boolean).join('.');
  if (i.code === 'unrecognized_keys') return `${key ? `${key}: ` : ''}unknown key ${i.keys.map((k) => `'${k}'`).join(', ')}`;
  // A record key that fails its schema: zod says only "Invalid key in record"; the key's own
  // issues say what a key must be.
  if (i.code === 'invalid_key') {
    const parent = [prefix, ...i.path.slice(0, -1).map(String)].filter(Boolean).join('.');
    const name = String(i.path.at(-1) ?? '');
    return `${parent ? `${parent}: ` : ''}key '${name.length > 64 ? `${name.slice(0, 64)}…` : name}': ${i.issues.map((inner) => inner.message).join('; ')}`;
  }
  // The whole value of another type (a body of null, a list): said plainly, not in zod's words.
  if (!key && i.code === 'invalid_type') {
    const received = /received (\w+)$/.exec(i.message)?.[1];
    return `${i.expected === 'object' ? 'an object' : i.expected} is expected${received ? `, not ${received === 'array' ? 'a list' : received}` : ''}`;
  }
  const bound = boundText(i);
  if (bound !== null) return key ? `${key}: ${bound}` : bound;
  // A message that names its field already (a refinement's) stands alone.
  if (!key || i.message.startsWith(key)) return i.message;
  // A missing field reads `x is required` (the wire's texts), not zod's `x: Invalid input: expected
  // string, received undefined`. Issues carry no input (zod reports it only when asked), so a
  // missing field is told by its message.
  if (i.code === 'invalid_type' && i.message.endsWith('received undefined')) return `${key} is required`;
  return `${key}: ${i.message}`;
}

/**
 * Parse or throw a DmsError of kind 'invalid' naming every bad field, so REST answers 400 and
 * actors reply with the same text.
 */
export function parseWith<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  throw invalid(`invalid ${what}: ${describeIssues(result.error)}`);
}

/**
 * A bound a value is past, in words (`at most 10`, `at least 1 character`), where zod says `Too
 * big: expected number to be <=10`; null for any other issue, and for a bound given its own message.
 */
function boundText(i: z.core.$ZodIssue): string | null {
  if ((i.code !== 'too_big' && i.code !== 'too_small') || !/^Too (big|small)/.test(i.message)) return null;
  const big = i.code === 'too_big';
  const limit = Number(big ? i.maximum : i.minimum);
  const unit = i.origin === 'string' ? 'character' : i.origin === 'array' || i.origin === 'set' ? 'item' : i.origin === 'number' || i.origin === 'int' || i.origin === 'bigint' ? '' : null;
  if (unit === null || !Number.isFinite(limit)) return null;
  if (!big && unit && limit === 1) return 'must not be empty';
  const words = i.inclusive === false ? (big ? 'less than' : 'more than') : big ? 'at most' : 'at least';
  return `${words} ${limit}${unit ? ` ${unit}${limit === 1 ? '' : 's'}` : ''}`;
}
