import { channel } from 'node:diagnostics_channel';
import { Observable } from 'rxjs';
import type { AnyActorLogic, Actor as MachineActor, ActorOptions as MachineOptions } from 'xstate';
import { Actor, type ActorOptions, type Inbox } from './actor.js';
import { type Behavior, behaviorLabel, isReplyWaiter, notWaiting, replyFromHost } from './behavior.js';
import { isPeerId, type KeyPair } from './crypto/keys.js';
import { checkEnvelope, envelopeChecks, signEnvelope } from './crypto/signing.js';
import { checksOnThread } from './crypto/verify-thread.js';
import { errorReply } from './error-reply.js';
import { DmsError, errorText, invalid } from './errors.js';
import type { Logger } from './log.js';
import { MachineInspector, type Transition } from './machine-inspector.js';
import { type MailboxOptions, OWN_SENDER } from './mailbox.js';
import type { NodeMetrics } from './metrics.js';
import { stageEnd, stageStart } from './stage-timings.js';
import { ReplayCache, type ReplayOwner, TRUSTED } from './replay.js';
import { isExpired, nextNonce, nowNs } from './time.js';
import type { Arrival, Transport } from './transport.js';
import { encodePayload, type Envelope, isBroadcast } from './wire/envelope.js';

/** Everything observable about the system, for dev-mode streams. */
export type SystemEvent =
  /**
   * An actor's mailbox took an envelope up: how it was found trustworthy where it entered the
   * node, and for a reply to an invoke or broadcast, how long after the request it came.
   */
  | { type: 'deliver'; actor: string; env: Envelope; verified?: Verification; replyMs?: number }
  /** An actor of this node sent an envelope (to this node, another, or a topic). */
  | { type: 'send'; actor: string; env: Envelope }
  | { type: 'dead-letter'; env: Envelope; reason: string }
  | { type: 'lifecycle'; actor: string; state: string }
  /** A state machine owned by `actor` moved from one state to another on `event`. */
  | Transition;

/**
 * How an envelope was found trustworthy: its signature checked where it entered (`signature`),
 * by the gossip topic validator (`validator`), signed by this node for a trusted local REST
 * caller (`node`), or sent by an actor of this node (`local`).
 */
export type Verification = 'signature' | 'validator' | 'node' | 'local';

function verificationOf(origin: Origin): Verification {
  if (origin.kind === 'local') return 'local';
  if (origin.kind === 'rest') return origin.trusted ? 'node' : 'signature';
  return origin.arrival.signatureVerified ? 'validator' : 'signature';
}

/**
 * Whose turn an envelope takes in its actor's mailbox (mailbox.ts), and the group whose share it
 * counts against: the peer that handed it over, grouped with the other peers of its host (on
 * gossip, the publisher alone), the REST client, or the node itself for its own actors and the
 * operator's unsigned calls.
 */
function senderOf(origin: Origin): [sender: string, group: string] {
  if (origin.kind === 'local') return [OWN_SENDER, OWN_SENDER];
  // The operator's unsigned calls, which the node signs, share the node's group: bounded by the capacity alone.
  if (origin.kind === 'rest') return origin.trusted ? ['rest', OWN_SENDER] : [`rest:${origin.client ?? 'local'}`, `rest:${origin.client ?? 'local'}`];
  const peer = `peer:${origin.arrival.peer}`;
  return [peer, origin.arrival.host === undefined ? peer : `host:${origin.arrival.host}`];
}

/** Who handed the system an envelope. Local actors' own envelopes skip verification. */
export type Origin =
  | { kind: 'local' }
  /**
   * A REST caller; `trusted` when the node itself signed it for an unsigned local caller.
   * `client` is what its limits count against (its principal, else its address).
   */
  | { kind: 'rest'; trusted: boolean; client?: string }
  | { kind: 'network'; arrival: Arrival };

