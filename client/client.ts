import type * as z from 'zod';
import {
  HELLO_TOPIC,
  HelloReply,
  NodeBehaviors,
  PeerListReply,
  PeerSelfReply,
  StatusReply,
} from '../behaviors/root.js';
import { anyImplies } from '../runtime/capability/paths.js';
import { encodeTokenList, LIMITS, type Token } from '../runtime/capability/token.js';
import type { KeyPair } from '../runtime/crypto/keys.js';
import { signEnvelope, verifyEnvelope } from '../runtime/crypto/signing.js';
import { type ErrorKind, errorText } from '../runtime/errors.js';
import { msToNs, msUntil, nextNonce, nowNs } from '../runtime/time.js';
import {
  decodePayload,
  emptyHandle,
  encodeEnvelope,
  encodePayload,
  type Envelope,
  envelopeFromJson,
  type Handle,
  parseEnvelope,
  parseJsonLossless,
} from '../runtime/wire/envelope.js';
import { ClientError, decodeErrorReply } from './errors.js';
import { RestClient, snippet } from './rest.js';
import { resolveTarget, type Target } from './target.js';

export interface DmsClientOptions {
  /** REST base URL of the node, e.g. `http://127.0.0.1:9999`. */
  url: string;
  /** Signs every envelope. Without it envelopes go unsigned, which a node accepts only from loopback callers. */
  key?: KeyPair;
  /** The client's own inbox name, where replies are routed (default `user-<random hex>`). */
  inbox?: string;
  /** Extra HTTP headers on every request (e.g. REST credentials). */
  headers?: Record<string, string>;
  /** Default envelope time-to-live for send/invoke, and the deadline of plain requests (default 30 s). */
  timeoutMs?: number;
  /** Check the signature of every reply envelope (default true): replies are signed by their responder. */
  verifyReplies?: boolean;
  /** The fetch to use (default the global one): proxies, instrumentation, tests. */
  fetch?: typeof fetch;
  /**
   * Capability tokens granted to `key` (e.g. the home's `provide` anchors): each envelope carries
   * those that cover its behavior (or, for a broadcast, its topic), unless the call passes `cap`.
   */
  provide?: readonly Token[];
}

export interface EnvelopeOptions {
  /** How long the envelope stays valid: `opt.exp` = now + ttlMs. Ignored when `exp` is given. */
  ttlMs?: number;
  /** Absolute expiry, ns since the Unix epoch. */
  exp?: bigint;
  /** Behavior the reply goes to. invoke/broadcast pick a unique one when left out. */
  cont?: string;
  topic?: string;
  /** Capability tokens (docs/CAPABILITIES.md): `encodeTokenList` of the tokens to attach. */
  cap?: Uint8Array;
}

export interface CallOptions extends EnvelopeOptions {
  signal?: AbortSignal;
}

export interface InvokeOptions extends CallOptions {
  /**
   * Return error replies (`{"error": ..., "kind": ...}`) instead of throwing, and a payload that
   * is not JSON as its raw bytes instead of failing.
   */
  raw?: boolean;
}

export interface BroadcastOptions extends Omit<InvokeOptions, 'topic'> {
  /** Return as soon as this many replies arrived (the node's `?limit=N`). */
  limit?: number;
}

export interface Reply<T> {
  /** The reply envelope as received (signature checked unless `verifyReplies` is off). */
  env: Envelope;
  payload: T;
  /** The replying actor's error text, when it answered an error reply (raw invokes and broadcasts). */
  error?: string;
  /** That error reply's kind (`internal` when it gave none). */
  errorKind?: ErrorKind;
}

/** A node that answered a discovery broadcast. */
export interface DiscoveredNode {
  did: string;
  host: string;
}

/** What a message carries: a Uint8Array goes as raw bytes, anything else as UTF-8 JSON. */
export type Payload = unknown;

export const DEFAULT_TIMEOUT_MS = 30_000;
/** A broadcast waits for its whole ttl unless `limit` is reached, so it defaults short. */
export const DEFAULT_BROADCAST_TTL_MS = 5_000;
/** Extra HTTP time past `opt.exp`, so the node's own 408 (with its text) arrives before we give up. */
const HTTP_GRACE_MS = 5_000;


