/**
 * Revoked read rights of a job (README "Who reads what"), kept beside its manifest
 * (`<home>/data/manifests/<job id>.revoked.json`) on both nodes that answer for the job: its
 * requester, which signs each revocation with the key that granted the right, and its provider,
 * which the requester tells. Every read is checked against them (the outputs actor), so a revoked
 * right reads nothing from either node, however long it was granted for.
 *
 * On the requester each revocation remembers whether the provider acknowledged it; those it has
 * not are told again until it does or they expire. An expired revocation is dropped: a right it
 * revoked has expired by then too (a grant lives at most MAX_GRANT_S, a revocation as long).
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import { MAX_REVOCATIONS_PER_JOB } from '../../behaviors/jobs/read-right.js';
import { signatureValid, type Token, tokenFromText, tokenId, tokenToText } from '../../runtime/capability/token.js';
import { DmsError } from '../../runtime/errors.js';
import { writeJsonAtomic } from '../../runtime/files.js';
import { isExpired, nowNs } from '../../runtime/time.js';
import { rememberNewest } from '../../runtime/bounded-map.js';

const SUFFIX = '.revoked.json';

const FileSchema = z.object({
  /** The node the job runs or ran on, to be told; null when that is this node (nothing to tell). */
  provider: z.string().nullable(),
  revocations: z.array(z.object({ token: z.string(), acked: z.boolean() })),
});

export interface Revocation {
  token: Token;
  /** Whether the job's provider holds it too (always true on the provider). */
  acked: boolean;
}

export interface JobRevocations {
  provider: string | null;
  revocations: Revocation[];
}

/** Why `token` is not a revocation `issuer` signed, or null when it is one. */
export function revocationProblem(token: Token, issuer: string): string | null {
  if (token.act !== 'revoke' || !token.rev) return 'not a revocation';
  if (token.iss !== issuer) return `signed by ${token.iss}, not by ${issuer}, who granted the job's read rights`;
  if (!signatureValid(token)) return 'its signature does not verify';
  if (isExpired(token.exp)) return 'it has expired';
  return null;
}

/** Jobs whose revocations are kept parsed: a manifest read checks them, and a stranger picks how often. */
const CACHED_JOBS = 1024;

export class ReadRevocations {
  /** Parsed files by job, this instance being the only writer of them (ManifestFiles holds one). */
  private readonly cache = new Map<string, JobRevocations>();

  constructor(
    /** The directory of the jobs' manifests, where these files are kept too. */
    private readonly dir: string,
    /** The path of a job's file there with a suffix (ManifestFiles.path: the job id checked). */
    private readonly pathOf: (jobId: string, suffix: string) => string,
  ) {}

  /** The job's revocations that have not expired (none when it has no file, or a damaged one). */
  read(jobId: string): JobRevocations {
    const cached = this.cache.get(jobId);
    const held = cached ?? this.load(jobId);
    if (!cached) this.remember(jobId, held);
    const now = nowNs();
    return held.revocations.some((r) => isExpired(r.token.exp, now)) ? { ...held, revocations: held.revocations.filter((r) => !isExpired(r.token.exp, now)) } : held;
  }

  private remember(jobId: string, held: JobRevocations): void {
    rememberNewest(this.cache, jobId, held, CACHED_JOBS);
  }

  private load(jobId: string): JobRevocations {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(this.pathOf(jobId, SUFFIX), 'utf8'));
    } catch {
      return { provider: null, revocations: [] };
    }
    const parsed = FileSchema.safeParse(json);
    if (!parsed.success) return { provider: null, revocations: [] };
    const now = nowNs();
    const revocations: Revocation[] = [];
    for (const r of parsed.data.revocations) {
      try {
        const token = tokenFromText(r.token);
        if (!isExpired(token.exp, now)) revocations.push({ token, acked: r.acked });
      } catch {
        // Written by this node after checking; a damaged entry revokes nothing and is dropped at the next write.
      }
    }
    return { provider: parsed.data.provider, revocations };
  }

  /**
   * Keeps a revocation (already checked: revocationProblem). False when the job holds it
   * already; `overloaded` past MAX_REVOCATIONS_PER_JOB.
   */
  add(jobId: string, token: Token, opts: { provider: string | null; acked: boolean }): boolean {
    const held = this.read(jobId);
    const id = tokenId(token);
    if (held.revocations.some((r) => r.token.rev === token.rev && tokenId(r.token) === id)) return false;
    if (held.revocations.length >= MAX_REVOCATIONS_PER_JOB) {
      throw new DmsError('overloaded', `job ${jobId} holds ${MAX_REVOCATIONS_PER_JOB} revocations of its read rights already, the most it keeps`);
    }
    this.write(jobId, { provider: opts.provider ?? held.provider, revocations: [...held.revocations, { token, acked: opts.acked }] });
    return true;
  }

  /** Notes that the job's provider holds the revocations with these ids. */
  acknowledge(jobId: string, ids: ReadonlySet<string>): void {
    const held = this.read(jobId);
    this.write(jobId, { ...held, revocations: held.revocations.map((r) => (ids.has(tokenId(r.token)) ? { ...r, acked: true } : r)) });
  }

  /** Who revoked each token id of the job's read rights: the `revokers` of its trust view. */
  revokers(jobId: string): Map<string, Set<string>> {
    const out = new Map<string, Set<string>>();
    for (const { token } of this.read(jobId).revocations) {
      let set = out.get(token.rev!);
      if (!set) out.set(token.rev!, (set = new Set()));
      set.add(token.iss);
    }
    return out;
  }

  /** Jobs with a revocation their provider has not acknowledged (read from the directory: at start-up). */
  unacknowledged(): string[] {
    if (!existsSync(this.dir)) return [];
    return readdirSync(this.dir)
      .filter((name) => name.endsWith(SUFFIX))
      .map((name) => name.slice(0, -SUFFIX.length))
      .filter((job) => {
        try {
          return this.read(job).revocations.some((r) => !r.acked);
        } catch {
          return false;
        }
      });
  }

  private write(jobId: string, held: JobRevocations): void {
    this.remember(jobId, held);
    writeJsonAtomic(this.pathOf(jobId, SUFFIX), { provider: held.provider, revocations: held.revocations.map((r) => ({ token: tokenToText(r.token), acked: r.acked })) }, 0o600);
  }
}
