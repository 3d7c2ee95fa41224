/**
 * The provider's side of a job's outputs (README "Job outputs"): when a Docker job with
 * outputs ends, each output path is copied out of the stopped container (the engine's archive
 * of it, a tar), imported into the node's blocks, its stored output (logs) too, and a manifest
 * of it all is signed with the node key and written for the orchestrator to store with the
 * job's end. The archive is a stranger's: a path that is a link (to /etc, say), or holds one
 * leaving it, is refused by the import (runtime/blocks/unixfs.ts), and that output carries the
 * error instead of a CID; the others are still collected.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type Docker from 'dockerode';
import type { JobOutput, OutputSpec } from '../../behaviors/jobs/files.js';
import { signManifest, type Manifest } from '../../behaviors/jobs/manifest.js';
import type { BlockStore } from '../../runtime/blocks/store.js';
import { importFile, importTar } from '../../runtime/blocks/unixfs.js';
import { CID } from 'multiformats/cid';
import type { KeyPair } from '../../runtime/crypto/keys.js';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import type { ManifestFiles } from '../outputs/manifest-files.js';

export interface OutputCollectorOptions {
  blocks: BlockStore;
  manifests: ManifestFiles;
  /** The node key: the manifest's signer, whose peer id it names as `node`. */
  key: KeyPair;
  /** Most bytes of file content one output may hold (`blocks.max_output_bytes`). */
  maxOutputBytes: number;
  /** Tells the network this node holds a DAG (the block exchange's DHT announcement); none without a network. */
  announce?: (root: CID) => void;
  log?: Logger;
}

export interface EndedRun {
  jobId: string;
  requester: string | null;
  outputs: readonly OutputSpec[];
  exitCode: number | null;
  /** The job's stored output, if it wrote any. */
  logPath: string;
}

/** An engine error's own words. */
const said = (e: unknown): string => ((e as { json?: { message?: string } }).json?.message ?? errorText(e)).slice(0, 500);

export class OutputCollector {
  constructor(private readonly opts: OutputCollectorOptions) {}

  /** Collects every output of the run's container, signs the manifest and writes it; never rejects (a failure is the output's error). */
  async collect(container: Docker.Container, run: EndedRun): Promise<void> {
    try {
      const outputs: JobOutput[] = [];
      for (const spec of run.outputs) outputs.push(await this.one(container, spec));
      const manifest: Manifest = {
        job: run.jobId,
        node: this.opts.key.peerId,
        requester: run.requester,
        exit_code: run.exitCode,
        ended_at: new Date().toISOString(),
        outputs,
        logs: await this.logs(run.logPath),
      };
      this.opts.manifests.write(run.jobId, { manifest: await signManifest(manifest, this.opts.key), outputs });
      for (const output of [...outputs, manifest.logs]) if (output?.cid) this.opts.announce?.(CID.parse(output.cid));
    } catch (e) {
      this.opts.log?.error({ job: run.jobId, err: errorText(e) }, 'job outputs not collected');
    }
  }

  private async one(container: Docker.Container, spec: OutputSpec): Promise<JobOutput> {
    let archive: NodeJS.ReadableStream;
    try {
      archive = await container.getArchive({ path: spec.path });
    } catch (e) {
      const status = (e as { statusCode?: number }).statusCode;
      return { ...spec, error: status === 404 ? `${spec.path} does not exist in the container` : `${spec.path} could not be read: ${said(e)}` };
    }
    try {
      // The engine names the archived path's last component first: that is the output's root.
      const { cid, size } = await importTar(archive as unknown as AsyncIterable<Uint8Array>, this.opts.blocks.fs, { maxBytes: this.opts.maxOutputBytes }, 1);
      return { ...spec, cid: cid.toString(), size };
    } catch (e) {
      (archive as unknown as { destroy?: () => void }).destroy?.();
      return { ...spec, error: `${spec.path}: ${errorText(e)}` };
    }
  }

  private async logs(path: string): Promise<Manifest['logs']> {
    try {
      await stat(path);
    } catch {
      return null;
    }
    const { cid, size } = await importFile(createReadStream(path), this.opts.blocks.fs, { maxBytes: Number.MAX_SAFE_INTEGER });
    return { cid: cid.toString(), size };
  }
}
