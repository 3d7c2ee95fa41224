import type { Actor, Inbox } from '../runtime/actor.js';
import { replyWaiter } from '../runtime/behavior.js';
import { defaultConfig } from '../runtime/config.js';
import { signEnvelope, verifyEnvelope } from '../runtime/crypto/signing.js';
import type { KeyPair } from '../runtime/crypto/keys.js';
import { DmsError, invalid } from '../runtime/errors.js';
import type { ActorSystem, Origin } from '../runtime/system.js';
import { type Envelope, type Handle, isBroadcast, parseEnvelope } from '../runtime/wire/envelope.js';
import type { Role } from '../runtime/api-keys.js';
import { ClientBytes, envelopeBytes, type ByteClaim } from './reply-bytes.js';
import { checkRoleScope, type RolePaths } from './role-scope.js';

export const HTTP_INBOX = 'http';

export interface HttpActorOptions {
  /** The operator identity that signs unsigned envelopes from trusted local callers. */
  operator: KeyPair;
  allowUnsigned: boolean;
  /** REST requests waiting for replies at once. */
  maxPending: number;
  maxBroadcastReplies: number;
  /** Reply bytes one broadcast collects; collection stops there. Default: the config's. */
  maxBroadcastBytes?: number;
  /** Reply bytes one REST client's waiting requests hold at once. Default: the config's. */
  maxPendingBytesPerClient?: number;
  /** The capability paths each REST role may have the node sign for (`rest.roles`). Default: the config's. */
  roles?: RolePaths;
  /** Topics anyone may publish on (`capabilities.open_topics`): within every role's reach. Default: the config's. */
  openTopics?: readonly string[];
  rootInbox: string;
  /**
   * Throws `forbidden` when this node would refuse the envelope (capabilities): a local caller
   * then learns at once (403) instead of waiting for an error reply.
   */
  precheck?: (env: Envelope) => void;
  /** Capability tokens to attach to an unsigned envelope the node signs as the operator. */
  provide?: (env: Envelope) => Uint8Array | undefined;
}

/** Registers a callback for the client going away; returns its removal. */
export type AbortHook = (onAbort: () => void) => () => void;

/** Who makes a REST request, as far as the HTTP actor cares. */
export interface RestCaller {
  /** The REST role; `admin` when REST auth is off (the local caller owns the node). */
  role: Role;
  /** The key the caller's limits count against (its principal, else its address). */
  client: string;
  /** A browser sent the request: the node then never signs for it (see http/guard.ts). */
  browser: boolean;
}

/** A caller inside the node (tests, tools): the operator's own reach, no browser. */
export const LOCAL_CALLER: RestCaller = { role: 'admin', client: 'local', browser: false };

interface OpenInbox {
  inbox: Inbox;
  refs: number;
}

/**
 * The HTTP layer as an actor: each request becomes an envelope entering the system, and the
 * replies for a REST client's inbox come back through this actor's mailbox to the request
 * that waits for them.
 */
export class HttpActor {
  private readonly open = new Map<string, OpenInbox>();
  private pending = 0;
  private readonly replyBytes: ClientBytes;
  private readonly maxBroadcastBytes: number;
  private readonly roles: RolePaths;
  private readonly openTopics: readonly string[];

  constructor(
    readonly system: ActorSystem,
    readonly actor: Actor,
    readonly options: HttpActorOptions,
  ) {
    const defaults = defaultConfig();
    this.replyBytes = new ClientBytes(options.maxPendingBytesPerClient ?? defaults.rest.max_pending_bytes_per_client);
    this.maxBroadcastBytes = options.maxBroadcastBytes ?? defaults.rest.max_broadcast_bytes;
    this.roles = options.roles ?? defaults.rest.roles;
    this.openTopics = options.openTopics ?? defaults.capabilities.open_topics;
  }

  /** The root actor's handle; 500 while the node is not running. */
  rootHandle(): Handle {
    const root = this.system.actor(this.options.rootInbox);
    if (!root || root.state !== 'running') throw new DmsError('unavailable', 'node is not initialized');
    return root.handle;
  }

