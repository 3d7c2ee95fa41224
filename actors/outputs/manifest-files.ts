/**
 * Signed result manifests as files (`<home>/data/manifests/<job id>.json`), written where a
 * job's end is known (the Docker executor on the provider, the remote executor on the
 * requester) before that end is reported, and read by the orchestrator when it stores the end:
 * so the manifest is in the job's final record, and survives a restart in between.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { JobOutputSchema } from '../../behaviors/jobs/files.js';
import { outputsMismatch } from '../../behaviors/jobs/manifest.js';
import type { Job } from '../../behaviors/jobs/schema.js';
import { writeJsonAtomic } from '../../runtime/files.js';
import { IssuedGrants } from './issued-grants.js';
import { ReadRevocations } from './read-revocations.js';

const ManifestFile = z.object({ manifest: z.string(), outputs: z.array(JobOutputSchema) });
export type ManifestFile = z.output<typeof ManifestFile>;

const JOB_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export class ManifestFiles {
  /** The revocations of the jobs' read rights, kept beside their manifests. */
  readonly revocations: ReadRevocations;
  /** The records of the read rights this node issued for its jobs. */
  readonly grants: IssuedGrants;

  constructor(readonly dir: string) {
    const pathOf = (jobId: string, suffix: string) => this.path(jobId, suffix);
    this.revocations = new ReadRevocations(dir, pathOf);
    this.grants = new IssuedGrants(pathOf);
  }

  /** The job's file of this directory with `suffix` (its manifest: `.json`). */
  path(jobId: string, suffix = '.json'): string {
    if (!JOB_ID.test(jobId)) throw new Error(`not a job id: ${jobId.slice(0, 64)}`);
    return join(this.dir, `${jobId}${suffix}`);
  }

  write(jobId: string, file: ManifestFile): void {
    writeJsonAtomic(this.path(jobId), file, 0o600);
  }

  /** The job's manifest, or null when none was written (no outputs asked, or the run was lost). */
  read(jobId: string): ManifestFile | null {
    let text: string;
    try {
      text = readFileSync(this.path(jobId), 'utf8');
    } catch {
      return null;
    }
    // A damaged file is no manifest: the job's end is still stored, without one.
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      return null;
    }
    const parsed = ManifestFile.safeParse(json);
    return parsed.success ? parsed.data : null;
  }

  /**
   * What the job's final record gains: the manifest its executor wrote before reporting the end,
   * kept only if it lists the outputs the job asked for (a provider signs what it likes);
   * `refused` says why one was not kept.
   */
  recordOf(job: Pick<Job, 'id' | 'outputs'>): { file: ManifestFile | null; refused?: string } {
    const file = this.read(job.id);
    const refused = file ? outputsMismatch(job.outputs, file.outputs) : null;
    return refused ? { file: null, refused } : { file };
  }
}