const REPLY_PREFIX = '/private/reply';
const BROADCAST_PREFIX = '/private/broadcast';

/**
 * A client of one node's REST actor interface. It addresses actors by Handle, builds and signs
 * envelopes itself (so the node never needs to be trusted with the caller's key), and reads
 * every reply losslessly: `nonce` and `exp` exceed JavaScript numbers.
 */
export class DmsClient {
  readonly url: string;
  readonly inbox: string;
  readonly key?: KeyPair;
  /** The node's plain REST routes (jobs, resources…), over the same URL, headers and fetch. */
  readonly rest: RestClient;
  private readonly timeoutMs: number;
  private readonly verifyReplies: boolean;
  private readonly provide: readonly Token[];
  private readonly capMemo = new Map<string, { bytes: Uint8Array | undefined; until: bigint }>();
  private nodeHandle?: Promise<Handle>;

  constructor(opts: DmsClientOptions) {
    this.url = opts.url.replace(/\/+$/, '');
    this.key = opts.key;
    this.inbox = opts.inbox ?? `user-${randomHex(8)}`;
    this.rest = new RestClient({ url: this.url, headers: opts.headers, fetch: opts.fetch });
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.verifyReplies = opts.verifyReplies ?? true;
    this.provide = opts.provide ?? [];
  }

  /** The node's root actor handle, fetched once: it does not change while the node runs. */
  handle(signal?: AbortSignal): Promise<Handle> {
    this.nodeHandle ??= this.fetchHandle(signal).catch((e: unknown) => {
      this.nodeHandle = undefined; // a failed look-up is retried by the next call
      throw e;
    });
    return this.nodeHandle;
  }

  /**
   * This client's own handle: its key's id (empty when unsigned; the node fills in its operator),
   * on the node's host so replies from anywhere are routed back to it (the README's wire format section, "Clients over REST").
   */
  async self(): Promise<Handle> {
    const node = await this.handle();
    return { id: this.key?.id ?? '', did: this.key?.did ?? '', addr: { host: node.addr.host, inbox: this.inbox } };
  }

  /** The destination handle a target stands for. */
  async resolve(to: Target): Promise<Handle> {
    return resolveTarget(to, await this.handle());
  }

  /** A ready-to-send envelope: fresh nonce, `opt.exp` = now + ttl, signed when the client has a key. */
  async envelope(to: Target | 'broadcast', be: string, payload: Payload, opts: EnvelopeOptions = {}): Promise<Envelope> {
    const dest = to === 'broadcast' ? emptyHandle() : await this.resolve(to);
    return this.build(dest, be, payload, opts, this.timeoutMs);
  }

  /** Delivers a message without waiting for any reply. */
  async send(to: Target, be: string, payload: Payload = {}, opts: CallOptions = {}): Promise<Envelope> {
    const env = await this.envelope(to, be, payload, opts);
    await this.post('/api/v1/actor/send', env, opts.signal);
    return env;
  }

  /**
   * Sends and waits for the reply until `opt.exp`. Throws a ClientError when the node refuses
   * (status and its error text), on timeout, and when the reply is an error reply unless `raw`
   * (kind `reply`, with the node's text in `nodeError` and its kind in `replyKind`).
   */
  async invoke<T = unknown>(to: Target, be: string, payload: Payload = {}, opts: InvokeOptions = {}): Promise<Reply<T>> {
    const dest = await this.resolve(to);
    const env = await this.build(dest, be, payload, opts, this.timeoutMs, REPLY_PREFIX);
    const text = await this.post('/api/v1/actor/invoke', env, opts.signal);
    const reply = await this.readEnvelope(() => parseEnvelope(text));
    return this.readReply<T>(reply, opts.raw ?? false);
  }

