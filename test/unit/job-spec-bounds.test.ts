/**
 * Specs a node accepted that could never run, each found by probing a running node: they must be
 * refused when submitted, naming the field and what is wrong, not fail later in the engine or
 * turn into another value on the way (1e308 cores became Infinity, then null).
 */
import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { DeployedJob } from '../../behaviors/jobs/deployment.js';
import { AllocationRequestSchema, DeviceSettingsPatchSchema, JobSpecSchema, MAX_CORES, ResourceSpecSchema } from '../../behaviors/jobs/schema.js';
import { EnsembleSpecSchema } from '../../behaviors/ensembles/schema.js';
import { describeIssues } from '../../runtime/issues.js';

const JOB_ID = '6f1c1f4e-2b1a-4c7e-9d7e-0a1b2c3d4e5f';
const CID = 'bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy';
const job = (fields: object) => ({ name: 'j', image: 'busybox', executor: 'null', ...fields });
/** What REST answers after `invalid job spec: `, or '' when the value is accepted. */
const refusal = (schema: z.ZodType, value: unknown): string => {
  const r = schema.safeParse(value);
  return r.success ? '' : describeIssues(r.error);
};
const jobRefusal = (fields: object) => refusal(JobSpecSchema, job(fields));

describe('cores, sizes and GPUs too large to count', () => {
  it('refuses cores past MAX_CORES wherever cores are written, saying so rather than turning them into Infinity', () => {
    const tooMany = /1e\+308 cores is too many: at most 1000000/;
    expect(jobRefusal({ resources: { cpu: 1e308 } })).toMatch(new RegExp(`^resources\\.cpu\\.cores: ${tooMany.source}`));
    expect(jobRefusal({ resources: { cpu: { cores: 1e308 } } })).toMatch(tooMany);
    expect(refusal(AllocationRequestSchema, { resources: { cpu: 1e308, memory: '1GiB' } })).toMatch(new RegExp(`^resources\\.cpu\\.cores: ${tooMany.source}`));
    expect(refusal(DeviceSettingsPatchSchema, { onboarded: { cpu: 1e308, memory: '1GiB' } })).toMatch(new RegExp(`^onboarded\\.cpu\\.cores: ${tooMany.source}`));
    // Amounts nodes tell each other (reservations, leases) are read with the same bound.
    expect(refusal(ResourceSpecSchema, { cpu: 1e308, memory: 0 })).toMatch(new RegExp(`^cpu\\.cores: ${tooMany.source}`));
    expect(refusal(EnsembleSpecSchema, { name: 'e', parts: { a: { image: 'busybox', executor: 'null', resources: { cpu: 1e308 } } } })).toMatch(
      new RegExp(`^parts\\.a\\.resources\\.cpu\\.cores: ${tooMany.source}`),
    );
    expect(jobRefusal({ resources: { cpu: MAX_CORES + 1 } })).toMatch(/1000001 cores is too many: at most 1000000/);
    expect(JobSpecSchema.parse(job({ resources: { cpu: MAX_CORES } })).resources.cpu.cores).toBe(MAX_CORES);
  });

  it('refuses a size past what is counted exactly (8 PiB) as too large, not as a size of the wrong form', () => {
    for (const [resources, field] of [
      [{ memory: 1e308 }, 'resources.memory.size'],
      [{ storage: 1e308 }, 'resources.storage.size'],
      [{ gpu: { count: 1, vram: 1e308 } }, 'resources.gpu.vram'],
    ] as const) {
      expect(jobRefusal({ resources })).toBe(`${field}: 1e+308 bytes is too large: a size is at most 9007199254740991 bytes (8 PiB)`);
    }
    expect(jobRefusal({ resources: { memory: 2 ** 60 } })).toMatch(/^resources\.memory\.size: 1152921504606847000 bytes is too large/);
    expect(jobRefusal({ resources: { gpu: 1e308 } })).toMatch(/^resources\.gpu\.count: at most 9007199254740991/);
  });
});

