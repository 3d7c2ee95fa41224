/**
 * The HTTP actor (inbox `http`): the REST layer as one of the node's component actors. Every
 * REST request becomes an envelope this actor sends, and every reply comes back through its
 * mailbox, to a reply waiter on an inbox it opened for the request.
 */
import { z } from 'zod';
import { collectReplies, type Inbox } from '../runtime/actor.js';
import { type ActorContext, defineActor } from '../runtime/component.js';
import { defaultConfig } from '../runtime/config.js';
import { signEnvelope, verifyEnvelope } from '../runtime/crypto/signing.js';
import type { KeyPair } from '../runtime/crypto/keys.js';
import { DmsError, invalid } from '../runtime/errors.js';
import { stageEnd, stageStart } from '../runtime/stage-timings.js';
import type { Origin } from '../runtime/system.js';
import { type Envelope, type Handle, isBroadcast, parseEnvelope } from '../runtime/wire/envelope.js';
import type { Role } from '../runtime/api-keys.js';
import { ClientBytes, envelopeBytes, type ByteClaim } from './reply-bytes.js';
import { checkRoleScope, type RolePaths } from './role-scope.js';

export const HTTP_INBOX = 'http';

/** What the HTTP actor is given: the `rest.*` limits and roles, the operator, the security hooks. */
export interface HttpDeps {
  /** The operator identity that signs unsigned envelopes from trusted local callers. */
  operator: KeyPair;
  allowUnsigned: boolean;
  /** REST requests waiting for replies at once. */
  maxPending: number;
  maxBroadcastReplies: number;
  /** Replies one broadcast takes from one host (rest.max_broadcast_replies_per_host). Default: the config's. */
  maxBroadcastRepliesPerHost?: number;
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
const LOCAL_CALLER: RestCaller = { role: 'admin', client: 'local', browser: false };

/** What the REST routes call on the HTTP actor. */
export interface HttpApi {
  /** The root actor's handle; 500 while the node is not running. */
  rootHandle(): Handle;
  /** A REST envelope body, delivered without waiting for anything back. */
  send(body: string, caller?: RestCaller): Promise<void>;
  /** A REST envelope body to one actor; resolves with its reply. */
  invoke(body: string, abort?: AbortHook, caller?: RestCaller): Promise<Envelope>;
  /** A REST envelope body to a topic; resolves with the replies collected. */
  broadcast(body: string, limit: number | undefined, abort?: AbortHook, caller?: RestCaller): Promise<Envelope[]>;
  /**
   * Invokes `be` on this node's actor at `inbox`; an error reply is thrown as its DmsError (so
   * 404, 409…). `checked`: the schema whose output `payload` is (SendOptions.checked).
   */
  call(inbox: string, be: string, payload: unknown, ttlMs?: number, checked?: z.ZodType): Promise<unknown>;
}

interface OpenInbox {
  inbox: Inbox;
  refs: number;
}

/** The reply goes back to the REST caller as it is: the behavior's schema already shaped it. */
const passThrough = z.unknown();

/** How a REST caller's envelope enters: `trusted` when the node signed it as the operator. */
type RestOrigin = Extract<Origin, { kind: 'rest' }>;

export const HttpActor = defineActor({
  inbox: HTTP_INBOX,
  // Only reply waiters, each settling its own request without awaiting: nothing to serialize, so the node's setting.
  concurrency: 'node',
  create: ({ actor, system, deps }: ActorContext<HttpDeps>) => {
    const defaults = defaultConfig();
    const replyBytes = new ClientBytes(deps.maxPendingBytesPerClient ?? defaults.rest.max_pending_bytes_per_client);
    const maxBroadcastBytes = deps.maxBroadcastBytes ?? defaults.rest.max_broadcast_bytes;
    const maxRepliesPerHost = deps.maxBroadcastRepliesPerHost ?? defaults.rest.max_broadcast_replies_per_host;
    const roles = deps.roles ?? defaults.rest.roles;
    const openTopics = deps.openTopics ?? defaults.capabilities.open_topics;
    /** The REST clients' inboxes bound to this actor, each for as long as a request of its waits. */
    const open = new Map<string, OpenInbox>();
    let pending = 0;

    /**
     * The one way an envelope a REST caller brought enters the system: from this actor, as an
     * envelope from outside the node's own actors (origin 'rest'), so the kernel checks its
     * expiry, its signature unless the node signed it, and its replay entry before routing it.
     */
    const enter = (env: Envelope, origin: RestOrigin): Promise<void> => system.accept(env, origin);

    /**
     * Checks what every REST envelope must satisfy and, for an unsigned one, signs it as the
     * operator, within what the caller's role may have the node sign.
     */
    const admit = async (env: Envelope, caller: RestCaller): Promise<{ env: Envelope; origin: RestOrigin }> => {
      // As on the network: replies go to from.addr.host, so a REST envelope may not name another
      // node there (it would aim this node's replies, or its operator's, at a third party).
      if (env.from.addr.host && env.from.addr.host !== system.host) {
        throw invalid(`from.addr.host must be this node's host ${system.host} (or empty), not ${env.from.addr.host.slice(0, 80)}`);
      }
      if (env.sig) return { env, origin: { kind: 'rest', trusted: false, client: caller.client } };
      if (!deps.allowUnsigned) {
        throw invalid('sig is required: this node accepts unsigned envelopes only from trusted local callers');
      }
      if (caller.browser) {
        throw new DmsError('forbidden', 'unsigned envelope from a browser: the node signs only for local tools; sign it with your own key, or use the dms CLI');
      }
      checkRoleScope(system, roles, openTopics, caller.role, env);
      const op = deps.operator;
      env.from = { id: op.id, did: op.did, addr: env.from.addr };
      // The operator's signature is what other nodes check; an envelope that stays on this node
      // is trusted as it is, so it is signed only when it will leave (another host, or gossip).
      // Other nodes send replies to from.addr.host and refuse an envelope without it, so one
      // that leaves names this node there: the README's curl example leaves it empty.
      if (isBroadcast(env) || !system.isHere(env.to.addr.host)) {
        if (!env.from.addr.host) env.from = { ...env.from, addr: { ...env.from.addr, host: system.host } };
        await signEnvelope(env, op);
      }
      // The kernel counts it against the REST quota (actor.replay_rest_quota), not as the operator:
      // REST callers may not fill the room kept for the operator's own signed calls.
      return { env, origin: { kind: 'rest', trusted: true, client: caller.client } };
    };

    /** An unsigned envelope, which the node will sign as the operator, gets the operator's provide tokens. */
    const provided = (env: Envelope): Envelope => {
      if (!env.sig && !env.cap && deps.provide) {
        const cap = deps.provide(env);
        if (cap) env.cap = cap;
      }
      return env;
    };

    const precheck = async (env: Envelope, origin: RestOrigin): Promise<void> => {
      if (!deps.precheck) return;
      try {
        deps.precheck(env);
      } catch (e) {
        // Refusals go to envelopes that are what they claim to be: a forged one is invalid (400) first.
        if (!origin.trusted) await verifyEnvelope(env);
        throw e;
      }
    };

    /** Admits and prechecks a parsed REST envelope: what then enters, and as what. */
    const prepare = async (parsed: Envelope, caller: RestCaller): Promise<{ env: Envelope; origin: RestOrigin }> => {
      const admitted = await admit(provided(parsed), caller);
      await precheck(admitted.env, admitted.origin);
      return admitted;
    };

    const acquire = (name: string): Inbox => {
      let entry = open.get(name);
      if (!entry) {
        if (system.inbox(name)) throw invalid(`from.addr.inbox '${name}' is an actor of this node; pick an inbox of your own`);
        entry = { inbox: actor.openInbox(name), refs: 0 };
        open.set(name, entry);
      }
      entry.refs++;
      return entry.inbox;
    };

    const release = (name: string): void => {
      const entry = open.get(name);
      if (!entry || --entry.refs > 0) return;
      open.delete(name);
      actor.closeInbox(entry.inbox);
    };

    /**
     * Binds the client's inbox to this actor while `wait` runs, so replies addressed to it land
     * in this actor's mailbox; enters the envelope; and always unbinds, whatever happens.
     */
    const withReplyInbox = async <T>(
      env: Envelope,
      abort: AbortHook | undefined,
      caller: RestCaller,
      origin: RestOrigin,
      wait: (inbox: Inbox, cont: string, claim: ByteClaim) => Promise<T>,
    ): Promise<T> => {
      const name = env.from.addr.inbox;
      const cont = env.opt.cont!;
      if (!name) throw invalid('from.addr.inbox is required to receive replies');
      if (pending >= deps.maxPending) {
        throw new DmsError('overloaded', `too many requests waiting for replies (${deps.maxPending}); retry later`, { retryAfter: 1 });
      }
      const inbox = acquire(name);
      if (inbox.behaviors.has(cont)) {
        release(name);
        throw new DmsError('conflict', `a request from inbox ${name} is already waiting for replies at ${cont}`);
      }
      pending++;
      const claim = replyBytes.claim(caller.client);
      try {
        const waiting = wait(inbox, cont, claim);
        // Settled by the expiry while the envelope is still being admitted (its signature check
        // queued behind a burst's), it must not count as unhandled: that stops the node.
        waiting.catch(() => {});
        let unhook = () => {};
        const aborted = new Promise<never>((_, reject) => {
          if (abort) unhook = abort(() => reject(new DmsError('invalid', 'request aborted by the client')));
        });
        aborted.catch(() => {});
        try {
          await enter(env, origin);
          return await Promise.race([waiting, aborted]);
        } finally {
          unhook();
        }
      } finally {
        inbox.behaviors.remove(cont);
        claim.release();
        pending--;
        release(name);
      }
    };

    /**
     * A broadcast's replies, as the REST caller will be shown them (whole envelopes), until
     * `exp`, `max` replies, `maxBroadcastBytes`, or the client's byte allowance runs out.
     *
     * Any libp2p peer may hear the topic and answer, and a node may answer with several actors,
     * so one host is not heard once only, but its replies are bounded (README "REST interface"):
     * at most rest.max_broadcast_replies_per_host of them and half of `max` (at least one), and a
     * quarter of maxBroadcastBytes. Past that they are dropped, counting against no bound: a peer
     * answering at once, many times or with replies as large as an envelope may be, cannot end
     * the broadcast before the other nodes' replies come.
     */
    const collect = (inbox: Inbox, cont: string, exp: bigint, max: number, claim: ByteClaim): Promise<Envelope[]> =>
      collectReplies(inbox, cont, {
        until: Number(exp / 1_000_000n),
        max,
        maxBytes: maxBroadcastBytes,
        perHost: { replies: Math.min(maxRepliesPerHost, Math.max(1, Math.floor(max / 2))), bytes: Math.floor(maxBroadcastBytes / 4) },
        sizeOf: envelopeBytes,
        claim: (size) => claim.take(size),
      });

    const api: HttpApi = {
      rootHandle() {
        const root = system.actor(deps.rootInbox);
        if (!root || root.state !== 'running') throw new DmsError('unavailable', 'node is not initialized');
        return root.handle;
      },

      async send(body, caller = LOCAL_CALLER) {
        const { env, origin } = await prepare(parseEnvelope(body), caller);
        await enter(env, origin);
      },

      async invoke(body, abort, caller = LOCAL_CALLER) {
        const start = stageStart();
        const parsed = parseEnvelope(body);
        if (isBroadcast(parsed)) throw invalid('invoke needs a destination: to is empty (use broadcast)');
        if (!parsed.opt.cont) throw invalid('opt.cont is required for invoke: it names the behavior the reply goes to');
        const { env, origin } = await prepare(parsed, caller);
        stageEnd(system.host, 'rest.admit', start);
        const reply = await withReplyInbox(env, abort, caller, origin, async (inbox, cont, claim) => {
          const sent = performance.now();
          const { env: reply } = await actor.awaitReply(inbox, cont, env.opt.exp, env.to.addr.host);
          system.metrics?.invoked(system.isHere(env.to.addr.host) ? 'local' : 'remote', (performance.now() - sent) / 1000);
          stageEnd(system.host, 'invoke.wait', start === undefined ? undefined : sent);
          if (!claim.take(envelopeBytes(reply))) {
            throw new DmsError('overloaded', `replies waiting for you hold more than ${replyBytes.limit} bytes; retry later`, { retryAfter: 1 });
          }
          return reply;
        });
        stageEnd(system.host, 'rest.invoke', start);
        return reply;
      },

      async broadcast(body, limit, abort, caller = LOCAL_CALLER) {
        const parsed = parseEnvelope(body);
        if (!isBroadcast(parsed)) throw invalid('broadcast: to must be {} (a broadcast has no single destination)');
        if (!parsed.opt.topic) throw invalid('broadcast: opt.topic is required');
        // An unsigned broadcast is signed here, so the node can give it a reply behavior.
        if (!parsed.sig && !parsed.opt.cont) parsed.opt.cont = `/private/broadcast/${parsed.nonce}`;
        const { env, origin } = await prepare(parsed, caller);
        if (!env.opt.cont) {
          // Nobody can reply to a broadcast without opt.cont: deliver it, collect nothing.
          await enter(env, origin);
          return [];
        }
        const max = Math.min(limit ?? Infinity, deps.maxBroadcastReplies);
        return withReplyInbox(env, abort, caller, origin, (inbox, cont, claim) => collect(inbox, cont, env.opt.exp, max, claim));
      },

      // The HTTP actor's own request, sent as any local actor sends one; its reply comes back to
      // a one-shot reply waiter on this actor's primary inbox.
      call: (inbox, be, payload, ttlMs, checked) => actor.call(actor.local(inbox), be, payload, passThrough, { ttlMs, checked }),
    };

    return { behaviors: [], api };
  },
});