  /**
   * Publishes on `topic` and collects the replies that arrive before `opt.exp` (or the first
   * `limit`). Error replies do not throw here, since one failing node must not hide the others:
   * they come back with `error` and `errorKind` set.
   */
  async broadcast<T = unknown>(topic: string, be: string, payload: Payload = {}, opts: BroadcastOptions = {}): Promise<Reply<T>[]> {
    if (opts.limit !== undefined && !(Number.isInteger(opts.limit) && opts.limit > 0)) {
      throw new RangeError(`limit must be a positive integer, got ${opts.limit}`);
    }
    const env = await this.build(emptyHandle(), be, payload, { ...opts, topic }, DEFAULT_BROADCAST_TTL_MS, BROADCAST_PREFIX);
    const query = opts.limit === undefined ? '' : `?limit=${opts.limit}`;
    const text = await this.post(`/api/v1/actor/broadcast${query}`, env, opts.signal);
    const replies = await this.readEnvelopes(text);
    return Promise.all(replies.map((r) => this.readReply<T>(r, true)));
  }

  // --- typed calls to the root actor's behaviors (behaviors/root.ts) -------------------------

  async hello(to: Target = 'root', opts: CallOptions = {}): Promise<HelloReply> {
    return this.call(to, NodeBehaviors.hello, HelloReply, opts);
  }

  async status(to: Target = 'root', opts: CallOptions = {}): Promise<StatusReply> {
    return this.call(to, NodeBehaviors.status, StatusReply, opts);
  }

  /** Peer ids of the nodes the target node is connected to. */
  async peers(to: Target = 'root', opts: CallOptions = {}): Promise<string[]> {
    return (await this.call(to, NodeBehaviors.peersList, PeerListReply, opts)).peers;
  }

  /** The target node's own peer id and listen addresses. */
  async peerSelf(to: Target = 'root', opts: CallOptions = {}): Promise<PeerSelfReply> {
    return this.call(to, NodeBehaviors.peersSelf, PeerSelfReply, opts);
  }

  /** Every node reachable over the hello topic, this one included. */
  async discover(opts: BroadcastOptions = {}): Promise<DiscoveredNode[]> {
    const replies = await this.broadcast<unknown>(HELLO_TOPIC, NodeBehaviors.broadcastHello, {}, opts);
    const nodes: DiscoveredNode[] = [];
    for (const r of replies) {
      const parsed = HelloReply.safeParse(r.payload);
      if (!r.error && parsed.success) nodes.push({ did: parsed.data.did, host: r.env.from.addr.host });
    }
    return nodes;
  }

  private async call<S extends z.ZodType>(to: Target, be: string, schema: S, opts: CallOptions): Promise<z.infer<S>> {
    const reply = await this.invoke<unknown>(to, be, {}, opts);
    const parsed = schema.safeParse(reply.payload);
    if (!parsed.success) {
      throw new ClientError({ kind: 'protocol', url: this.url, status: 200, reply: reply.env, message: `reply to ${be} does not match its schema: ${parsed.error.message}` });
    }
    return parsed.data;
  }

  // --- envelopes --------------------------------------------------------------------------

  private async build(
    to: Handle,
    be: string,
    payload: Payload,
    opts: EnvelopeOptions,
    defaultTtlMs: number,
    contPrefix?: string,
  ): Promise<Envelope> {
    const nonce = nextNonce();
    const env: Envelope = {
      to,
      be,
      from: await this.self(),
      nonce,
      opt: { exp: opts.exp ?? nowNs() + msToNs(opts.ttlMs ?? defaultTtlMs) },
      msg: payload instanceof Uint8Array ? payload : encodePayload(payload),
    };
    // The nonce makes the reply behavior unique, so concurrent calls from one inbox don't collide.
    const cont = opts.cont ?? (contPrefix ? `${contPrefix}/${nonce}` : undefined);
    if (cont) env.opt.cont = cont;
    if (opts.topic) env.opt.topic = opts.topic;
    const cap = opts.cap ?? this.provided(be, opts.topic);
    if (cap && cap.length) env.cap = cap;
    return this.key ? signEnvelope(env, this.key) : env;
  }

