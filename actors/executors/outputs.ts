/**
 * The provider's side of a job's outputs (README "Job outputs"): when a job with outputs ends,
 * its executor hands back each output's files (Executor.readOutput: Docker's archive of the
 * stopped container's path, a tar; a directory or tar stream from any other executor), they
 * are imported into the node's blocks, its stored output (logs) too, and a manifest of it all
 * is signed with the node key and written for the orchestrator to store with the job's end.
 * What an executor hands back is a stranger's: a path that is a link (to /etc, say), or holds
 * one leaving it, is refused by the import (runtime/blocks/unixfs.ts), and that output carries
 * the error instead of a CID; the others are still collected.
 */
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { JobOutput, OutputSpec } from '../../behaviors/jobs/files.js';
import type { OutputContent } from '../../behaviors/jobs/execution.js';
import { signManifest, type Manifest } from '../../behaviors/jobs/manifest.js';
import type { BlockStore } from '../../runtime/blocks/store.js';
import { importFile, importPath, importTar } from '../../runtime/blocks/unixfs.js';
import { CID } from 'multiformats/cid';
import type { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError, errorText } from '../../runtime/errors.js';
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

/** Where the ended run's files of one output are; rejects not_found when it left none there. */
export type OutputSource = (output: OutputSpec) => Promise<OutputContent>;

export class OutputCollector {
  constructor(private readonly opts: OutputCollectorOptions) {}

  /** Collects every output the run left, signs the manifest and writes it; never rejects (a failure is the output's error). */
  async collect(source: OutputSource, run: EndedRun): Promise<void> {
    try {
      const outputs: JobOutput[] = [];
      for (const spec of run.outputs) outputs.push(await this.one(source, spec));
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

  private async one(source: OutputSource, spec: OutputSpec): Promise<JobOutput> {
    let content: OutputContent;
    try {
      content = await source(spec);
    } catch (e) {
      // Bounded as the manifest's schema bounds it (JobOutputSchema): a plugin's message may be any length.
      return { ...spec, error: e instanceof DmsError && e.kind === 'not_found' ? e.message.slice(0, 1500) : `${spec.path} could not be read: ${errorText(e).slice(0, 500)}` };
    }
    const limits = { maxBytes: this.opts.maxOutputBytes };
    // An output refused (past the bound, a link) leaves none of the blocks it wrote: a job could
    // otherwise leave blocks.max_output_bytes on the disk for every output it declares.
    try {
      const { cid, size } = await this.opts.blocks.importAll((store) => ('tar' in content ? importTar(content.tar, store, limits, content.strip ?? 0) : importPath(content.path, store, limits)));
      return { ...spec, cid: cid.toString(), size };
    } catch (e) {
      if ('tar' in content) (content.tar as { destroy?: () => void }).destroy?.();
      return { ...spec, error: `${spec.path}: ${errorText(e).slice(0, 500)}` };
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