  async send(body: string, caller: RestCaller = LOCAL_CALLER): Promise<void> {
    const { env, origin } = await this.admit(this.provided(parseEnvelope(body)), caller);
    await this.precheck(env, origin);
    await this.system.accept(env, origin);
  }

  async invoke(body: string, abort?: AbortHook, caller: RestCaller = LOCAL_CALLER): Promise<Envelope> {
    const parsed = parseEnvelope(body);
    if (isBroadcast(parsed)) throw invalid('invoke needs a destination: to is empty (use broadcast)');
    if (!parsed.opt.cont) throw invalid('opt.cont is required for invoke: it names the behavior the reply goes to');
    const { env, origin } = await this.admit(this.provided(parsed), caller);
    await this.precheck(env, origin);
    return this.withReplyInbox(env, abort, caller, origin, async (inbox, cont, claim) => {
      const { env: reply } = await this.actor.awaitReply(inbox, cont, env.opt.exp);
      if (!claim.take(envelopeBytes(reply))) {
        throw new DmsError('overloaded', `replies waiting for you hold more than ${this.replyBytes.limit} bytes; retry later`, { retryAfter: 1 });
      }
      return reply;
    });
  }

  async broadcast(body: string, limit: number | undefined, abort?: AbortHook, caller: RestCaller = LOCAL_CALLER): Promise<Envelope[]> {
    const parsed = parseEnvelope(body);
    if (!isBroadcast(parsed)) throw invalid('broadcast: to must be {} (a broadcast has no single destination)');
    if (!parsed.opt.topic) throw invalid('broadcast: opt.topic is required');
    // An unsigned broadcast is signed here, so the node can give it a reply behavior.
    if (!parsed.sig && !parsed.opt.cont) parsed.opt.cont = `/private/broadcast/${parsed.nonce}`;
    const { env, origin } = await this.admit(this.provided(parsed), caller);
    await this.precheck(env, origin);
    if (!env.opt.cont) {
      // Nobody can reply to a broadcast without opt.cont: deliver it, collect nothing.
      await this.system.accept(env, origin);
      return [];
    }
    const max = Math.min(limit ?? Infinity, this.options.maxBroadcastReplies);
    return this.withReplyInbox(env, abort, caller, origin, (inbox, cont, claim) => this.collect(inbox, cont, env.opt.exp, max, claim));
  }

  /**
   * Checks what every REST envelope must satisfy and, for an unsigned one, signs it as the
   * operator, within what the caller's role may have the node sign.
   */
  private async admit(env: Envelope, caller: RestCaller): Promise<{ env: Envelope; origin: Origin }> {
    // As on the network: replies go to from.addr.host, so a REST envelope may not name another
    // node there (it would aim this node's replies, or its operator's, at a third party).
    if (env.from.addr.host && env.from.addr.host !== this.system.host) {
      throw invalid(`from.addr.host must be this node's host ${this.system.host} (or empty), not ${env.from.addr.host.slice(0, 80)}`);
    }
    if (env.sig) return { env, origin: { kind: 'rest', trusted: false } };
    if (!this.options.allowUnsigned) {
      throw invalid('sig is required: this node accepts unsigned envelopes only from trusted local callers');
    }
    if (caller.browser) {
      throw new DmsError('forbidden', 'unsigned envelope from a browser: the node signs only for local tools; sign it with your own key, or use the dms CLI');
    }
    checkRoleScope(this.system, this.roles, this.openTopics, caller.role, env);
    const op = this.options.operator;
    env.from = { id: op.id, did: op.did, addr: env.from.addr };
    // The operator's signature is what other nodes check; an envelope that stays on this node
    // is trusted as it is, so it is signed only when it will leave (another host, or gossip).
    const host = env.to.addr.host;
    if (isBroadcast(env) || (host !== '' && host !== this.system.host)) await signEnvelope(env, op);
    return { env, origin: { kind: 'rest', trusted: true } };
  }

