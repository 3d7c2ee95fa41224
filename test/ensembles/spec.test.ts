/**
 * The ensemble spec (behaviors/ensembles/schema.ts): what a deploy accepts, and every hostile
 * or mistaken spec refused with the field that is wrong.
 */
import { describe, expect, it } from 'vitest';
import { describeIssues } from '../../runtime/issues.js';
import { EnsembleSpecSchema, MAX_PARTS, nearCycle, placementOrder } from '../../behaviors/ensembles/schema.js';

const part = (extra: Record<string, unknown> = {}) => ({ image: 'busybox:latest', executor: 'null', ...extra });
const problems = (spec: unknown) => {
  const r = EnsembleSpecSchema.safeParse(spec);
  return r.success ? [] : describeIssues(r.error).split('; ');
};

describe('ensemble spec', () => {
  it('takes parts as job specs with their ensemble fields, defaults filled in', () => {
    const spec = EnsembleSpecSchema.parse({
      name: 'web',
      parts: { server: part({ ports: [8080], kind: 'service' }), client: part({ near: { part: 'server', max_rtt_ms: 5 }, restart: { on: 'failure', max: 2 } }) },
    });
    expect(spec.parts.server).toMatchObject({ kind: 'service', optional: false, restart: { on: 'never', max: 3 }, ports: [8080] });
    expect(spec.parts.client).toMatchObject({ kind: 'task', near: { part: 'server', max_rtt_ms: 5 }, restart: { on: 'failure', max: 2 } });
  });

  it('refuses part names that are not DNS labels, or that are reserved', () => {
    for (const name of ['Server', 'a_b', '-a', 'a-', 'a.b', 'x'.repeat(64), '']) {
      expect(problems({ name: 'e', parts: { [name]: part() } }).join('\n'), name).toMatch(/DNS label/);
    }
    expect(problems({ name: 'e', parts: { localhost: part() } }).join()).toMatch(/parts: key 'localhost': part name 'localhost' is reserved/);
    expect(problems({ name: 'e', parts: { host: part() } }).join()).toMatch(/reserved/);
    // Every object has it: found by part name where no part was, it broke a part's restarts.
    expect(problems({ name: 'e', parts: { constructor: part() } }).join()).toMatch(/part name 'constructor' is reserved/);
    expect(problems({ name: 'e', parts: { a: part({ near: { part: 'constructor', max_rtt_ms: 5 } }) } }).join()).toMatch(/near 'constructor', which is not a part of this ensemble/);
  });

  it('refuses ports out of range or twice, and a part pinned with local', () => {
    expect(problems({ name: 'e', parts: { a: part({ ports: [0] }) } }).join()).toMatch(/parts\.a\.ports\.0: a port is from 1 to 65535/);
    expect(problems({ name: 'e', parts: { a: part({ ports: [70000] }) } }).join()).toMatch(/a port is from 1 to 65535/);
    expect(problems({ name: 'e', parts: { a: part({ ports: [80, 80] }) } }).join()).toMatch(/each port at most once/);
    expect(problems({ name: 'e', parts: { a: part({ placement: { local: true } }) } }).join()).toMatch(/parts\.a\.placement\.local: placement\.local is not for a part/);
  });

  it('refuses a near constraint on an unknown part, on itself, or in a cycle', () => {
    expect(problems({ name: 'e', parts: { a: part({ near: { part: 'b', max_rtt_ms: 5 } }) } }).join()).toMatch(/parts\.a\.near\.part: part a is near 'b', which is not a part of this ensemble/);
    expect(problems({ name: 'e', parts: { a: part({ near: { part: 'a', max_rtt_ms: 5 } }) } }).join()).toMatch(/cannot be near itself/);
    const cyclic = { a: part({ near: { part: 'b', max_rtt_ms: 5 } }), b: part({ near: { part: 'c', max_rtt_ms: 5 } }), c: part({ near: { part: 'a', max_rtt_ms: 5 } }) };
    expect(problems({ name: 'e', parts: cyclic }).join()).toMatch(/near constraints form a cycle \(a -> b -> c -> a\)/);
    expect(problems({ name: 'e', parts: { a: part({ near: { part: 'b', max_rtt_ms: 0 } }), b: part() } }).join()).toMatch(/near\.max_rtt_ms/);
  });

  it('bounds the parts: none is refused, and more than the most', () => {
    expect(problems({ name: 'e', parts: {} }).join()).toMatch(/at least one part/);
    const many = Object.fromEntries(Array.from({ length: MAX_PARTS + 1 }, (_, i) => [`p${i}`, part()]));
    expect(problems({ name: 'e', parts: many }).join()).toMatch(new RegExp(`at most ${MAX_PARTS} parts`));
    expect(problems({ name: 'e', parts: { a: part({ bogus: 1 }) } }).join()).toMatch(/bogus/);
  });

  it('places a part after the part it must be near', () => {
    const parts = { client: { near: { part: 'server' } }, server: {}, db: { near: { part: 'client' } } };
    const order = placementOrder(parts);
    expect(order.indexOf('server')).toBeLessThan(order.indexOf('client'));
    expect(order.indexOf('client')).toBeLessThan(order.indexOf('db'));
    expect(nearCycle(parts)).toBeNull();
  });
});
