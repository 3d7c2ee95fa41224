/**
 * This node's published profile (/public/describe): what a peer, or anyone, may read about
 * it. The device facts come from the resource manager by envelope, as any caller would get
 * them, so the profile never drifts from what `GET /api/v1/device/status` and
 * `/api/v1/resources/usage` say; what is left out (capacity of the whole machine, what is
 * allocated to whom, the operator) stays private.
 */
import type { NodeProfile } from '../behaviors/discovery.js';
import type * as z from 'zod';
import { DeviceBehaviors, DeviceSchema, RESOURCES_INBOX, ResourceBehaviors, UsageReply } from '../behaviors/jobs/resources.js';
import type { Actor } from '../runtime/actor.js';
import { errorText } from '../runtime/errors.js';

export interface ProfileSource {
  /** Software version of this node. */
  version: string;
  /** Executors this node runs jobs with. */
  executors: readonly string[];
  /** Listen multiaddrs now (they are known only once the network is up). */
  addrs: () => string[];
  /** The name to publish when the resource manager does not answer. */
  fallbackName: string;
}

// A local hop: the resource manager answers at once unless the node is stopping.
const LOCAL_TTL_MS = 5_000;
// Published addresses are bounded (NodeProfile): the first ones are the listen addresses proper.
const MAX_PUBLISHED_ADDRS = 8;

/** Builds the profile from the resource manager's answers; without them, the rest still describes the node. */
export async function describeSelf(actor: Actor, source: ProfileSource): Promise<NodeProfile> {
  const to = actor.local(RESOURCES_INBOX);
  const ask = async <S extends z.ZodType>(be: string, schema: S): Promise<z.output<S> | undefined> => {
    try {
      return await actor.call(to, be, {}, schema, { ttlMs: LOCAL_TTL_MS });
    } catch (e) {
      actor.system.log.debug({ be, err: errorText(e) }, 'profile: the resource manager did not answer');
      return undefined;
    }
  };
  const [device, usage] = await Promise.all([ask(DeviceBehaviors.status, DeviceSchema), ask(ResourceBehaviors.usage, UsageReply)]);
  return {
    name: device?.name ?? source.fallbackName,
    version: source.version,
    addrs: source.addrs().slice(0, MAX_PUBLISHED_ADDRS),
    location: device?.location ?? {},
    labels: device?.labels ?? {},
    // Until the operator onboards a share the node offers nothing to the network, though its
    // ledger lends its own jobs the whole machine: peers must not read that as an offer.
    onboarded: usage?.offered ? usage.onboarded : null,
    free: usage?.offered ? usage.free : null,
    executors: [...source.executors],
  };
}
