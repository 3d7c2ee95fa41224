/**
 * The provider's side of a job's inputs (README "Job outputs"): before its container is made,
 * each input's DAG is fetched (blocks held here are not asked for again, each fetched one is
 * checked against its CID), written out under `<home>/data/inputs/<job id>/<n>` and bind-mounted
 * read-only at its path. An input no node gives fails the start, naming it.
 */
import { mkdir, rm } from 'node:fs/promises';
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { type InputSpec, volumeSource } from '../../behaviors/jobs/files.js';
// Each file or directory written costs about an inode and a block besides its content, as in a volume.
import { ENTRY_BYTES, type Volumes } from '../../runtime/volumes.js';
import { parseCid } from '../../runtime/blocks/cid.js';
import type { BlockStore } from '../../runtime/blocks/store.js';
import type { UnixFSEntry } from 'ipfs-unixfs-exporter';
import { formatBytes } from '../../runtime/bytes.js';
import { fileContent, isFileEntry, rootEntry, walk } from '../../runtime/blocks/unixfs.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import type { BlockExchange } from '../../runtime/network/blocks.js';
import { makeDirsAsync } from '../../runtime/files.js';
import type { WatchedVolume } from './storage-watch.js';

export interface InputMounterOptions {
  blocks: BlockStore;
  exchange?: BlockExchange;
  /** `<home>/data/inputs`: one directory per job, removed with its run. */
  dir: string;
  /** This node's volumes, which `volume:<name>` inputs mount as they are. */
  volumes?: Volumes;
  /**
   * Most bytes one job's inputs may hold (`blocks.max_input_bytes`), in distinct blocks fetched
   * and in file content written: its requester names the DAGs.
   */
  maxBytes: number;
}

export interface InputsOf {
  id: string;
  requester: string | null;
  inputs: readonly InputSpec[];
}

/** What a job's container mounts: binds (`host:container[:ro]`), and the volumes it writes, which its run measures (./storage-watch.ts). */
export interface Mounts {
  binds: string[];
  volumes: WatchedVolume[];
}

export class InputMounter {
  constructor(private readonly opts: InputMounterOptions) {}

  private dirOf(jobId: string): string {
    if (!/^[0-9a-f-]{36}$/.test(jobId)) throw new DmsError('invalid', `not a job id: ${jobId.slice(0, 64)}`);
    return join(this.opts.dir, jobId);
  }

  /** Fetches and writes out every input: the engine's bind mounts, and the volumes among them the job writes. */
  async prepare(job: InputsOf, progress: (status: string) => void): Promise<Mounts> {
    const binds: string[] = [];
    const volumes: WatchedVolume[] = [];
    if (job.inputs.length === 0) return { binds, volumes };
    const root = this.dirOf(job.id);
    await rm(root, { recursive: true, force: true });
    // Shared by the job's inputs: what each fetches and writes comes off one bound.
    const budget = { left: this.opts.maxBytes };
    const over = (named: string) => new DmsError('too_large', `input ${named} holds more than ${formatBytes(this.opts.maxBytes)} (blocks.max_input_bytes)`);
    for (const [n, input] of job.inputs.entries()) {
      const volume = volumeSource(input.source);
      if (volume !== null) {
        if (!this.opts.volumes) throw new DmsError('not_found', `input ${input.source}: this node has no volumes`);
        const dir = this.opts.volumes.path(volume);
        binds.push(`${dir}:${input.path}${input.writable ? '' : ':ro'}`);
        if (input.writable) volumes.push({ name: volume, dir, size: this.opts.volumes.get(volume).size });
        continue;
      }
      const named = input.source === (input.cid ?? input.source) ? input.source : `${input.source} (${input.cid})`;
      if (input.source.startsWith('job:') && !input.cid) throw new DmsError('invalid', `input ${named}: the node it was submitted on did not resolve it to a CID`);
      const cid = parseCid(input.cid ?? input.source, `input ${input.source}`);
      progress(`fetching input ${named}`);
      const peers = [...(job.requester ? [job.requester] : []), ...(input.from ?? [])];
      try {
        if (this.opts.exchange) await this.opts.exchange.fetchDag(cid, peers, undefined, budget.left);
        else if (!(await this.opts.blocks.has(cid))) throw new DmsError('not_found', 'it is not held here and this node has no network');
      } catch (e) {
        if (e instanceof DmsError && e.kind === 'too_large') throw over(named);
        throw new DmsError('not_found', `input ${named} is missing: ${errorText(e)}`);
      }
      const host = join(root, String(n));
      // What was written is removed by the caller's release, as after any failed start.
      await this.write(cid, host, budget).catch((e: unknown) => Promise.reject(e === OVER ? over(named) : e));
      binds.push(`${host}:${input.path}:ro`);
    }
    return { binds, volumes };
  }

  async release(jobId: string): Promise<void> {
    await rm(this.dirOf(jobId), { recursive: true, force: true });
  }

  /**
   * The DAG as files at `dest`: a file there, or a directory of them, their content taken off
   * `budget` (each file's declared size before a byte of it is written, and what comes as it
   * comes); OVER once it would go below nothing.
   */
  private async write(cid: ReturnType<typeof parseCid>, dest: string, budget: { left: number }): Promise<void> {
    const fs = this.opts.blocks.fs;
    const entry = await rootEntry(cid, fs);
    await makeDirsAsync(join(dest, '..'));
    const writeFile = (file: UnixFSEntry, target: string) => {
      take(budget, ENTRY_BYTES);
      if (Number(file.size) > budget.left) throw OVER;
      return pipeline(Readable.from(bounded(fileContent(file), budget)), createWriteStream(target, { mode: 0o444 }));
    };
    if (isFileEntry(entry)) return writeFile(entry, dest);
    await mkdir(dest, { mode: 0o755 });
    for await (const { entry: e, path } of walk(entry, '', fs)) {
      const target = join(dest, path);
      if (e.type === 'directory') {
        take(budget, ENTRY_BYTES);
        await mkdir(target, { mode: 0o755 });
      } else await writeFile(e, target);
    }
  }
}

/** Thrown by a write that would take its inputs past their bound. */
const OVER = new Error('over blocks.max_input_bytes');

const take = (budget: { left: number }, bytes: number) => {
  budget.left -= bytes;
  if (budget.left < 0) throw OVER;
};

/** `chunks`, each taken off `budget` as it passes: OVER instead of the one that would go below nothing. */
async function* bounded(chunks: AsyncIterable<Uint8Array>, budget: { left: number }): AsyncGenerator<Uint8Array> {
  for await (const chunk of chunks) {
    take(budget, chunk.byteLength);
    yield chunk;
  }
}