  /**
   * Binds the client's inbox to this actor while `wait` runs, so replies addressed to it land
   * here; enters the envelope; and always unbinds, whatever happens.
   */
  private async withReplyInbox<T>(
    env: Envelope,
    abort: AbortHook | undefined,
    caller: RestCaller,
    origin: Origin,
    wait: (inbox: Inbox, cont: string, claim: ByteClaim) => Promise<T>,
  ): Promise<T> {
    const name = env.from.addr.inbox;
    const cont = env.opt.cont!;
    if (!name) throw invalid('from.addr.inbox is required to receive replies');
    if (this.pending >= this.options.maxPending) {
      throw new DmsError('overloaded', `too many requests waiting for replies (${this.options.maxPending}); retry later`, { retryAfter: 1 });
    }
    const inbox = this.acquire(name);
    if (inbox.behaviors.has(cont)) {
      this.release(name);
      throw new DmsError('conflict', `a request from inbox ${name} is already waiting for replies at ${cont}`);
    }
    this.pending++;
    const claim = this.replyBytes.claim(caller.client);
    try {
      const waiting = wait(inbox, cont, claim);
      let unhook = () => {};
      const aborted = new Promise<never>((_, reject) => {
        if (abort) unhook = abort(() => reject(new DmsError('invalid', 'request aborted by the client')));
      });
      aborted.catch(() => {});
      try {
        await this.system.accept(env, origin);
        return await Promise.race([waiting, aborted]);
      } finally {
        unhook();
      }
    } finally {
      inbox.behaviors.remove(cont);
      claim.release();
      this.pending--;
      this.release(name);
    }
  }

  /**
   * Collects a broadcast's replies until `exp`, `max` replies, `maxBroadcastBytes`, or the
   * client's byte allowance runs out: whichever comes first ends it with what it has. A single
   * reply larger than a whole broadcast may hold is dropped and collection goes on.
   */
  private collect(inbox: Inbox, cont: string, exp: bigint, max: number, claim: ByteClaim): Promise<Envelope[]> {
    const replies: Envelope[] = [];
    const cap = this.maxBroadcastBytes;
    let bytes = 0;
    return new Promise<Envelope[]>((resolve) => {
      const done = () => {
        inbox.behaviors.remove(cont);
        resolve(replies);
      };
      inbox.behaviors.add(
        replyWaiter(cont, (env) => {
          const size = envelopeBytes(env);
          if (size > cap) return;
          if (bytes + size > cap || !claim.take(size)) return done();
          bytes += size;
          replies.push(env);
          if (replies.length >= max || bytes === cap) done();
        }),
        { expiresAt: Number(exp / 1_000_000n), onExpire: () => resolve(replies) },
      );
    });
  }

  /** An unsigned envelope, which the node will sign as the operator, gets the operator's provide tokens. */
  private provided(env: Envelope): Envelope {
    if (!env.sig && !env.cap && this.options.provide) {
      const cap = this.options.provide(env);
      if (cap) env.cap = cap;
    }
    return env;
  }

  private async precheck(env: Envelope, origin: Origin): Promise<void> {
    if (!this.options.precheck) return;
    try {
      this.options.precheck(env);
    } catch (e) {
      // Refusals go to envelopes that are what they claim to be: a forged one is invalid (400) first.
      if (origin.kind === 'rest' && !origin.trusted) await verifyEnvelope(env);
      throw e;
    }
  }

  private acquire(name: string): Inbox {
    let entry = this.open.get(name);
    if (!entry) {
      if (this.system.inbox(name)) throw invalid(`from.addr.inbox '${name}' is an actor of this node; pick an inbox of your own`);
      entry = { inbox: this.actor.openInbox(name), refs: 0 };
      this.open.set(name, entry);
    }
    entry.refs++;
    return entry.inbox;
  }

  private release(name: string): void {
    const entry = this.open.get(name);
    if (!entry || --entry.refs > 0) return;
    this.open.delete(name);
    this.actor.closeInbox(entry.inbox);
  }
}
