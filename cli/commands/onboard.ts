/**
 * `dms onboard` and `dms offboard`: the share of this machine its operator offers to the
 * network, with the labels and location jobs are placed by. Until a share is onboarded the
 * node runs its own jobs on the whole machine and offers nothing to anyone else; every view
 * says so in words.
 */
import type { Command } from 'commander';
import type { Usage } from '../../behaviors/jobs/resources.js';
import type { Device } from '../../behaviors/jobs/resources.js';
import type { DeviceSettings, DeviceSettingsPatch, Job, Labels, Location, ResourceSpec } from '../../behaviors/jobs/schema.js';
import { formatBytes } from '../../client/sizes.js';
import type { RestClient } from '../../client/rest.js';
import { CliError, output } from '../context.js';
import { parsePairs } from '../pairs.js';
import { restFor } from '../rest.js';
import { sizeArg } from '../sizes.js';

export interface OnboardFlags {
  cpu?: string;
  memory?: string;
  disk?: string;
  gpu?: string;
  label?: string[];
  region?: string;
  country?: string;
  city?: string;
  name?: string;
}

const collect = (v: string, prev: string[] | undefined) => [...(prev ?? []), v];

/** The flags of a share and its labels and location: `dms onboard` and `dms init --onboard` take the same. */
export function onboardFlags(cmd: Command): Command {
  return cmd
    .option('--cpu <cores>', 'cores offered, e.g. 1.5')
    .option('--memory <size>', 'memory offered, e.g. 4GiB')
    .option('--disk <size>', 'disk offered to jobs, e.g. 20GiB (default none)')
    .option('--gpu <n>', 'GPUs offered (default none)')
    .option('--label <key=value>', "a device label jobs' --label matches; the labels given replace the node's (repeatable)", collect)
    .option('--region <region>', "the region jobs' --region matches")
    .option('--country <country>', 'the country of this device')
    .option('--city <city>', 'the city of this device')
    .option('--name <name>', 'the name peers see in `dms peers list` (default general.name, else the host name)');
}

/** The settings the flags ask for; `share` says whether they onboard a share or only set labels, location or name. */
export function settingsFrom(flags: OnboardFlags): { patch: DeviceSettingsPatch; share: boolean } {
  const patch: DeviceSettingsPatch = {};
  const share = flags.cpu !== undefined || flags.memory !== undefined || flags.disk !== undefined || flags.gpu !== undefined;
  if (share) {
    if (flags.cpu === undefined || flags.memory === undefined) throw new CliError('a share needs both --cpu and --memory (e.g. --cpu 1.5 --memory 4GiB)');
    patch.onboarded = {
      cpu: { cores: positive('--cpu', flags.cpu) },
      memory: { size: sizeArg('--memory', flags.memory) },
      storage: { size: flags.disk === undefined ? 0 : sizeArg('--disk', flags.disk) },
      ...(flags.gpu === undefined || whole('--gpu', flags.gpu) === 0 ? {} : { gpu: { count: whole('--gpu', flags.gpu) } }),
    };
  }
  if (flags.label?.length) patch.labels = parsePairs('--label', flags.label, 'key=value');
  const location: Location = {};
  if (flags.region !== undefined) location.region = flags.region;
  if (flags.country !== undefined) location.country = flags.country;
  if (flags.city !== undefined) location.city = flags.city;
  if (Object.keys(location).length) patch.location = location;
  if (flags.name !== undefined) patch.name = flags.name;
  return { patch, share };
}

