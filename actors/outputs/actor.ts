/**
 * The provider's answer to a requester asking for the manifest of a job it ran here (inbox
 * `outputs`), and the requester's asking (`fetchManifest`, called by the remote executor when
 * the job ends there). The manifest goes to the job's requester only: the envelope must be
 * signed by the key of the node the manifest names as requester.
 */
import { defineBehavior } from '../../runtime/behavior.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { didOfPeer } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import type { Actor } from '../../runtime/actor.js';
import { at } from '../../runtime/wire/envelope.js';
import { ManifestReply, ManifestRequest, openManifest, OUTPUTS_INBOX, OutputsBehaviors } from '../../behaviors/jobs/manifest.js';
import type { ManifestFiles } from './manifest-files.js';

export interface OutputsDeps {
  manifests: ManifestFiles;
}

export const OutputsActor = defineActor({
  inbox: OUTPUTS_INBOX,
  concurrency: 'node',
  create: ({ deps }: ActorContext<OutputsDeps>) => ({
    behaviors: [
      defineBehavior({
        name: OutputsBehaviors.manifest,
        payload: ManifestRequest,
        handle: ({ payload, env }) => {
          const file = deps.manifests.read(payload.job_id);
          if (!file) return { manifest: null };
          const { requester } = openManifest(file.manifest, { job: payload.job_id });
          if (!requester || didOfPeer(requester) !== env.from.did) {
            throw new DmsError('forbidden', `the manifest of job ${payload.job_id} is its requester's only`);
          }
          return { manifest: file.manifest };
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
