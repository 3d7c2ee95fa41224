import { type Command, Option } from 'commander';
import type { Usage } from '../../behaviors/jobs/resources.js';
import type { Allocation, ResourceSpec } from '../../behaviors/jobs/schema.js';
import { formatBytes } from '../../client/sizes.js';
import { CliError, output } from '../context.js';
import { resolveAllocationId, resolveJobId, shortId } from '../ids.js';
import { restFor } from '../rest.js';
import { sizeArg } from '../sizes.js';
import { grid } from '../table.js';
import { coresText, shareText } from './onboard.js';

interface CreateOptions {
  cpu: string;
  memory: string;
  disk?: string;
  storage?: string;
  gpus?: string;
  job?: string;
}

export function registerResourceCommands(program: Command): void {
  program
    .command('resources')
    .description("this node's resources")
    .command('show')
    .description('capacity, the share offered to the network (nothing until `dms onboard`), what allocations and jobs hold, and what is free')
    .action(async (_opts, cmd: Command) => {
      const usage = await restFor(cmd).get<Usage>('/api/v1/resources/usage');
      // Until a share is onboarded the ledger lends this node's own jobs the whole machine;
      // that is not an offer, and the table must not read as one.
      const rows: [string, ResourceSpec][] = [
        ['capacity', usage.capacity],
        [usage.offered ? 'onboarded' : 'own jobs', usage.onboarded],
        ['allocated', usage.allocated],
        ['free', usage.free],
      ];
      // Outside the share, so not in the table: said apart, with the bound that keeps them.
      const i = usage.images;
      const images = i ? `\npulled images: ${formatBytes(i.bytes)} of ${formatBytes(i.max_bytes)} (${i.count} ${i.count === 1 ? 'image' : 'images'}; jobs.max_images_bytes, outside the share)` : '';
      const offered = usage.offered ? `offered to the network: ${shareText(usage.onboarded)}` : 'offered to the network: nothing (run `dms onboard`)';
      // Blocks, volumes and uploads hold storage of the share as jobs do: said apart, so a full disk column explains itself.
      const s = usage.stored;
      const stored = `storage held by content: blocks ${formatBytes(s.blocks)}, volumes ${formatBytes(s.volumes)}${s.uploads ? `, uploads under way ${formatBytes(s.uploads)}` : ''} (in allocated)`;
      output(cmd, usage, `${grid(['', 'CPU', 'MEMORY', 'STORAGE', 'GPU'], rows.map(([name, r]) => [name, ...cells(r)]))}\n\n${stored}${images}\n${offered}`);
    });

  const allocations = program.command('allocations').description('reservations of this node\'s resources');

  allocations
    .command('list')
    .description('allocations still held')
    .option('--all', 'include released allocations')
    .option('--wide', 'print whole ids (default: their first 8 characters)')
    .action(async (opts: { all?: boolean; wide?: boolean }, cmd: Command) => {
      const list = await restFor(cmd).get<Allocation[]>(`/api/v1/allocations${opts.all ? '?all=true' : ''}`);
      const id = (x: string) => (opts.wide ? x : shortId(x));
      const rows = list.map((a) => [id(a.id), ...cells(a.resources), a.job_id ? id(a.job_id) : '-', a.created_at, a.released_at ?? '-']);
      output(cmd, list, list.length === 0 ? 'no allocations' : grid(['ID', 'CPU', 'MEMORY', 'STORAGE', 'GPU', 'JOB', 'CREATED', 'RELEASED'], rows));
    });

  allocations
    .command('create')
    .description('reserve resources; refused (409) naming the resource that is short')
    .requiredOption('--cpu <cores>', 'cores, e.g. 0.5')
    .requiredOption('--memory <size>', 'memory with its unit: 512MiB, 2GiB (powers of 1024) or 500MB, 2GB (powers of 1000)')
    .option('--disk <size>', 'disk with its unit, e.g. 10GiB (as `dms onboard --disk` offers it)')
    // The name it had before `dms onboard` and `dms run` called it --disk.
    .addOption(new Option('--storage <size>').hideHelp())
    .option('--gpus <n>', 'number of GPUs')
    .option('--job <id>', 'the job this allocation is for (id or unique prefix): it runs on it, and releases it when it ends')
    .action(async (opts: CreateOptions, cmd: Command) => {
      const resources: ResourceSpec = {
        cpu: { cores: number('--cpu', opts.cpu) },
        memory: { size: sizeArg('--memory', opts.memory) },
        storage: { size: opts.disk ? sizeArg('--disk', opts.disk) : opts.storage ? sizeArg('--storage', opts.storage) : 0 },
      };
      if (opts.gpus) resources.gpu = { count: number('--gpus', opts.gpus) };
      const rest = restFor(cmd);
      const job = opts.job ? { job_id: await resolveJobId(rest, opts.job) } : {};
      const allocation = await rest.post<Allocation>('/api/v1/allocations', { resources, ...job });
      output(cmd, allocation, `allocation ${allocation.id}: ${cells(allocation.resources).join(', ')}`);
    });

  allocations
    .command('release')
    .description('give an allocation back')
    .argument('<id>', 'allocation id, or any unique prefix of it (as `allocations list` prints)')
    .action(async (given: string, _opts, cmd: Command) => {
      const rest = restFor(cmd);
      const allocation = await rest.delete<Allocation>(`/api/v1/allocations/${encodeURIComponent(await resolveAllocationId(rest, given))}`);
      output(cmd, allocation, `allocation ${allocation.id} released at ${allocation.released_at}`);
    });
}

function number(flag: string, text: string): number {
  if (!/^\d+(\.\d+)?$/.test(text.trim())) throw new CliError(`${flag}: '${text}' is not a number`);
  return Number(text);
}

const cells = (r: ResourceSpec): string[] => [
  coresText(r.cpu.cores),
  formatBytes(r.memory.size),
  formatBytes(r.storage.size),
  r.gpu ? `${r.gpu.count}${r.gpu.model ? ` ${r.gpu.model}` : ''}` : '-',
];