/** Decides whether an envelope may run a behavior; throws a `forbidden` DmsError if not. */
export type Authorizer = (env: Envelope, behavior: Behavior<any, any>, inbox: Inbox) => void | Promise<void>;

/** Whether a verified envelope's sender is trusted (the node's own keys, its roots): it may use the replay reserve. */
export type SenderTrust = (env: Envelope) => boolean;

/**
 * How an envelope is routed: a reply (made by the kernel for a request's `opt.cont`) may only
 * reach a behavior that waits for replies, never an ordinary one (see `deliverLocal`).
 */
export interface RouteOptions {
  reply?: boolean;
}

export interface SystemOptions {
  key: KeyPair;
  log: Logger;
  mailbox: MailboxOptions;
  /** The replay cache, persistent or not; defaults to an in-memory one of `replayCapacity` entries. */
  replay?: ReplayCache;
  replayCapacity?: number;
  /** How far ahead `opt.exp` may be, in seconds (`actor.max_ttl_s`); default 900. */
  maxTtlS?: number;
  /** The node's Prometheus metrics; none by default (tests, benches). */
  metrics?: NodeMetrics;
}

/**
 * The kernel's events (dev mode's stream) on the diagnostics channel `dms:event`, each with the
 * system it happened in: several nodes in one process publish on the one channel. The kernel
 * builds events only while the channel has a subscriber (`watched`), so with nobody watching an
 * event costs one `hasSubscribers` check. `ActorSystem.events` is one system's share of it.
 */
export const eventChannel = channel('dms:event');
export interface PublishedEvent {
  system: ActorSystem;
  event: SystemEvent;
}

