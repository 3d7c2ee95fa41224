/**
 * The provider's answer to a node asking for the manifest of a job it ran here or requested from
 * here (inbox `outputs`), the requester's asking (`fetchManifest`, called by the remote executor
 * when the job ends there), and a reader's asking for a job granted to it (`/dms/outputs/read`).
 * A manifest goes to the job's requester, and to whoever holds a read right of the job its
 * requester granted (behaviors/jobs/read-right.ts) and has not revoked (./read-revocations.ts);
 * everyone else is refused, naming why. A revocation made on the requester (`revokeGrant`) is
 * told to the job's provider (`revoke`): at once, when the job's manifest arrives, and again
 * while the provider has not acknowledged it (after RETELL_MS, then less and less often).
 */
import { defineBehavior } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { didOfPeer } from '../../runtime/crypto/keys.js';
import type { Actor } from '../../runtime/actor.js';
import { encodeTokenList, issueRevocation, issueToken, tokenFromText, tokenId, tokenToText } from '../../runtime/capability/token.js';
import { DmsError, errorText, invalid, notFound } from '../../runtime/errors.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { at } from '../../runtime/wire/envelope.js';
import {
  ManifestReply,
  ManifestRequest,
  openManifest,
  OUTPUTS_INBOX,
  OutputsBehaviors,
  ReadRequest,
  GrantReply,
  GrantRequest,
  GrantsReply,
  GrantsRequest,
  RevokeGrantReply,
  RevokeGrantRequest,
  RevokeReply,
  RevokeRequest,
} from '../../behaviors/jobs/manifest.js';
import { granterOf, jobReadCapability, MAX_GRANT_S, parseGrant, type ReadTrust, readRefusal } from '../../behaviors/jobs/read-right.js';
import type { ManifestFiles } from './manifest-files.js';
import { type ReadRevocations, revocationProblem } from './read-revocations.js';

export interface OutputsDeps {
  manifests: ManifestFiles;
  /** This node's roots and revocations: on the requester, its operator may grant reads too. */
  trust?: ReadTrust;
}