  /** The provide tokens for `be` (or `topic`): granted to this client's key, unexpired, covering it. */
  private provided(be: string, topic?: string): Uint8Array | undefined {
    if (!this.key || this.provide.length === 0) return undefined;
    const memoKey = `${be} ${topic ?? ''}`;
    const now = nowNs();
    const memo = this.capMemo.get(memoKey);
    if (memo && memo.until > now) return memo.bytes;
    const did = this.key.did;
    const fit = this.provide.filter((t) => t.aud === did && t.exp > now && (topic ? anyImplies(t.topic, topic) : anyImplies(t.cap, be)));
    const bytes = fit.length ? encodeTokenList(fit.slice(0, LIMITS.listTokens)) : undefined;
    // Re-chosen when the first of them expires, or after a minute at most.
    const until = fit.reduce((m, t) => (t.exp < m ? t.exp : m), now + msToNs(60_000));
    this.capMemo.set(memoKey, { bytes, until });
    return bytes;
  }

  private async readEnvelope(parse: () => Envelope): Promise<Envelope> {
    let env: Envelope;
    try {
      env = parse();
    } catch (e) {
      throw new ClientError({ kind: 'protocol', url: this.url, status: 200, message: `node sent an invalid reply envelope: ${errorText(e)}`, cause: e });
    }
    if (this.verifyReplies) {
      try {
        await verifyEnvelope(env);
      } catch (e) {
        throw new ClientError({ kind: 'protocol', url: this.url, status: 200, reply: env, message: `reply from ${env.from.did || '(unsigned)'} rejected: ${errorText(e)}`, cause: e });
      }
    }
    return env;
  }

  private async readEnvelopes(text: string): Promise<Envelope[]> {
    let list: unknown;
    try {
      list = parseJsonLossless(text);
    } catch (e) {
      throw new ClientError({ kind: 'protocol', url: this.url, status: 200, message: `node sent invalid JSON for a broadcast: ${errorText(e)}`, cause: e });
    }
    if (!Array.isArray(list)) throw new ClientError({ kind: 'protocol', url: this.url, status: 200, message: 'node sent a broadcast answer that is not an array' });
    return Promise.all(list.map((item: unknown) => this.readEnvelope(() => envelopeFromJson(item))));
  }

  private readReply<T>(env: Envelope, raw: boolean): Reply<T> {
    let payload: unknown;
    try {
      payload = decodePayload(env.msg);
    } catch (e) {
      if (raw) return { env, payload: env.msg as T };
      throw new ClientError({ kind: 'protocol', url: this.url, status: 200, reply: env, message: `reply to ${env.be}: ${errorText(e)}`, cause: e });
    }
    const error = decodeErrorReply(payload, { url: this.url, reply: env });
    if (!error) return { env, payload: payload as T };
    if (!raw) throw error;
    return { env, payload: payload as T, error: error.nodeError, errorKind: error.replyKind };
  }

  // --- HTTP -------------------------------------------------------------------------------

  private post(path: string, env: Envelope, signal?: AbortSignal): Promise<string> {
    return this.rest.text('POST', path, encodeEnvelope(env), { deadlineMs: msUntil(env.opt.exp) + HTTP_GRACE_MS, signal });
  }

  private async fetchHandle(signal?: AbortSignal): Promise<Handle> {
    const text = await this.rest.text('GET', '/api/v1/actor/handle', undefined, { deadlineMs: this.timeoutMs, signal });
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      value = undefined;
    }
    const h = asHandle(value);
    if (!h) throw new ClientError({ kind: 'protocol', url: this.url, status: 200, message: `node sent an invalid handle: ${snippet(text)}` });
    return h;
  }
}

function asHandle(v: unknown): Handle | undefined {
  if (!v || typeof v !== 'object') return undefined;
  const h = v as { id?: unknown; did?: unknown; addr?: { host?: unknown; inbox?: unknown } };
  if (typeof h.id !== 'string' || typeof h.did !== 'string' || !h.addr || typeof h.addr !== 'object') return undefined;
  if (typeof h.addr.host !== 'string' || typeof h.addr.inbox !== 'string' || !h.addr.inbox) return undefined;
  return { id: h.id, did: h.did, addr: { host: h.addr.host, inbox: h.addr.inbox } };
}

function randomHex(bytes: number): string {
  return Array.from(globalThis.crypto.getRandomValues(new Uint8Array(bytes)), (b) => b.toString(16).padStart(2, '0')).join('');
}
