/**
 * The provider's answer to a node asking for the manifest of a job it ran here or requested from
 * here (inbox `outputs`), the requester's asking (`fetchManifest`, called by the remote executor
 * when the job ends there), and a reader's asking for a job granted to it (`/dms/outputs/read`).
 * A manifest goes to the job's requester, and to whoever holds a read right of the job its
 * requester granted (behaviors/jobs/read-right.ts); everyone else is refused, naming why.
 */
import { defineBehavior } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { didOfPeer } from '../../runtime/crypto/keys.js';
import { DmsError, notFound } from '../../runtime/errors.js';
import type { Actor } from '../../runtime/actor.js';
import { encodeTokenList } from '../../runtime/capability/token.js';
import { at } from '../../runtime/wire/envelope.js';
import { ManifestReply, ManifestRequest, openManifest, OUTPUTS_INBOX, OutputsBehaviors, ReadRequest } from '../../behaviors/jobs/manifest.js';
import { granterOf, jobReadCapability, parseGrant, type ReadTrust, readRefusal } from '../../behaviors/jobs/read-right.js';
import type { ManifestFiles } from './manifest-files.js';

export interface OutputsDeps {
  manifests: ManifestFiles;
  /** This node's roots and revocations: on the requester, its operator may grant reads too. */
  trust?: ReadTrust;
}

export const OutputsActor = defineActor({
  inbox: OUTPUTS_INBOX,
  concurrency: 'node',
  create: ({ actor, deps }: ActorContext<OutputsDeps>) => ({
    behaviors: [
      defineBehavior({
        name: OutputsBehaviors.manifest,
        payload: ManifestRequest,
        handle: ({ payload, env }) => {
          const file = deps.manifests.read(payload.job_id);
          if (!file) return { manifest: null };
          const manifest = openManifest(file.manifest, { job: payload.job_id });
          if (manifest.requester && didOfPeer(manifest.requester) === env.from.did) return { manifest: file.manifest };
          const granter = granterOf(manifest);
          const trust = actor.system.isHere(manifest.requester ?? manifest.node) ? deps.trust : undefined;
          const refused = readRefusal(env.cap, env.from.did, payload.job_id, granter, trust);
          if (refused) {
            throw new DmsError('forbidden', `the manifest of job ${payload.job_id} is its requester's, and whoever it grants ${jobReadCapability(payload.job_id)}, only: ${refused}`);
          }
          return { manifest: file.manifest };
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
    ],
  }),
});

const MANIFEST_TTL_MS = 10_000;

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
}