export const OutputsActor = defineActor({
  inbox: OUTPUTS_INBOX,
  concurrency: 'node',
  create: ({ actor, deps, log }: ActorContext<OutputsDeps>) => {
    const revocations = deps.manifests.revocations;
    /** The signed manifest of a job held here, opened; null when none is. */
    const heldManifest = (jobId: string) => {
      const file = deps.manifests.read(jobId);
      return file ? { signed: file.manifest, manifest: openManifest(file.manifest, { job: jobId }) } : null;
    };
    /**
     * Jobs with a revocation their provider has not acknowledged, with when to tell it next: a
     * provider gone for good is asked less and less often (RETELL_MS doubling up to RETELL_MAX_MS)
     * rather than every few seconds for the year a revocation lasts.
     */
    const untold = new Map<string, { at: number; waitMs: number }>();
    const tellLater = (job: string) => untold.set(job, { at: Date.now() + RETELL_MS, waitMs: RETELL_MS });
    let timer: NodeJS.Timeout | undefined;
    let telling = false;
    const retell = async () => {
      if (telling) return;
      telling = true;
      try {
        for (const [job, next] of [...untold]) {
          if (next.at > Date.now()) continue;
          try {
            if (await tellProvider(actor, revocations, job)) {
              untold.delete(job);
              continue;
            }
          } catch (e) {
            log.debug({ job, err: errorText(e) }, 'job read right revocation not told to its provider yet');
          }
          const waitMs = Math.min(next.waitMs * 2, RETELL_MAX_MS);
          untold.set(job, { at: Date.now() + waitMs, waitMs });
        }
      } finally {
        telling = false;
      }
    };
    return {
      start: () => {
        for (const job of revocations.unacknowledged()) tellLater(job);
        timer = setInterval(() => void retell(), RETELL_MS);
        timer.unref();
      },
      stop: () => clearInterval(timer),
      behaviors: [
        defineBehavior({
          name: OutputsBehaviors.manifest,
          payload: ManifestRequest,
          handle: ({ payload, env }) => {
            const held = heldManifest(payload.job_id);
            if (!held) return { manifest: null };
            const { manifest, signed } = held;
            if (isRequester(manifest, env.from.did)) return { manifest: signed };
            const granter = granterOf(manifest);
            // The node's own roots and revocations count on the requester; the job's revocations everywhere.
            const own = actor.system.isHere(manifest.requester ?? manifest.node) ? deps.trust : undefined;
            const revoked = revocations.revokers(payload.job_id);
            const trust: ReadTrust = { isRoot: own?.isRoot?.bind(own), revokers: (id) => revoked.get(id) ?? own?.revokers?.(id) };
            const refused = readRefusal(env.cap, env.from.did, payload.job_id, granter, trust);
            if (refused) {
              throw new DmsError('forbidden', `the manifest of job ${payload.job_id} is its requester's, and whoever it grants ${jobReadCapability(payload.job_id)}, only: ${refused}`);
            }
            return { manifest: signed };
          },
        }),
        defineBehavior({
          name: OutputsBehaviors.read,
          payload: ReadRequest,
          handle: async ({ payload }) => {
            const cap = payload.grant ? encodeTokenList([parseGrant(payload.grant)]) : undefined;
            const reply = await actor.call(at(OUTPUTS_INBOX, payload.from), OutputsBehaviors.manifest, { job_id: payload.job_id }, ManifestReply, { ttlMs: MANIFEST_TTL_MS, cap });
            if (!reply.manifest) throw notFound(`node ${payload.from} holds no manifest of job ${payload.job_id}`);
            const manifest = openManifest(reply.manifest, { job: payload.job_id });
            // Signed by the node that ran it, wherever it came from; and only the job's own nodes are asked.
            if (manifest.node !== payload.from && manifest.requester !== payload.from) {
              throw new DmsError('forbidden', `node ${payload.from} answered with a manifest of job ${payload.job_id}, which it neither ran nor requested`);
            }
            return { manifest: reply.manifest };
          },
        }),
        defineBehavior({
          name: OutputsBehaviors.revoke,
          payload: RevokeRequest,
          handle: ({ payload, env }) => {
            const manifest = heldManifest(payload.job_id)?.manifest;
            if (!manifest) return { held: false };
            // Checked in order of cost: a stranger pays for no signature check.
            if (!isRequester(manifest, env.from.did)) {
              throw new DmsError('forbidden', `only job ${payload.job_id}'s requester revokes its read rights`);
            }
            let token;
            try {
              token = tokenFromText(payload.revocation, 'revocation');
            } catch (e) {
              throw invalid(errorText(e));
            }
            const problem = revocationProblem(token, granterOf(manifest));
            if (problem) throw invalid(`revocation: ${problem}`);
            revocations.add(payload.job_id, token, { provider: null, acked: true });
            return { held: true };
          },
        }),
        defineBehavior({
          name: OutputsBehaviors.revokeGrant,
          payload: RevokeGrantRequest,
          handle: async ({ payload }) => {
            const provider = payload.provider && !actor.system.isHere(payload.provider) ? payload.provider : null;
            // Revoking again answers with the revocation made the first time (and tells the provider, if it still must be).
            const key = actor.system.key;
            let token = revocations.read(payload.job_id).revocations.find((r) => r.token.rev === payload.grant_id && r.token.iss === key.did)?.token;
            if (!token) {
              // As long as any right it revokes could live: a grant lives at most MAX_GRANT_S.
              token = issueRevocation(key, payload.grant_id, nowNs() + msToNs(MAX_GRANT_S * 1000));
              revocations.add(payload.job_id, token, { provider, acked: provider === null });
            }
            let acknowledged = provider === null;
            if (provider) {
              tellLater(payload.job_id);
              try {
                acknowledged = await tellProvider(actor, revocations, payload.job_id);
                if (acknowledged) untold.delete(payload.job_id);
              } catch (e) {
                log.info({ job: payload.job_id, provider, err: errorText(e) }, 'job read right revoked here; its provider will be told when it answers');
              }
            }
            return RevokeGrantReply.parse({ job: payload.job_id, revoked: payload.grant_id, revocation: tokenToText(token), provider: { node: provider, acknowledged } });
          },
        }),
        defineBehavior({
          name: OutputsBehaviors.grant,
          payload: GrantRequest,
          handle: ({ payload }) => {
            const cap = jobReadCapability(payload.job_id);
            const expiresMs = Date.now() + payload.expiry_s * 1000;
            const token = issueToken(actor.system.key, { act: 'invoke', aud: payload.did, cap: [cap], exp: msToNs(expiresMs) });
            const issued = { id: tokenId(token), did: payload.did, cap, expires_at: new Date(expiresMs).toISOString() };
            // Recorded before it is handed out: a right nobody can find again could not be revoked.
            deps.manifests.grants.add(payload.job_id, issued);
            return GrantReply.parse({ token: tokenToText(token), job: payload.job_id, ...issued });
          },
        }),
        defineBehavior({
          name: OutputsBehaviors.grants,
          payload: GrantsRequest,
          handle: ({ payload }) => {
            const { provider, revocations: held } = revocations.read(payload.job_id);
            const revoked = new Map(held.map((r) => [r.token.rev!, r.acked]));
            return GrantsReply.parse({
              grants: deps.manifests.grants.list(payload.job_id).map((g) => ({
                ...g,
                revoked: revoked.has(g.id),
                provider_acknowledged: revoked.has(g.id) && provider ? revoked.get(g.id)! : null,
              })),
            });
          },
        }),
      ],
    };
  },
});

