import { defineBehavior } from '../runtime/behavior.js';
import { packageVersion } from '../runtime/version.js';
import { type ActorContext, defineActor } from '../runtime/component.js';
import {
  EmptyPayload,
  HELLO_TOPIC,
  type HelloReply,
  NodeBehaviors,
  type StatusReply,
} from '../behaviors/root.js';

export const ROOT_INBOX = 'root';

/** This node's software version (package.json), as /public/status and /public/describe say it. */
export const NODE_VERSION: string = packageVersion();

/**
 * The node's root actor (inbox `root`): identity and health; discovery adds the peer view.
 * Its handlers read and compute, sharing no state an await could split: any concurrency will do.
 */
export const RootActor = defineActor({
  inbox: ROOT_INBOX,
  topics: [HELLO_TOPIC],
  concurrency: 'node',
  create: ({ system }: ActorContext<object>) => {
    const startedAt = Date.now();
    const hello = (): HelloReply => ({ did: system.key.did });
    return {
      behaviors: [
        defineBehavior({ name: NodeBehaviors.hello, payload: EmptyPayload, handle: hello }),
        defineBehavior({
          name: NodeBehaviors.status,
          payload: EmptyPayload,
          handle: (): StatusReply => ({
            status: 'ok',
            did: system.key.did,
            peer_id: system.host,
            version: NODE_VERSION,
            uptime_s: Math.round((Date.now() - startedAt) / 1000),
            actors: system.listActors().map((a) => a.name),
            peers: system.network?.peers().length ?? 0,
          }),
        }),
        defineBehavior({ name: NodeBehaviors.broadcastHello, payload: EmptyPayload, handle: hello }),
        // The /dms/node/peers/* behaviors are the discovery actor's, which adds them here too.
      ],
    };
  },
});
