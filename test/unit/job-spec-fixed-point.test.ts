/**
 * POST /api/v1/jobs checks its body once and hands the orchestrator the result as it is
 * (SendOptions.checked): that is only the same job as before if the orchestrator's own check of
 * the encoded spec would have given it back unchanged, whatever short forms the caller wrote.
 */
import { describe, expect, it } from 'vitest';
import { JobSpecSchema } from '../../behaviors/jobs/schema.js';

const CID = 'bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy';

const specs: Record<string, unknown> = {
  'the least': { name: 'n', image: 'busybox' },
  'short forms': { name: 's', image: 'busybox:1.36', command: 'echo hi && sleep 1', resources: { cpu: 0.5, memory: '512MiB', storage: '1GiB' } },
  'canonical forms': { name: 'c', image: 'busybox', command: ['sh', '-c', 'true'], resources: { cpu: { cores: 2 }, memory: { size: 1024 } }, executor: 'null' },
  'everything': {
    name: 'e',
    image: 'registry.example.com:5000/team/app@sha256:' + 'a'.repeat(64),
    command: ['run', '--flag', ''],
    environment: { A: '1', B_2: 'é ✓' },
    secrets: { TOKEN: 'x' },
    timeout_s: 30,
    placement: { labels: { gpu: 'a100', 'zone/x': 'lab' }, location: { region: 'eu' }, max_attempts: 5 },
    outputs: [{ name: 'model', path: '/outputs/model' }],
    inputs: [{ source: CID, path: '/inputs/data' }, { source: 'volume:cache', path: '/cache', writable: true }],
    ports: [8080, 80],
  },
  'local, empty command': { name: 'l', image: 'busybox', command: '', placement: { local: true } },
};

describe('a job spec checked once is the spec the orchestrator would have checked', () => {
  it.each(Object.entries(specs))('%s: parsing the encoded result gives it back', (_, spec) => {
    const once = JobSpecSchema.parse(spec);
    const twice = JobSpecSchema.parse(JSON.parse(JSON.stringify(once)));
    expect(twice).toEqual(once);
    expect(JSON.stringify(twice)).toBe(JSON.stringify(once));
  });

  it('reads an empty command string as no command, as the README says (it was refused as not a string)', () => {
    expect(JobSpecSchema.parse({ name: 'l', image: 'busybox', command: '' }).command).toEqual([]);
  });
});