export function registerOnboardCommands(program: Command): void {
  onboardFlags(
    program
      .command('onboard')
      .description('offer a share of this machine to the network, with the labels and location jobs are placed by; --show prints what is offered now')
      .option('--show', 'print what this node offers now, its labels and location, and change nothing'),
  ).action(async (opts: OnboardFlags & { show?: boolean }, cmd: Command) => {
    const rest = restFor(cmd);
    const { patch, share } = settingsFrom(opts);
    if (opts.show || Object.keys(patch).length === 0) {
      if (!opts.show) throw new CliError('nothing to onboard: give --cpu and --memory (and --disk, --gpu, --label, --region …), or --show');
      return show(cmd, rest);
    }
    // Location fields not given keep their values: `--city X` alone does not drop the region.
    if (patch.location) patch.location = { ...(await rest.get<Device>('/api/v1/device/status')).location, ...patch.location };
    const settings = await rest.put<DeviceSettings>('/api/v1/device/config', patch);
    output(cmd, settings, settingsText(settings, share ? 'onboarded' : 'updated'));
  });

  program
    .command('offboard')
    .description('stop offering this machine to the network; refused while jobs run here for other nodes, unless --force')
    .option('--force', "cancel the jobs running here for other nodes (their requesters see that this node's operator offboarded)")
    .action(async (opts: { force?: boolean }, cmd: Command) => {
      const rest = restFor(cmd);
      const foreign = await jobsForOthers(rest);
      if (foreign.length && !opts.force) {
        throw new CliError(
          `${foreign.length} job${foreign.length === 1 ? '' : 's'} run${foreign.length === 1 ? 's' : ''} here for other nodes (${foreign.map((j) => j.id.slice(0, 8)).join(', ')}): ` +
            'wait for them to end, or `dms offboard --force` cancels them (their requesters see why)',
        );
      }
      // Offered nothing first, so no new job is taken while the running ones are cancelled.
      const settings = await rest.put<DeviceSettings>('/api/v1/device/config', { onboarded: null });
      const cancelled: string[] = [];
      if (opts.force) {
        const { name } = await rest.get<Device>('/api/v1/device/status');
        const reason = encodeURIComponent(`the operator of ${name} offboarded it (dms offboard --force)`);
        for (const job of await jobsForOthers(rest)) {
          try {
            await rest.delete<Job>(`/api/v1/jobs/${job.id}?reason=${reason}`);
            cancelled.push(job.id);
          } catch (e) {
            // One that ended meanwhile (409) is no longer running for anyone.
            if ((e as { status?: number }).status !== 409) throw e;
          }
        }
      }
      const said = cancelled.length ? `; cancelled ${cancelled.length} job${cancelled.length === 1 ? '' : 's'} run for other nodes (${cancelled.map((id) => id.slice(0, 8)).join(', ')})` : '';
      output(cmd, { settings, cancelled }, `offboarded: this node offers nothing to the network now${said}`);
    });
}

/** Jobs stored here that another node submitted and that have not ended. */
async function jobsForOthers(rest: RestClient): Promise<Job[]> {
  // Pages of the list route's largest size; a node holds at most what its share let it take.
  const { items } = await rest.everyPage<Job>(`/api/v1/jobs?status=pending,running&limit=${PAGE}`);
  return items.filter((j) => j.requester !== null);
}
const PAGE = 1000;

async function show(cmd: Command, rest: RestClient): Promise<void> {
  const [usage, device] = await Promise.all([rest.get<Usage>('/api/v1/resources/usage'), rest.get<Device>('/api/v1/device/status')]);
  const data = { offered: usage.offered, onboarded: usage.offered ? usage.onboarded : null, labels: device.labels, location: device.location, name: device.name };
  output(cmd, data, settingsText({ name: device.name, labels: device.labels, location: device.location, onboarded: data.onboarded }, 'show'));
}

function settingsText(s: DeviceSettings, how: 'onboarded' | 'updated' | 'show'): string {
  const lines = [
    `offered to the network: ${s.onboarded ? shareText(s.onboarded) : 'nothing (run `dms onboard`)'}`,
    `labels:                 ${labelsText(s.labels)}`,
    `location:               ${locationText(s.location)}`,
  ];
  if (s.name) lines.push(`name:                   ${s.name}`);
  if (how === 'onboarded') lines.push('peers see it in `dms peers list` and may place their jobs here');
  return lines.join('\n');
}

/** `1.5 cores, 4 GiB memory, 20 GiB disk, 1 GPU`: a share in words. */
export function shareText(r: ResourceSpec): string {
  const parts = [coresText(r.cpu.cores), `${formatBytes(r.memory.size)} memory`];
  if (r.storage.size) parts.push(`${formatBytes(r.storage.size)} disk`);
  if (r.gpu) parts.push(`${r.gpu.count} GPU${r.gpu.count === 1 ? '' : 's'}`);
  return parts.join(', ');
}

export const coresText = (n: number): string => `${n} core${n === 1 ? '' : 's'}`;
export const labelsText = (l: Labels): string => Object.entries(l).map(([k, v]) => `${k}=${v}`).join(',') || '-';
export const locationText = (l: Location): string => [l.city, l.country, l.region].filter(Boolean).join(', ') || '-';

function positive(flag: string, text: string): number {
  if (!/^\d+(\.\d+)?$/.test(text.trim()) || !(Number(text) > 0)) throw new CliError(`${flag}: '${text}' is not a number of cores above 0`);
  return Number(text);
}

function whole(flag: string, text: string): number {
  if (!/^\d+$/.test(text.trim())) throw new CliError(`${flag}: '${text}' is not a whole number`);
  return Number(text);
}
