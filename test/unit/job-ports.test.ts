/** A job spec's `ports`: what a tunnel may reach, so bounded and checked before anything stores it. */
import { describe, expect, it } from 'vitest';
import { JobSpecSchema, MAX_JOB_PORTS } from '../../behaviors/jobs/schema.js';

const spec = (ports: unknown) => JobSpecSchema.safeParse({ name: 'p', image: 'busybox', ports });
const message = (ports: unknown) => {
  const r = spec(ports);
  return r.success ? '' : r.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ');
};

describe('job spec ports', () => {
  it('defaults to none and keeps the ports given', () => {
    expect(JobSpecSchema.parse({ name: 'p', image: 'busybox' }).ports).toEqual([]);
    expect(spec([80, 8080, 65535, 1]).data?.ports).toEqual([80, 8080, 65535, 1]);
  });

  it.each([
    [[0], /from 1 to 65535/],
    [[65536], /from 1 to 65535/],
    [[80.5], /integer|int/i],
    [['80'], /number/i],
    [[80, 80], /each port at most once/],
    [Array.from({ length: MAX_JOB_PORTS + 1 }, (_, i) => 1000 + i), new RegExp(`at most ${MAX_JOB_PORTS} ports`)],
    ['80', /array/i],
  ])('refuses %j, naming why', (ports, why) => {
    expect(spec(ports).success).toBe(false);
    expect(message(ports)).toMatch(why);
    expect(message(ports)).toMatch(/^ports/);
  });
});
