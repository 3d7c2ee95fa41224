import { Subject } from 'rxjs';
import { Actor, type ActorOptions, type Inbox } from './actor.js';
import type { Behavior } from './behavior.js';
import { isPeerId, type KeyPair } from './crypto/keys.js';
import { signEnvelope, verifyEnvelope } from './crypto/signing.js';
import { DmsError, errorText, invalid } from './errors.js';
import type { Logger } from './log.js';
import type { MailboxOptions } from './mailbox.js';
import { ReplayCache } from './replay.js';
import { isExpired, nextNonce } from './time.js';
import type { Arrival, Transport } from './transport.js';
import { encodePayload, type Envelope, isBroadcast } from './wire/envelope.js';

/** Everything observable about the system, for dev-mode streams. */
export type SystemEvent =
  | { type: 'deliver'; actor: string; env: Envelope }
  | { type: 'route'; env: Envelope; origin: Origin['kind'] }
  | { type: 'dead-letter'; env: Envelope; reason: string }
  | { type: 'lifecycle'; actor: string; state: string };

/** Who handed the system an envelope. Local actors' own envelopes skip verification. */
export type Origin =
  | { kind: 'local' }
  /** A REST caller; `trusted` when the node itself signed it for an unsigned local caller. */
  | { kind: 'rest'; trusted: boolean }
  | { kind: 'network'; arrival: Arrival };

/** Decides whether an envelope may run a behavior; throws a `forbidden` DmsError if not. */
export type Authorizer = (env: Envelope, behavior: Behavior<any, any>, inbox: Inbox) => void | Promise<void>;

export interface SystemOptions {
  key: KeyPair;
  log: Logger;
  mailbox: MailboxOptions;
  replayCapacity: number;
}

/**
 * The node's actor kernel: binds inboxes to actors, checks every envelope that enters from
 * outside (signature, did/id, expiry, replay), and routes by `to.addr.host` and `opt.topic`.
 */
export class ActorSystem {
  readonly key: KeyPair;
  readonly host: string;
  readonly log: Logger;
  readonly mailboxDefaults: MailboxOptions;
  readonly replay: ReplayCache;
  readonly events = new Subject<SystemEvent>();
  private readonly routes = new Map<string, Inbox>();
  private readonly topics = new Map<string, Set<Inbox>>();
  private readonly actors = new Map<string, Actor>();
  private transport?: Transport;
  private authorizer: Authorizer = () => {};

  constructor(opts: SystemOptions) {
    this.key = opts.key;
    this.host = opts.key.peerId;
    this.log = opts.log;
    this.mailboxDefaults = opts.mailbox;
    this.replay = new ReplayCache(opts.replayCapacity);
  }

  // --- actors and inboxes ----------------------------------------------------------------

  spawn(options: ActorOptions): Actor {
    if (this.routes.has(options.inbox)) throw new DmsError('conflict', `inbox ${options.inbox} is already bound`);
    const actor = new Actor(this, options);
    this.actors.set(actor.name, actor);
    actor.start();
    return actor;
  }

  /** Registers a custom actor instance (a subclass) and starts it. */
  adopt<A extends Actor>(actor: A): A {
    if (this.routes.has(actor.name)) throw new DmsError('conflict', `inbox ${actor.name} is already bound`);
    this.actors.set(actor.name, actor);
    actor.start();
    return actor;
  }

  actor(name: string): Actor | undefined {
    return this.actors.get(name);
  }

  listActors(): Actor[] {
    return [...this.actors.values()];
  }

  bind(inbox: Inbox): void {
    const bound = this.routes.get(inbox.name);
    if (bound && bound !== inbox) throw new DmsError('conflict', `inbox ${inbox.name} is already bound`);
    this.routes.set(inbox.name, inbox);
  }

  unbind(inbox: Inbox): void {
    if (this.routes.get(inbox.name) === inbox) this.routes.delete(inbox.name);
    for (const [topic, set] of this.topics) if (set.delete(inbox) && set.size === 0) this.dropTopic(topic);
  }

  unbindAll(actor: Actor): void {
    for (const inbox of [...this.routes.values()]) if (inbox.actor === actor) this.unbind(inbox);
  }

  inbox(name: string): Inbox | undefined {
    return this.routes.get(name);
  }

  subscribe(topic: string, inbox: Inbox): void {
    let set = this.topics.get(topic);
    if (!set) {
      set = new Set();
      this.topics.set(topic, set);
      this.transport?.subscribe(topic);
    }
    set.add(inbox);
  }

  unsubscribe(topic: string, inbox: Inbox): void {
    const set = this.topics.get(topic);
    if (set?.delete(inbox) && set.size === 0) this.dropTopic(topic);
  }

  private dropTopic(topic: string): void {
    this.topics.delete(topic);
    this.transport?.unsubscribe(topic);
  }

  subscribedTopics(): string[] {
    return [...this.topics.keys()];
  }

  // --- policy, network, observation ------------------------------------------------------

  setAuthorizer(authorizer: Authorizer): void {
    this.authorizer = authorizer;
  }