/** Whether `did` is the key of the job's requester (a job of the provider's own has none). */
const isRequester = (manifest: { requester: string | null }, did: string): boolean => manifest.requester !== null && didOfPeer(manifest.requester) === did;

const MANIFEST_TTL_MS = 10_000;
/** How soon revocations a job's provider has not acknowledged are told to it again, at first and at most. */
const RETELL_MS = 5_000;
const RETELL_MAX_MS = 10 * 60_000;
const TELL_TTL_MS = 5_000;

/**
 * Tells the job's provider the revocations of its read rights it has not acknowledged, in
 * order; resolves true once it holds them all (or the job ran here), false while it has no
 * manifest of the job yet; rejects when it cannot be reached or refuses.
 */
export async function tellProvider(actor: Actor, revocations: ReadRevocations, jobId: string): Promise<boolean> {
  const { provider, revocations: held } = revocations.read(jobId);
  const untold = held.filter((r) => !r.acked);
  if (untold.length === 0) return true;
  const acked = new Set<string>();
  try {
    for (const r of untold) {
      if (provider && !actor.system.isHere(provider)) {
        const reply = await actor.call(at(OUTPUTS_INBOX, provider), OutputsBehaviors.revoke, { job_id: jobId, revocation: tokenToText(r.token) }, RevokeReply, { ttlMs: TELL_TTL_MS });
        if (!reply.held) break;
      }
      acked.add(tokenId(r.token));
    }
  } finally {
    if (acked.size > 0) revocations.acknowledge(jobId, acked);
  }
  return acked.size === untold.length;
}

/**
 * Asks `node`, which ran job `jobId` for this node, for its signed manifest, checks it (signed
 * by that node, about that job, for this node) and writes it for the orchestrator to store with
 * the job's end. Rejects naming what was wrong; writes nothing then.
 */
export async function fetchManifest(actor: Actor, node: string, jobId: string, manifests: ManifestFiles): Promise<void> {
  const reply = await actor.call(at(OUTPUTS_INBOX, node), OutputsBehaviors.manifest, { job_id: jobId }, ManifestReply, { ttlMs: MANIFEST_TTL_MS });
  if (!reply.manifest) return;
  const manifest = openManifest(reply.manifest, { job: jobId, node, requester: actor.system.host });
  manifests.write(jobId, { manifest: reply.manifest, outputs: manifest.outputs });
  // The provider answers reads from now on: the read rights revoked meanwhile go to it first.
  await tellProvider(actor, manifests.revocations, jobId).catch((e: unknown) =>
    actor.system.log.debug({ job: jobId, err: errorText(e) }, 'job read right revocation not told to its provider yet'),
  );
}
