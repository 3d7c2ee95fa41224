/**
 * What this machine can offer, measured rather than configured: the resource manager
 * compares allocations against it and the operator onboards a share of it.
 */
import { execFile } from 'node:child_process';
import { access, constants, statfs } from 'node:fs/promises';
import os from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { promisify } from 'node:util';
import type { GpuSpec, ResourceCapacity, ResourceSpec } from '../../behaviors/jobs/schema.js';
import { formatBytes as bytes } from '../../runtime/bytes.js';
import { coresText } from './ledger.js';

const run = promisify(execFile);
const MIB = 1024 * 1024;

export interface CapacityOptions {
  /** The node's data directory: jobs' storage comes out of its file system. */
  dataDir: string;
  /** The nvidia-smi to ask about GPUs, for machines that keep it off the PATH. */
  nvidiaSmi?: string;
}

export interface DiskSpace {
  /** Bytes an unprivileged process can still write. */
  free: number;
  total: number;
}

/**
 * Cores, memory, the free space of the data directory's file system, and GPUs when
 * nvidia-smi answers. Storage is the free space, not the disk size: space other programs
 * already use cannot be offered to jobs.
 */
export async function measureCapacity(opts: CapacityOptions): Promise<ResourceCapacity> {
  const [disk, gpu] = await Promise.all([diskSpace(opts.dataDir), detectGpus(opts.nvidiaSmi)]);
  return {
    cpu: { cores: os.availableParallelism() },
    memory: { size: os.totalmem() },
    storage: { size: disk.free },
    ...(gpu ? { gpu } : {}),
  };
}

/**
 * Why `share` cannot be onboarded on a machine of `capacity` (the first resource it asks more
 * of than the machine has, named by its field), or null when it fits. One rule for the running
 * resource manager and `dms init --onboard`, which writes the share before any node runs.
 */
export function shareBeyondCapacity(share: ResourceSpec, cap: ResourceCapacity): string | null {
  const over = (what: string, asked: string, has: string) => `onboarded.${what}: ${asked} is more than this machine has (${has})`;
  if (share.cpu.cores > cap.cpu.cores) return over('cpu.cores', coresText(share.cpu.cores), coresText(cap.cpu.cores));
  if (share.memory.size > cap.memory.size) return over('memory.size', bytes(share.memory.size), bytes(cap.memory.size));
  const storage = share.storage?.size ?? 0;
  if (storage > cap.storage.size) return over('storage.size', bytes(storage), bytes(cap.storage.size));
  if (share.gpu && share.gpu.count > (cap.gpu?.count ?? 0)) return over('gpu.count', `${share.gpu.count} GPUs`, `${cap.gpu?.count ?? 0}`);
  return null;
}

/** Space on the file system holding `dir`; a directory not created yet is measured at its nearest existing parent. */
export async function diskSpace(dir: string): Promise<DiskSpace> {
  for (let path = dir; ; path = dirname(path)) {
    try {
      const fs = await statfs(path);
      return { free: fs.bavail * fs.bsize, total: fs.blocks * fs.bsize };
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(path) === path) throw e;
    }
  }
}

/**
 * The machine's NVIDIA GPUs as one spec: count, the model (names joined when they differ)
 * and the smallest card's memory, since a job asking for `vram` needs it on each GPU it gets.
 * Undefined when nvidia-smi is missing, fails or lists nothing: no GPU is then offered.
 */
export async function detectGpus(nvidiaSmi = 'nvidia-smi'): Promise<GpuSpec | undefined> {
  if (!(await executableFound(nvidiaSmi))) return undefined;
  let stdout: string;
  try {
    ({ stdout } = await run(nvidiaSmi, ['--query-gpu=name,memory.total', '--format=csv,noheader,nounits'], {
      timeout: 5000,
    }));
  } catch {
    return undefined;
  }
  const cards = stdout
    .split('\n')
    .map((line) => line.split(',').map((field) => field.trim()))
    .filter((fields) => fields.length === 2 && fields[0] !== '' && /^\d+$/.test(fields[1]))
    .map(([name, mib]) => ({ name, vram: Number(mib) * MIB }));
  if (cards.length === 0) return undefined;
  return {
    count: cards.length,
    model: [...new Set(cards.map((c) => c.name))].join(', '),
    vram: Math.min(...cards.map((c) => c.vram)),
  };
}

/**
 * Whether `command` (a path, or a name looked up on PATH) is an executable file. Asked before
 * spawning it: a spawn from a node process of 100 MB cost ~45 ms of CPU in a start-up's profile,
 * on every start of every machine without NVIDIA's tools. On Windows (PATHEXT) the spawn decides.
 */
async function executableFound(command: string): Promise<boolean> {
  if (process.platform === 'win32') return true;
  const candidates = command.includes('/') ? [command] : (process.env.PATH ?? '').split(delimiter).filter(Boolean).map((dir) => join(dir, command));
  for (const file of candidates) {
    try {
      await access(file, constants.X_OK);
      return true;
    } catch {
      // not here
    }
  }
  return false;
}
