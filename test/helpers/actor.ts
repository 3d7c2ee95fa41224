import type { Actor } from '../../runtime/actor.js';
import type { Behavior } from '../../runtime/behavior.js';
import { defineActor, makeActor } from '../../runtime/component.js';
import type { ActorSystem } from '../../runtime/system.js';

export interface TestActorOptions {
  inbox: string;
  behaviors?: Behavior<any, any>[];
  topics?: string[];
  /** Envelopes handled at once; default the system's. */
  concurrency?: number;
}

/**
 * A started actor with the given behaviors, made as the node makes every one of its own
 * (defineActor + makeActor): a caller, a stand-in for a component, a relay.
 */
export async function testActor(system: ActorSystem, { inbox, behaviors = [], topics, concurrency }: TestActorOptions): Promise<Actor> {
  const made = await makeActor(system, defineActor({ inbox, topics, concurrency: concurrency ?? 'node', create: () => ({ behaviors }) }), {});
  await made.start();
  return made.actor;
}
