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
import type { Volumes } from '../../runtime/volumes.js';
import { parseCid } from '../../runtime/blocks/cid.js';
import type { BlockStore } from '../../runtime/blocks/store.js';
import { fileContent, isFileEntry, rootEntry, walk } from '../../runtime/blocks/unixfs.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import type { BlockExchange } from '../../runtime/network/blocks.js';
import { makeDirsAsync } from '../../runtime/files.js';

export interface InputMounterOptions {
  blocks: BlockStore;
  exchange?: BlockExchange;
  /** `<home>/data/inputs`: one directory per job, removed with its run. */
  dir: string;
  /** This node's volumes, which `volume:<name>` inputs mount as they are. */
  volumes?: Volumes;
}

export interface InputsOf {
  id: string;
  requester: string | null;
  inputs: readonly InputSpec[];
}

export class InputMounter {
  constructor(private readonly opts: InputMounterOptions) {}

  private dirOf(jobId: string): string {
    if (!/^[0-9a-f-]{36}$/.test(jobId)) throw new DmsError('invalid', `not a job id: ${jobId.slice(0, 64)}`);
    return join(this.opts.dir, jobId);
  }

  /** Fetches and writes out every input; the engine's bind mounts (`host:container:ro`). */
  async prepare(job: InputsOf, progress: (status: string) => void): Promise<string[]> {
    if (job.inputs.length === 0) return [];
    const root = this.dirOf(job.id);
    await rm(root, { recursive: true, force: true });
    const binds: string[] = [];
    for (const [n, input] of job.inputs.entries()) {
      const volume = volumeSource(input.source);
      if (volume !== null) {
        if (!this.opts.volumes) throw new DmsError('not_found', `input ${input.source}: this node has no volumes`);
        binds.push(`${this.opts.volumes.path(volume)}:${input.path}${input.writable ? '' : ':ro'}`);
        continue;
      }
      const named = input.source === (input.cid ?? input.source) ? input.source : `${input.source} (${input.cid})`;
      if (input.source.startsWith('job:') && !input.cid) throw new DmsError('invalid', `input ${named}: the node it was submitted on did not resolve it to a CID`);
      const cid = parseCid(input.cid ?? input.source, `input ${input.source}`);
      progress(`fetching input ${named}`);
      const peers = [...(job.requester ? [job.requester] : []), ...(input.from ?? [])];
      try {
        if (this.opts.exchange) await this.opts.exchange.fetchDag(cid, peers);
        else if (!(await this.opts.blocks.has(cid))) throw new DmsError('not_found', 'it is not held here and this node has no network');
      } catch (e) {
        throw new DmsError('not_found', `input ${named} is missing: ${errorText(e)}`);
      }
      const host = join(root, String(n));
      await this.write(cid, host);
      binds.push(`${host}:${input.path}:ro`);
    }
    return binds;
  }

  async release(jobId: string): Promise<void> {
    await rm(this.dirOf(jobId), { recursive: true, force: true });
  }

  /** The DAG as files at `dest`: a file there, or a directory of them. */
  private async write(cid: ReturnType<typeof parseCid>, dest: string): Promise<void> {
    const fs = this.opts.blocks.fs;
    const entry = await rootEntry(cid, fs);
    await makeDirsAsync(join(dest, '..'));
    if (isFileEntry(entry)) {
      await pipeline(Readable.from(fileContent(entry)), createWriteStream(dest, { mode: 0o444 }));
      return;
    }
    await mkdir(dest, { mode: 0o755 });
    for await (const { entry: e, path } of walk(entry, '', fs)) {
      const target = join(dest, path);
      if (e.type === 'directory') await mkdir(target, { mode: 0o755 });
      else await pipeline(Readable.from(fileContent(e)), createWriteStream(target, { mode: 0o444 }));
    }
  }
}
