/**
 * The read rights a requester issued for a job (README "Who reads what"), kept beside its
 * manifest (`<home>/data/manifests/<job id>.grants.json`): what `GET /api/v1/jobs/{id}/grants`
 * lists, so an operator who kept neither a right's token nor its id can still find and revoke
 * it. Only what identifies a right is kept (id, audience, capability, expiry), not the token.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { DmsError } from '../../runtime/errors.js';
import { writeJsonAtomic } from '../../runtime/files.js';

/** Most unexpired read rights one job keeps a record of: issuing more is refused until some expire. */
export const MAX_GRANTS_PER_JOB = 1024;

const SUFFIX = '.grants.json';

const IssuedSchema = z.object({ id: z.string(), did: z.string(), cap: z.string(), expires_at: z.string() });
export type Issued = z.output<typeof IssuedSchema>;
const FileSchema = z.object({ grants: z.array(IssuedSchema) });

export class IssuedGrants {
  constructor(
    /** The path of a job's file beside its manifest (ManifestFiles.path: the job id checked). */
    private readonly pathOf: (jobId: string, suffix: string) => string,
  ) {}

  /** The job's rights that have not expired, oldest first (none when it has no file, or a damaged one). */
  list(jobId: string): Issued[] {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(this.pathOf(jobId, SUFFIX), 'utf8'));
    } catch {
      return [];
    }
    const parsed = FileSchema.safeParse(json);
    const now = Date.now();
    return parsed.success ? parsed.data.grants.filter((g) => Date.parse(g.expires_at) > now) : [];
  }

  /** Keeps the record of a right just issued; `overloaded` when the job holds MAX_GRANTS_PER_JOB unexpired ones. */
  add(jobId: string, issued: Issued): void {
    const grants = this.list(jobId);
    if (grants.length >= MAX_GRANTS_PER_JOB) {
      throw new DmsError('overloaded', `job ${jobId} has ${MAX_GRANTS_PER_JOB} unexpired read rights already, the most this node keeps a record of; try again once some have expired`);
    }
    writeJsonAtomic(this.pathOf(jobId, SUFFIX), { grants: [...grants, issued] }, 0o600);
  }
}
