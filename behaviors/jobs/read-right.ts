/**
 * The job read right (README "Job outputs", "Who reads what"): a capability token granting
 * `/dms/job/read/<job id>` (or `/dms/job/read`, every job) to a DID. Whoever holds one may read
 * that job's signed result manifest, and so fetch its outputs, from the job's requester or its
 * provider, as the requester itself may. It is an ordinary capability token (docs/CAPABILITIES.md):
 * the one chain format, narrowing and revocation; what is particular is where its chain must
 * start. The provider trusts the job's requester for its job, not its own anchors: a read right
 * counts when its first link is signed by the requester node's key (the one the manifest names;
 * for a job of the provider's own, the provider's), or, on the requester, by one of its roots.
 */
import { z } from 'zod';
import { checkChain, type Grant, type TrustView } from '../../runtime/capability/chain.js';
import { anyImplies } from '../../runtime/capability/paths.js';
import { decodeTokenList, type Token, tokenFromText } from '../../runtime/capability/token.js';
import { didOfPeer } from '../../runtime/crypto/keys.js';
import { errorText, invalid } from '../../runtime/errors.js';
import { nowNs } from '../../runtime/time.js';

/** Reads of every job; a grant of it covers each job's own path below it. */
export const JOB_READ_CAPABILITY = '/dms/job/read';
export const jobReadCapability = (jobId: string): string => `${JOB_READ_CAPABILITY}/${jobId}`;

/** Longest a read right issued by `POST /api/v1/jobs/{id}/grants` may live: a year. */
export const MAX_GRANT_S = 365 * 24 * 3600;
export const DEFAULT_GRANT_S = 7 * 24 * 3600;
/** Most revocations of its read rights one job keeps (actors/outputs/read-revocations.ts): revoking more is refused. */
export const MAX_REVOCATIONS_PER_JOB = 256;

/** A grant's token as text (base64url of its JSON, as `dms cap` prints), bounded: a chain of four links is about 4 KiB, and a request's headers are at most 16 KiB in all. */
export const GrantTextSchema = z.string().min(1).max(8 * 1024);

/** Tokens of one envelope looked at for a read right. */
const MAX_READ_TOKENS = 4;

export interface ReadTrust {
  /** Roots besides the job's requester: this node's own, when it is the requester. */
  isRoot?(did: string): boolean;
  revokers?(id: string): ReadonlySet<string> | undefined;
}

/** The DID whose key grants reads of a job: its requester's, or its provider's for a job of the provider's own. */
export function granterOf(manifest: { node: string; requester: string | null }): string {
  const did = didOfPeer(manifest.requester ?? manifest.node);
  if (!did) throw invalid(`job's requester ${manifest.requester ?? manifest.node} has no Ed25519 key`);
  return did;
}

/**
 * Why the tokens `cap` carries (an envelope's) give `reader` no read of `jobId`, or null when
 * one does: its audience is `reader`, it covers the job's read path, it has not expired, and its
 * chain starts at `granter` (or another root of `trust`). Never throws: a hostile list is a reason.
 */
export function readRefusal(cap: Uint8Array | undefined, reader: string, jobId: string, granter: string, trust: ReadTrust = {}): string | null {
  if (!cap || cap.byteLength === 0) return 'no read right was presented';
  let tokens: Token[];
  try {
    tokens = decodeTokenList(cap);
  } catch (e) {
    return `cap: ${errorText(e)}`;
  }
  return readRefusalOf(tokens, reader, jobId, granter, trust);
}

export function readRefusalOf(tokens: readonly Token[], reader: string, jobId: string, granter: string, trust: ReadTrust = {}): string | null {
  const view: TrustView = { isRoot: (did) => did === granter || (trust.isRoot?.(did) ?? false), revokers: (id) => trust.revokers?.(id) };
  const need = jobReadCapability(jobId);
  const now = nowNs();
  const reasons: string[] = [];
  // A stranger picks the list: a few tokens are enough for a reader, and each costs a signature.
  for (const t of tokens.slice(0, MAX_READ_TOKENS)) {
    const r = checkChain(t, view, undefined, now);
    if (!r.ok) reasons.push(r.reason);
    else if (!grants(r.grant, reader, need)) reasons.push(r.grant.aud !== reader ? `granted to ${r.grant.aud}, not to ${reader}` : `grants ${r.grant.cap.join(', ')}, not ${need}`);
    else return null;
  }
  return reasons.join('; ') || 'no read right was presented';
}

const grants = (g: Grant, reader: string, need: string) => g.aud === reader && g.act !== 'broadcast' && anyImplies(g.cap, need);

/** A read right as a person pastes it (`dms cap` text or JSON); a 400 naming the problem otherwise. */
export function parseGrant(text: string): Token {
  try {
    return tokenFromText(text.trim(), 'grant');
  } catch (e) {
    throw invalid(`grant: ${errorText(e)}`);
  }
}
