import type { Command } from 'commander';
import { formatBytes as bytes, type Usage } from '../../behaviors/jobs/resources.js';
import type { Allocation, ResourceSpec } from '../../behaviors/jobs/schema.js';
import { CliError, output } from '../context.js';
import { restFor } from '../rest.js';

interface CreateOptions {
  cpu: string;
  memory: string;
  storage?: string;
  gpus?: string;
  job?: string;
}

export function registerResourceCommands(program: Command): void {
  program
    .command('resources')
    .description("this node's resources")
    .command('show')
    .description('capacity, the onboarded share, what allocations and jobs hold, and what is free')
    .action(async (_opts, cmd: Command) => {
      const usage = await restFor(cmd).get<Usage>('/api/v1/resources/usage');
      const rows: [string, ResourceSpec][] = [
        ['capacity', usage.capacity],
        ['onboarded', usage.onboarded],
        ['allocated', usage.allocated],
        ['free', usage.free],
      ];
      output(cmd, usage, grid(['', 'CPU', 'MEMORY', 'STORAGE', 'GPU'], rows.map(([name, r]) => [name, ...cells(r)])));
    });

  const allocations = program.command('allocations').description('reservations of this node\'s resources');

  allocations
    .command('list')
    .description('allocations still held')
    .option('--all', 'include released allocations')
    .action(async (opts: { all?: boolean }, cmd: Command) => {
      const list = await restFor(cmd).get<Allocation[]>(`/api/v1/allocations${opts.all ? '?all=true' : ''}`);
      const rows = list.map((a) => [a.id, ...cells(a.resources), a.job_id ?? '-', a.created_at, a.released_at ?? '-']);
      output(cmd, list, list.length === 0 ? 'no allocations' : grid(['ID', 'CPU', 'MEMORY', 'STORAGE', 'GPU', 'JOB', 'CREATED', 'RELEASED'], rows));
    });

  allocations
    .command('create')
    .description('reserve resources; refused (409) naming the resource that is short')
    .requiredOption('--cpu <cores>', 'cores, e.g. 0.5')
    .requiredOption('--memory <size>', 'memory, e.g. 512MiB or 2GiB')
    .option('--storage <size>', 'disk, e.g. 10GiB')
    .option('--gpus <n>', 'number of GPUs')
    .option('--job <id>', 'the job this allocation is for: it runs on it, and releases it when it ends')
    .action(async (opts: CreateOptions, cmd: Command) => {
      const resources: ResourceSpec = {
        cpu: { cores: number('--cpu', opts.cpu) },
        memory: { size: parseSize('--memory', opts.memory) },
        storage: { size: opts.storage ? parseSize('--storage', opts.storage) : 0 },
      };
      if (opts.gpus) resources.gpu = { count: number('--gpus', opts.gpus) };
      const allocation = await restFor(cmd).post<Allocation>('/api/v1/allocations', { resources, ...(opts.job ? { job_id: opts.job } : {}) });
      output(cmd, allocation, `allocation ${allocation.id}: ${cells(allocation.resources).join(', ')}`);
    });

  allocations
    .command('release')
    .description('give an allocation back')
    .argument('<id>', 'allocation id')
    .action(async (id: string, _opts, cmd: Command) => {
      const allocation = await restFor(cmd).delete<Allocation>(`/api/v1/allocations/${encodeURIComponent(id)}`);
      output(cmd, allocation, `allocation ${allocation.id} released at ${allocation.released_at}`);
    });
}

const UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  kib: 1024,
  m: 1e6,
  mb: 1e6,
  mib: 1024 ** 2,
  g: 1e9,
  gb: 1e9,
  gib: 1024 ** 3,
  t: 1e12,
  tb: 1e12,
  tib: 1024 ** 4,
};

/** `512MiB`, `2GB`, `1000`: bytes. */
export function parseSize(flag: string, text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  const unit = m ? UNITS[m[2].toLowerCase()] : undefined;
  if (!m || unit === undefined) throw new CliError(`${flag}: '${text}' is not a size (e.g. 512MiB, 2GiB, 1000000)`);
  return Math.round(Number(m[1]) * unit);
}

function number(flag: string, text: string): number {
  if (!/^\d+(\.\d+)?$/.test(text.trim())) throw new CliError(`${flag}: '${text}' is not a number`);
  return Number(text);
}

const cells = (r: ResourceSpec): string[] => [
  `${r.cpu.cores} cores`,
  bytes(r.memory.size),
  bytes(r.storage.size),
  r.gpu ? `${r.gpu.count}${r.gpu.model ? ` ${r.gpu.model}` : ''}` : '-',
];

function grid(head: string[], rows: string[][]): string {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cols: string[]) => cols.map((c, i) => (i === cols.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  return [line(head), ...rows.map(line)].join('\n');
}