describe('mount points', () => {
  const inputs = (...paths: string[]) => ({ inputs: paths.map((path) => ({ source: CID, path })) });

  it('compares mount points as the engine does: //a is /a, /a//b is /a/b, /a/ is /a', () => {
    for (const [a, b] of [['/a', '//a'], ['/a/b', '/a//b'], ['/in', '/in/'], ['/a', '/a//']]) {
      expect(jobRefusal(inputs(a, b)), `${a} ${b}`).toBe(`inputs: each mount point (path) at most once: inputs.1.path '${b}' is inputs.0.path '${a}'`);
    }
  });

  it('refuses a mount point inside another, volumes included, and accepts ones side by side', () => {
    expect(jobRefusal(inputs('/a', '/a/b'))).toBe("inputs.1.path: '/a/b' is inside inputs.0.path '/a': mount inputs side by side, not one inside another");
    expect(jobRefusal(inputs('/a//b/c', '/a/'))).toBe("inputs.0.path: '/a//b/c' is inside inputs.1.path '/a/': mount inputs side by side, not one inside another");
    expect(jobRefusal({ inputs: [{ source: 'volume:data', path: '/data', writable: true }, { source: CID, path: '/data/model' }] })).toMatch(/^inputs\.1\.path: '\/data\/model' is inside inputs\.0\.path '\/data'/);
    expect(jobRefusal(inputs('/a', '/ab', '/b/a'))).toBe('');
  });

  it('refuses inputs, volumes and outputs at or under /proc, /sys and /dev, naming the path', () => {
    for (const path of ['/proc', '/proc/x', '/proc/sys/kernel', '//proc/x', '/proc/', '/sys', '/sys/fs/cgroup', '/dev', '/dev/shm', '/dev//null']) {
      const kernel = `/${path.split('/').filter(Boolean)[0]}`;
      const why = `'${path}' is at or under ${kernel}: the container's kernel filesystems (/proc, /sys, /dev) take those paths`;
      expect(jobRefusal(inputs(path)), path).toBe(`inputs.0.path: ${why}`);
      expect(jobRefusal({ inputs: [{ source: 'volume:data', path }] }), path).toBe(`inputs.0.path: ${why}`);
      expect(jobRefusal({ outputs: [{ name: 'o', path }] }), path).toBe(`outputs.0.path: ${why}`);
    }
    expect(jobRefusal(inputs('/process', '/system', '/devices'))).toBe('');
    expect(jobRefusal(inputs('/'))).toMatch(/^inputs\.0\.path: not the container's root/);
    expect(jobRefusal(inputs('//'))).toMatch(/^inputs\.0\.path: not the container's root/);
  });
});

describe('what a process is given', () => {
  const KiB = 1024;

  it('refuses a variable whose NAME=value is past the 128 KiB Linux passes as one string, naming it', () => {
    expect(jobRefusal({ environment: { BIG: 'x'.repeat(200 * KiB) } })).toBe(
      'environment.BIG: BIG=… is 204804 bytes, more than the 131071 Linux passes as one variable (MAX_ARG_STRLEN, 128 KiB with its NUL)',
    );
    expect(jobRefusal({ secrets: { TOKEN: 'x'.repeat(200 * KiB) } })).toMatch(/^secrets\.TOKEN: TOKEN=… is 204806 bytes, more than the 131071/);
    // Bytes, not characters: each é is two.
    expect(jobRefusal({ environment: { E: 'é'.repeat(70_000) } })).toMatch(/^environment\.E: E=… is 140002 bytes/);
    // The largest that fits: NAME=value and its NUL are 131072 bytes.
    expect(jobRefusal({ environment: { A: 'x'.repeat(131072 - 3) } })).toBe('');
    expect(jobRefusal({ environment: { A: 'x'.repeat(131072 - 2) } })).toMatch(/^environment\.A: A=… is 131072 bytes/);
  });

  it('refuses an argument past the same 128 KiB, a command string included', () => {
    expect(jobRefusal({ command: ['echo', 'x'.repeat(200 * KiB)] })).toBe('command.1: 204800 bytes, more than the 131071 Linux passes as one argument (MAX_ARG_STRLEN, 128 KiB with its NUL)');
    expect(jobRefusal({ command: `echo ${'x'.repeat(200 * KiB)}` })).toMatch(/^command\.2: 204805 bytes, more than the 131071/);
  });

  it('bounds an environment name at 256 bytes', () => {
    expect(jobRefusal({ environment: { ['A'.repeat(256)]: 'v' } })).toBe('');
    expect(jobRefusal({ environment: { ['A'.repeat(100 * KiB)]: 'v' } })).toMatch(/^environment: key 'A{64}…': an environment name is at most 256 bytes/);
    expect(jobRefusal({ secrets: { ['S'.repeat(257)]: 'v' } })).toMatch(/^secrets: key 'S{64}…': an environment name is at most 256 bytes/);
  });

  it('refuses a command and environment together past 1 MiB, saying by how much', () => {
    const environment = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`V${i}`, 'x'.repeat(127 * KiB)]));
    // 9 variables of `Vi=` + 127 KiB, and `echo`: each with its NUL and a pointer.
    const total = 9 * (3 + 127 * KiB + 1 + 8) + (4 + 1 + 8);
    expect(jobRefusal({ command: ['echo'], environment })).toBe(
      `command, environment and secrets: ${total} bytes together (each string with its NUL and an 8-byte pointer, as Linux counts them), ${total - 1024 * KiB} more than the 1048576 (1 MiB) a job's process may be given`,
    );
    // Secrets count too, and a secret replacing a variable of the same name counts once.
    const half = Object.fromEntries(Object.entries(environment).slice(0, 5));
    const otherHalf = Object.fromEntries(Object.entries(environment).slice(5));
    expect(jobRefusal({ command: ['echo'], environment: half, secrets: otherHalf })).toMatch(/^command, environment and secrets: \d+ bytes together/);
    expect(jobRefusal({ command: ['echo'], environment: half, secrets: half })).toBe('');
  });

  it('holds an ensemble part and a job sent to a provider to the same bounds', () => {
    const big = { environment: { BIG: 'x'.repeat(200 * KiB) } };
    expect(refusal(EnsembleSpecSchema, { name: 'e', parts: { a: { image: 'busybox', ...big } } })).toMatch(/^parts\.a\.environment\.BIG: BIG=… is 204804 bytes/);
    const many = { environment: Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`V${i}`, 'x'.repeat(127 * KiB)])) };
    expect(refusal(EnsembleSpecSchema, { name: 'e', parts: { a: { image: 'busybox', ...many } } })).toMatch(/^parts\.a: command, environment and secrets: \d+ bytes together/);
    expect(refusal(DeployedJob, { ...job(many), id: JOB_ID })).toMatch(/^command, environment and secrets: \d+ bytes together/);
    expect(refusal(DeployedJob, { ...job({ inputs: [{ source: CID, path: '/proc/x' }] }), id: JOB_ID })).toMatch(/^inputs\.0\.path: '\/proc\/x' is at or under \/proc/);
  });
});
