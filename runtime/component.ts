/**
 * The one way to make a component actor (root, discovery, orchestrator, resource manager,
 * executors, the HTTP actor, plugins), in the style of js-libp2p's components: a definition
 * says what the actor is (inbox, topics, mailbox concurrency), and its `create` receives the
 * dependencies injected and typed and returns the actor's behaviors, what others may call on
 * it, and how it starts and stops. Nothing about a component lives at module level: two nodes
 * in one process share nothing.
 *
 *   const Greeter = defineActor({
 *     inbox: 'greeter',
 *     concurrency: 1,                       // one envelope at a time: handlers share state
 *     create: ({ deps }: ActorContext<{ greeting: string }>) => ({
 *       behaviors: [defineBehavior({ name: '/greet', handle: () => deps.greeting })],
 *     }),
 *   });
 *   const greeter = await makeActor(system, Greeter, { greeting: 'hi' });
 *   await greeter.start();
 */
import type { AnyActorLogic, Actor as MachineActor, ActorOptions as MachineOptions } from 'xstate';
import { Actor } from './actor.js';
import type { Behavior } from './behavior.js';
import type { KeyPair } from './crypto/keys.js';
import type { Logger } from './log.js';
import type { ActorSystem } from './system.js';

/** What a component's `create` is given. */
export interface ActorContext<Deps> {
  /** The kernel actor: its handle, `invoke`/`send`, extra inboxes. Bound to its inbox only at start. */
  actor: Actor;
  system: ActorSystem;
  log: Logger;
  deps: Deps;
  /**
   * Creates an xstate actor owned by this component, observed by the node's one inspector:
   * every transition of it becomes a `transition` system event naming this actor.
   */
  machine<L extends AnyActorLogic>(logic: L, options?: MachineOptions<L>): MachineActor<L>;
}

/** What a component's `create` returns. */
export interface ActorBody<Api extends object = object> {
  behaviors: Behavior<any, any>[];
  /** What other parts of the node may call directly (tests, the composition root); default none. */
  api?: Api;
  /** After the inbox is bound and its topics subscribed: recover state, start timers. */
  start?(): Promise<void> | void;
  /** Before the inbox is unbound and the mailbox drained: stop timers, commit what is pending. */
  stop?(): Promise<void> | void;
}

export interface ActorDefinition<Deps, Api extends object = object> {
  /** The primary inbox, which also names the actor in errors, events and logs. */
  inbox: string;
  /** Broadcast topics the primary inbox subscribes to. */
  topics?: readonly string[];
  /**
   * Envelopes handled at once. Each actor states its choice: 1 where handlers share state
   * that an await could expose half-changed, more where handlers wait on I/O and are
   * independent, 'node' for the node's `actor.mailbox_concurrency`.
   */
  concurrency: number | 'node';
  /** Envelopes waiting or in progress before the next is refused; default `actor.mailbox_capacity`. */
  capacity?: number;
  /** The actor's own key; default the node's. */
  key?: KeyPair;
  create(ctx: ActorContext<Deps>): ActorBody<Api> | Promise<ActorBody<Api>>;
}

/** A component made and not yet started, or running. */
export interface Component<Api extends object = object> {
  readonly name: string;
  readonly actor: Actor;
  readonly api: Api;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Keeps Deps and Api inferred from `create`. */
export function defineActor<Deps, Api extends object = object>(def: ActorDefinition<Deps, Api>): ActorDefinition<Deps, Api> {
  return def;
}

/** Makes the component: spawns its kernel actor unbound and runs `create`. `start()` binds it. */
export async function makeActor<Deps, Api extends object>(
  system: ActorSystem,
  def: ActorDefinition<Deps, Api>,
  deps: Deps,
): Promise<Component<Api>> {
  const concurrency = def.concurrency === 'node' ? system.mailboxDefaults.concurrency : def.concurrency;
  const actor = system.register(
    new Actor(system, {
      inbox: def.inbox,
      key: def.key,
      topics: def.topics ? [...def.topics] : undefined,
      mailbox: { concurrency, ...(def.capacity ? { capacity: def.capacity } : {}) },
    }),
  );
  const log = system.log.child({ actor: def.inbox });
  let body: ActorBody<Api>;
  try {
    body = await def.create({ actor, system, log, deps, machine: (logic, options) => system.machine(def.inbox, logic, options) });
  } catch (e) {
    system.forget(actor);
    throw e;
  }
  for (const b of body.behaviors) actor.add(b);
  let started = false;
  const stop = async () => {
    if (started) await body.stop?.();
    started = false;
    await actor.stop();
    system.forget(actor);
  };
  return {
    name: def.inbox,
    actor,
    api: body.api ?? ({} as Api),
    async start() {
      actor.start();
      started = true;
      try {
        await body.start?.();
      } catch (e) {
        await stop();
        throw e;
      }
    },
    stop,
  };
}