  authorize(env: Envelope, behavior: Behavior<any, any>, inbox: Inbox): void | Promise<void> {
    return this.authorizer(env, behavior, inbox);
  }

  attachTransport(transport: Transport): void {
    this.transport = transport;
    for (const topic of this.topics.keys()) transport.subscribe(topic);
    transport.onEnvelope((env, arrival) => {
      this.accept(env, { kind: 'network', arrival }).catch((e) => this.refuseRemote(env, arrival, e));
    });
  }

  get network(): Transport | undefined {
    return this.transport;
  }

  emit(event: SystemEvent): void {
    if (this.events.observed) this.events.next(event);
  }

  deadLetter(env: Envelope, reason: string): void {
    this.log.debug({ be: env.be, to: env.to.addr, reason }, 'dead letter');
    this.emit({ type: 'dead-letter', env, reason });
  }

  // --- entry and routing -----------------------------------------------------------------

  /**
   * Admits an envelope from outside the node's own actors (REST, network) and routes it.
   * Throws an `invalid` DmsError when it must not be delivered (WIRE.md "Delivery rules").
   */
  async accept(env: Envelope, origin: Origin): Promise<void> {
    if (isExpired(env.opt.exp)) throw invalid('envelope expired: opt.exp is in the past');
    const trusted = origin.kind === 'local' || (origin.kind === 'rest' && origin.trusted);
    if (!trusted) await verifyEnvelope(env);
    if (origin.kind === 'network' && origin.arrival.via === 'unicast' && env.from.addr.host !== origin.arrival.peer) {
      throw invalid(`from.addr.host ${env.from.addr.host || '(empty)'} is not the sending peer ${origin.arrival.peer}`);
    }
    this.replay.admit(env.from.id, env.nonce, env.opt.exp);
    await this.route(env, origin);
  }

  /** Delivers a checked envelope: locally, to its remote host, or to every subscriber of its topic. */
  async route(env: Envelope, origin: Origin = { kind: 'local' }): Promise<void> {
    this.emit({ type: 'route', env, origin: origin.kind });
    if (isBroadcast(env)) return this.broadcast(env, origin);
    const host = env.to.addr.host;
    if (host === '' || host === this.host) return this.deliverLocal(env);
    if (!isPeerId(host)) throw invalid(`to.addr.host '${host.slice(0, 80)}' is not a peer id`);
    if (!this.transport) throw new DmsError('unroutable', `cannot reach host ${host}: the network is not running on this node`);
    await this.transport.send(env);
  }

  /** Queues an envelope for a local inbox; throws `not_found` at once for an unknown inbox or behavior. */
  deliverLocal(env: Envelope): void {
    const inbox = this.routes.get(env.to.addr.inbox);
    if (!inbox) throw new DmsError('not_found', `no actor with inbox '${env.to.addr.inbox}' on this node`);
    if (!inbox.behaviors.has(env.be)) throw new DmsError('not_found', `actor ${inbox.name} has no behavior ${env.be}`);
    inbox.actor.deliver(env, inbox);
  }

  private async broadcast(env: Envelope, origin: Origin): Promise<void> {
    const topic = env.opt.topic;
    if (!topic) throw invalid('opt.topic is required for a broadcast');
    for (const inbox of this.topics.get(topic) ?? []) {
      if (!inbox.behaviors.has(env.be)) continue;
      try {
        inbox.actor.deliver(env, inbox);
      } catch (e) {
        this.deadLetter(env, errorText(e));
      }
    }
    // Gossip propagates on its own; only envelopes that start here are published.
    if (this.transport && origin.kind !== 'network') await this.transport.publish(env);
  }

  /**
   * A remote envelope that could not be delivered: when the sender waits for a reply, tell it
   * why at once instead of letting it time out.
   */
  private refuseRemote(env: Envelope, arrival: Arrival, e: unknown): void {
    const reason = errorText(e);
    this.log.debug({ peer: arrival.peer, be: env.be, reason }, 'remote envelope refused');
    this.deadLetter(env, reason);
    // Never answer an envelope whose origin is unproven: it could aim our replies at a third party.
    const answerable = e instanceof DmsError && (e.kind === 'not_found' || e.kind === 'forbidden' || e.kind === 'overloaded' || e.kind === 'unavailable');
    if (!answerable || !env.opt.cont || isExpired(env.opt.exp)) return;
    const reply: Envelope = {
      to: env.from,
      be: env.opt.cont,
      from: { id: this.key.id, did: this.key.did, addr: { host: this.host, inbox: env.to.addr.inbox || 'root' } },
      nonce: nextNonce(),
      opt: { exp: env.opt.exp },
      msg: encodePayload({ error: reason }),
    };
    signEnvelope(reply, this.key)
      .then((signed) => this.route(signed))
      .catch((err) => this.log.debug({ err: errorText(err) }, 'refusal not delivered'));
  }

  async stop(): Promise<void> {
    await Promise.all([...this.actors.values()].map((a) => a.stop()));
    await this.transport?.stop();
  }
}