const DEFAULT_MAX_TTL_S = 900;
const DEFAULT_REPLAY_CAPACITY = 1_000_000;

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
  private eventWatchers = 0;
  /**
   * What happens in the kernel and its machines, as it happens: this system's events of
   * `dms:event`. Built only while watched; the metrics count this system's watchers.
   */
  readonly events = new Observable<SystemEvent>((subscriber) => {
    const forward = (message: unknown) => {
      const m = message as PublishedEvent;
      if (m.system === this) subscriber.next(m.event);
    };
    this.eventWatchers++;
    eventChannel.subscribe(forward);
    this.inspector.sync();
    return () => {
      this.eventWatchers--;
      eventChannel.unsubscribe(forward);
      this.inspector.sync();
    };
  });
  readonly metrics?: NodeMetrics;
  private readonly routes = new Map<string, Inbox>();
  private readonly topics = new Map<string, Set<Inbox>>();
  private readonly actors = new Map<string, Actor>();
  private transport?: Transport;
  private authorizer: Authorizer = () => {};
  private senderTrust: SenderTrust = () => false;
  /** The libp2p peer each envelope from the network came from, authenticated by its connection. */
  private readonly arrivedFrom = new WeakMap<Envelope, string>();
  private readonly maxTtlS: number;
  private readonly maxTtlNs: bigint;
  private readonly inspector = new MachineInspector(
    () => this.watched,
    (t) => this.emit(t),
  );

  constructor(opts: SystemOptions) {
    this.key = opts.key;
    this.host = opts.key.peerId;
    this.log = opts.log;
    this.mailboxDefaults = opts.mailbox;
    const capacity = opts.replayCapacity ?? DEFAULT_REPLAY_CAPACITY;
    this.replay = opts.replay ?? new ReplayCache({ capacity, perSender: capacity });
    this.maxTtlS = opts.maxTtlS ?? DEFAULT_MAX_TTL_S;
    this.maxTtlNs = BigInt(this.maxTtlS) * 1_000_000_000n;
    this.metrics = opts.metrics;
    this.metrics?.gauge('dms_mailbox_depth', "Envelopes waiting or in progress in each actor's mailbox", ['actor'], (set) => {
      for (const a of this.actors.values()) set({ actor: a.name }, a.load.depth);
    });
    this.metrics?.gauge('dms_peers', 'Peers connected now', [], (set) => set({}, this.transport?.peers().length ?? 0));
    // This node's dev stream watchers (the kernel builds events while anyone subscribes to dms:event).
    this.metrics?.gauge('dms_event_watchers', "Watchers of the system event stream (dev mode's live streams)", [], (set) => set({}, this.eventWatchers));
    this.metrics?.gauge(
      'dms_envelope_signature_checks',
      'Envelope signatures this process checked since it started, by where: thread (in batches on the verify thread, while the event loop was busy with other envelopes) or loop (the rest)',
      ['on'],
      (set) => {
        const thread = checksOnThread();
        set({ on: 'loop' }, envelopeChecks.total - thread);
        set({ on: 'thread' }, thread);
      },
    );
  }

  /** Whether `host` names this node: its peer id, or empty (an address on whatever node reads it). */
  isHere(host: string): boolean {
    return host === '' || host === this.host;
  }

  /** Whether two hosts name the same node (empty and this node's peer id both mean this node). */
  sameHost(a: string, b: string): boolean {
    return a === b || (this.isHere(a) && this.isHere(b));
  }

  // --- actors and inboxes ----------------------------------------------------------------

  /** Registers an actor without starting it (runtime/component.ts starts it when the node does). */
  register<A extends Actor>(actor: A): A {
    if (this.routes.has(actor.name) || this.actors.has(actor.name)) throw new DmsError('conflict', `inbox ${actor.name} is already bound`);
    this.actors.set(actor.name, actor);
    return actor;
  }

  /** Drops a stopped actor from the system's list. */
  forget(actor: Actor): void {
    if (this.actors.get(actor.name) === actor) this.actors.delete(actor.name);
  }

  /**
   * Creates (does not start) an xstate actor owned by the actor at inbox `owner`: while anyone
   * watches, each change of its state (and of the machines it invokes) is a `transition` event.
   */
  machine<L extends AnyActorLogic>(owner: string, logic: L, options: MachineOptions<L> = {} as MachineOptions<L>): MachineActor<L> {
    return this.inspector.machine(owner, logic, options);
  }

  actor(name: string): Actor | undefined {
    return this.actors.get(name);
  }

  listActors(): Actor[] {
    return [...this.actors.values()];
  }

  /** Whether `id` is the node key's or one of its actors' (no allocation: it runs per envelope). */
  ownsKey(id: string): boolean {
    if (id === this.key.id) return true;
    for (const a of this.actors.values()) if (a.key.id === id) return true;
    return false;
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

  /** Installs who counts as trusted for the replay cache's reserve (the capability authority knows). */
  setSenderTrust(trust: SenderTrust): void {
    this.senderTrust = trust;
  }

  attachTransport(transport: Transport): void {
    this.transport = transport;
    for (const topic of this.topics.keys()) transport.subscribe(topic);
    transport.onEnvelope((env, arrival) => {
      this.arrivedFrom.set(env, arrival.peer);
      return this.accept(env, { kind: 'network', arrival }).catch((e) => this.refuseRemote(env, arrival, e));
    });
  }

  /** The peer a network envelope came from (the authorizer charges failed token checks to it); undefined for others. */
  peerOf(env: Envelope): string | undefined {
    return this.arrivedFrom.get(env);
  }

  get network(): Transport | undefined {
    return this.transport;
  }

  /** Whether anyone subscribes to `dms:event`: the kernel builds no event while nobody does. */
  get watched(): boolean {
    return eventChannel.hasSubscribers;
  }

  /** Publishes `event` on `dms:event`, tagged with this system (a process may hold several). */
  emit(event: SystemEvent): void {
    if (this.watched) eventChannel.publish({ system: this, event } satisfies PublishedEvent);
  }

  deadLetter(env: Envelope, reason: string): void {
    this.log.debug({ be: env.be, to: env.to.addr, reason }, 'dead letter');
    this.metrics?.envelope(this.labelOf(env), 'dead_letter');
    this.emit({ type: 'dead-letter', env, reason });
  }

  // --- entry and routing -----------------------------------------------------------------

  /**
   * Admits an envelope from outside the node's own actors (REST, network) and routes it.
   * Throws an `invalid` DmsError when it must not be delivered (README "How a request flows").
   */
  async accept(env: Envelope, origin: Origin): Promise<void> {
    if (!this.metrics) return this.admit(env, origin);
    try {
      await this.admit(env, origin);
    } catch (e) {
      this.metrics.envelope(this.labelOf(env), 'rejected');
      throw e;
    }
  }

  /**
   * The metrics label of an envelope's behavior: one of this node's own behaviors, or a bounded
   * stand-in, so no sender can make a series per name it invents.
   */
  private labelOf(env: Envelope): string {
    return behaviorLabel(this.routes.get(env.to.addr.inbox)?.behaviors.get(env.be));
  }

  private async admit(env: Envelope, origin: Origin): Promise<void> {
    const start = origin.kind === 'network' ? stageStart() : undefined;
    const now = nowNs();
    if (isExpired(env.opt.exp, now)) throw invalid('envelope expired: opt.exp is in the past');
    // Every accepted envelope holds a replay-cache entry until its exp: an unbounded exp would
    // hold it for good.
    if (env.opt.exp - now > this.maxTtlNs) throw invalid(`opt.exp is more than actor.max_ttl_s (${this.maxTtlS} s) ahead`);
    const trusted = origin.kind === 'local' || (origin.kind === 'rest' && origin.trusted);
    const verified = origin.kind === 'network' && origin.arrival.signatureVerified === true;
    if (!trusted && !verified) {
      const pending = this.verify(env);
      if (pending) await pending;
    }
    // Replies go to from.addr.host: on gossip as on unicast it must be the node the envelope
    // came from (for gossip the signed publisher), or anyone could aim replies at a third node.
    if (origin.kind === 'network' && env.from.addr.host !== origin.arrival.peer) {
      const role = origin.arrival.via === 'unicast' ? 'sending' : 'publishing';
      throw invalid(`from.addr.host ${env.from.addr.host || '(empty)'} is not the ${role} peer ${origin.arrival.peer}`);
    }
    // What the network sends is for this node's actors: relayed, a stranger would have this
    // node dial, look up and carry traffic on its word.
    if (origin.kind === 'network' && !isBroadcast(env) && !this.isHere(env.to.addr.host)) {
      throw new DmsError('forbidden', `to.addr.host ${env.to.addr.host.slice(0, 80)} is another node: this node relays nothing, send it there`);
    }
    this.replay.admit(env.from.id, env.nonce, env.opt.exp, now, this.replayOwner(env, origin));
    const routed = this.route(env, origin);
    if (routed) await routed;
    stageEnd(this.host, 'kernel.admit', start);
  }

  /**
   * Whose replay share a checked envelope counts against. A network envelope counts against the
   * peer it came from, authenticated by libp2p (on gossip, the signed publisher), whatever from.id
   * it carries, so throwaway keys over one connection fill only that peer's share. One the node
   * signed for an unsigned REST caller counts against the REST quota, not as the operator: only a
   * signature the node checked proves the operator's own (or its actors', its roots') envelope.
   */
  private replayOwner(env: Envelope, origin: Origin): ReplayOwner {
    if (origin.kind === 'local') return TRUSTED;
    if (origin.kind === 'rest' && origin.trusted) return { kind: 'rest-signed' };
    if (this.senderTrust(env)) return TRUSTED;
    if (origin.kind === 'rest') return { kind: 'rest-client', client: origin.client ?? 'local' };
    return { kind: 'peer', id: origin.arrival.peer };
  }

  /** Checks a signature; a promise only when the check went to the pool (crypto/signing.ts). */
  private verify(env: Envelope): void | Promise<void> {
    const start = stageStart();
    if (start === undefined) return checkEnvelope(env);
    const pending = checkEnvelope(env);
    if (!pending) return stageEnd(this.host, 'kernel.verify', start);
    return pending.then(() => stageEnd(this.host, 'kernel.verify', start));
  }

  /**
   * Delivers a checked envelope: locally, to its remote host, or to every subscriber of its
   * topic. A local delivery is queued before it returns, and then nothing is returned to await;
   * a promise only when the network or a broadcast has work left (an await of nothing still waits
   * behind every queued continuation: crypto/ed25519.ts). A refusal may be thrown synchronously.
   */
  route(env: Envelope, origin: Origin = { kind: 'local' }, opts: RouteOptions = {}): void | Promise<void> {
    if (this.watched && origin.kind === 'local') this.emit({ type: 'send', actor: env.from.addr.inbox, env });
    if (isBroadcast(env)) return this.broadcast(env, origin);
    const host = env.to.addr.host;
    if (this.isHere(host)) return this.deliverLocal(env, opts, origin);
    if (!isPeerId(host)) throw invalid(`to.addr.host '${host.slice(0, 80)}' is not a peer id`);
    if (!this.transport) throw new DmsError('unroutable', `cannot reach host ${host}: the network is not running on this node`);
    return this.transport.send(env);
  }

  /**
   * Queues an envelope for a local inbox; throws `not_found` at once for an unknown inbox or
   * behavior. A reply the node made itself is signed with a key the node trusts as its own:
   * delivered to an ordinary behavior it would run that behavior with the node's authority
   * (reply reflection), so it is dropped unless a reply waiter expects it.
   */
  deliverLocal(env: Envelope, opts: RouteOptions = {}, origin: Origin = { kind: 'local' }): void {
    const inbox = this.routes.get(env.to.addr.inbox);
    if (!inbox) throw new DmsError('not_found', `no actor with inbox '${env.to.addr.inbox}' on this node`);
    const behavior = inbox.behaviors.get(env.be);
    if (!behavior) throw new DmsError('not_found', `actor ${inbox.name} has no behavior ${env.be}`);
    if (opts.reply && !isReplyWaiter(behavior)) {
      this.deadLetter(env, notWaiting(inbox.name, env.be));
      return;
    }
    const askedHost = replyFromHost(behavior);
    if (askedHost !== undefined && !this.sameHost(env.from.addr.host, askedHost)) {
      // The waiter stays: the node that was asked may still answer.
      this.deadLetter(env, `reply to ${env.be} from ${env.from.addr.host || this.host} dropped: the request went to ${askedHost || this.host}`);
      return;
    }
    inbox.actor.deliver(env, inbox, opts.reply, verificationOf(origin), ...senderOf(origin));
  }

  private async broadcast(env: Envelope, origin: Origin): Promise<void> {
    const topic = env.opt.topic;
    if (!topic) throw invalid('opt.topic is required for a broadcast');
    const verified = verificationOf(origin);
    const [sender, group] = senderOf(origin);
    let taken = false;
    for (const inbox of this.topics.get(topic) ?? []) {
      if (!inbox.behaviors.has(env.be)) continue;
      taken = true;
      try {
        inbox.actor.deliver(env, inbox, false, verified, sender, group);
      } catch (e) {
        this.deadLetter(env, errorText(e));
      }
    }
    // One that came from elsewhere and no actor here takes is a dead letter; one that starts
    // here is meant for the other nodes as much as for this one.
    if (!taken && origin.kind !== 'local') this.deadLetter(env, `no actor here on topic ${topic} has behavior ${env.be}`);
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
      msg: encodePayload(errorReply(e)),
    };
    signEnvelope(reply, this.key)
      .then((signed) => this.route(signed, { kind: 'local' }, { reply: true }))
      .catch((err) => this.log.debug({ err: errorText(err) }, 'refusal not delivered'));
  }

  async stop(): Promise<void> {
    await Promise.all([...this.actors.values()].map((a) => a.stop()));
    await this.transport?.stop();
    this.replay.close();
  }
}
