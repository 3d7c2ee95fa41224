import { randomUUID } from 'node:crypto';
import { parse as parseLossless } from 'lossless-json';
import * as z from 'zod';
import { invalid, isDmsError } from '../errors.js';
import { parseUntrustedJson, refuseProtoKeys } from '../json.js';
import { duplicateKey, isKeyAt, refuseDuplicateKeys, stringEnd } from '../json-keys.js';
import { describeIssues as describeIssuesOf } from '../issues.js';
import { decodeBase64, encodeBase64 } from './base64.js';

/** Where an actor lives: `host` is the node's peer id (empty = this node), `inbox` the actor's name on it. */
export interface Addr {
  host: string;
  inbox: string;
}

/** An actor's public handle. `did` is always `did:key:` + `id`. */
export interface Handle {
  id: string;
  did: string;
  addr: Addr;
}

export interface Options {
  /** Expiry, nanoseconds since the Unix epoch. */
  exp: bigint;
  /** Behavior the reply goes to (invoke, broadcast). */
  cont?: string;
  /** Publish/subscribe topic (broadcast). */
  topic?: string;
}

/**
 * An envelope as the node holds it: bytes decoded, uint64 fields as bigint. A broadcast's
 * `to` is the empty handle (every member ''), which the wire writes as `{}`.
 */
export interface Envelope {
  to: Handle;
  be: string;
  from: Handle;
  nonce: bigint;
  opt: Options;
  msg: Uint8Array;
  cap?: Uint8Array;
  sig?: Uint8Array;
}

export const U64_MAX = 2n ** 64n - 1n;
export const SIGNATURE_BYTES = 64;
export const SIGNING_PREFIX = 'dms:msg:';

export const emptyHandle = (): Handle => ({ id: '', did: '', addr: { host: '', inbox: '' } });

/** The handle of actor `inbox` on node `host` (a peer id; empty: this node): what a caller addresses by name. */
export const at = (inbox: string, host = ''): Handle => ({ id: '', did: '', addr: { host, inbox } });

export function isBroadcast(env: Pick<Envelope, 'to'>): boolean {
  const t = env.to;
  return t.id === '' && t.did === '' && t.addr.host === '' && t.addr.inbox === '';
}

// ---------------------------------------------------------------------------------------------
// Reading. One schema describes the JSON shape; its messages are what a caller sees on a 400.

const u64 = (field: string) =>
  z
    .bigint({ error: (iss) => (iss.input === undefined ? `${field} is required` : `${field} must be an integer from 0 to ${U64_MAX}`) })
    .min(0n, { error: `${field} must be an integer from 0 to ${U64_MAX}` })
    .max(U64_MAX, { error: `${field} must be an integer from 0 to ${U64_MAX}` });

const optionalString = z.string().nullish();

const WireAddr = z.object({ host: optionalString, inbox: optionalString }).nullish();
const WireHandle = z.object({ id: optionalString, did: optionalString, addr: WireAddr });

export const WireEnvelope = z.object({
  to: WireHandle,
  be: z.string().min(1, { error: 'be must be a non-empty behavior name' }),
  from: WireHandle,
  nonce: u64('nonce'),
  opt: z.object({ exp: u64('opt.exp'), cont: optionalString, topic: optionalString }),
  msg: z.string(),
  cap: optionalString,
  sig: optionalString,
});
export type WireEnvelope = z.infer<typeof WireEnvelope>;

/** The one-line zod issue text (../issues.ts), here too for the kernel and plugins that import it from the wire. */
export function describeIssues(error: z.ZodError): string {
  return describeIssuesOf(error, { limit: 5 });
}

// Integers keep every digit as bigint; anything else becomes a number and fails the u64 fields.
const parseNumber = (digits: string): bigint | number =>
  /^-?(0|[1-9][0-9]*)$/.test(digits) ? BigInt(digits) : Number(digits);

/**
 * Parses JSON text losslessly (integers as bigint); malformed text is invalid input, and so is
 * an object with a key twice (../json-keys.ts), even with equal values, which lossless-json
 * would take; `where` (`the envelope`) ends that message.
 *
 * lossless-json reads a string a character at a time, about 0.3 µs each: an envelope of
 * `network.MaxEnvelopeBytes` (1 MiB, nearly all of it `msg`) took some 300 ms of the event
 * loop, before its signature or anything else was checked, from any peer. So in a long text the
 * long strings are set aside first (found with indexOf, in one pass), the rest is parsed
 * losslessly, and each is put back as JSON.parse reads it (natively, with the same checks).
 */
export function parseJsonLossless(text: string, where?: string): unknown {
  // Two values of a key that differ stop the parse at once; equal ones are found after it.
  const options = {
    parseNumber,
    onDuplicateKey: (): never => {
      throw duplicateKey(text, where);
    },
  };
  let value: unknown;
  try {
    if (text.length <= SET_ASIDE_FROM) value = parseLossless(text, null, options);
    else {
      const held: string[] = [];
      // A value only this call can have written: no string of the text can pass for one.
      const tag = `\u0000${randomUUID()}:`;
      const skeleton = setAside(text, (token) => JSON.stringify(tag + (held.push(token) - 1)));
      value =
        held.length === 0
          ? parseLossless(text, null, options)
          : parseLossless(skeleton, (_key, value) => (typeof value === 'string' && value.startsWith(tag) ? JSON.parse(held[Number(value.slice(tag.length))]) : value), options);
    }
    // No key decodes to __proto__ without one of these in the text (runtime/json.ts says why it is refused).
    if (text.includes('__proto__') || text.includes('\\u')) refuseProtoKeys(value);
  } catch (e) {
    if (isDmsError(e)) throw e;
    // The parser descends once per level: what ran out is its stack, not the text.
    if (e instanceof RangeError) throw invalid('malformed JSON: arrays or objects nested deeper than this node parses');
    throw invalid(`malformed JSON: ${(e as Error).message}`);
  }
  refuseDuplicateKeys(text, value, where);
  return value;
}

/** Texts longer than this have their long strings set aside before the lossless parse. */
const SET_ASIDE_FROM = 4096;
/** Strings (with their quotes) longer than this are set aside; keys never are. */
const LONG_STRING = 256;

/**
 * `text` with every string token longer than LONG_STRING that is not a key replaced by what
 * `put` returns for it. Malformed text stays malformed: what is replaced is a well-delimited
 * string token, which JSON.parse checks when it is put back.
 */
function setAside(text: string, put: (token: string) => string): string {
  let out = '';
  let last = 0;
  for (let start = text.indexOf('"'); start !== -1; ) {
    const end = stringEnd(text, start);
    // Unterminated: the rest stays as it is, and the parser refuses it.
    if (end === -1) return out + text.slice(last);
    if (end - start > LONG_STRING && !isKeyAt(text, end)) {
      out += text.slice(last, start) + put(text.slice(start, end));
      last = end;
    }
    start = text.indexOf('"', end);
  }
  return out + text.slice(last);
}

const handleFrom = (h: z.infer<typeof WireHandle>): Handle => ({
  id: h.id ?? '',
  did: h.did ?? '',
  addr: { host: h.addr?.host ?? '', inbox: h.addr?.inbox ?? '' },
});

/** Validates an already-parsed JSON value as an envelope. */
export function envelopeFromJson(value: unknown): Envelope {
  const r = WireEnvelope.safeParse(value);
  if (!r.success) throw invalid(`invalid envelope: ${describeIssues(r.error)}`);
  const w = r.data;
  const env: Envelope = {
    to: handleFrom(w.to),
    be: w.be,
    from: handleFrom(w.from),
    nonce: w.nonce,
    opt: { exp: w.opt.exp },
    msg: decodeBase64(w.msg, 'msg'),
  };
  if (w.opt.cont) env.opt.cont = w.opt.cont;
  if (w.opt.topic) env.opt.topic = w.opt.topic;
  if (w.cap) env.cap = decodeBase64(w.cap, 'cap');
  if (w.sig) {
    const sig = decodeBase64(w.sig, 'sig');
    if (sig.length !== SIGNATURE_BYTES) throw invalid(`sig: must be ${SIGNATURE_BYTES} bytes, got ${sig.length}`);
    env.sig = sig;
  }
  return env;
}

/** Parses an envelope from its wire JSON. Every failure is an `invalid` DmsError naming the problem. */
export function parseEnvelope(text: string): Envelope {
  return envelopeFromJson(parseJsonLossless(text, 'the envelope'));
}

// ---------------------------------------------------------------------------------------------
// Writing. Hand-built strings: the canonical form is exact and this is the hot path.

const str = JSON.stringify;

function writeHandle(h: Handle): string {
  const parts: string[] = [];
  if (h.id) parts.push(`"id":${str(h.id)}`);
  if (h.did) parts.push(`"did":${str(h.did)}`);
  const addr: string[] = [];
  if (h.addr.host) addr.push(`"host":${str(h.addr.host)}`);
  if (h.addr.inbox) addr.push(`"inbox":${str(h.addr.inbox)}`);
  if (addr.length) parts.push(`"addr":{${addr.join(',')}}`);
  return `{${parts.join(',')}}`;
}

/** The canonical JSON of an envelope without `sig` (README "Wire format"; test/fixtures/wire-vectors.json holds signing inputs). */
export function canonicalJson(env: Envelope): string {
  let opt = `{"exp":${env.opt.exp}`;
  if (env.opt.cont) opt += `,"cont":${str(env.opt.cont)}`;
  if (env.opt.topic) opt += `,"topic":${str(env.opt.topic)}`;
  opt += '}';
  let out =
    `{"to":${writeHandle(env.to)},"be":${str(env.be)},"from":${writeHandle(env.from)}` +
    `,"nonce":${env.nonce},"opt":${opt},"msg":"${encodeBase64(env.msg)}"`;
  if (env.cap && env.cap.length) out += `,"cap":"${encodeBase64(env.cap)}"`;
  return out + '}';
}

/** The exact bytes an envelope's signature covers. */
export function signingBytes(env: Envelope): Buffer {
  return Buffer.from(SIGNING_PREFIX + canonicalJson(env), 'utf8');
}

/** The envelope as sent on the wire: the canonical JSON plus `sig` when signed. */
export function encodeEnvelope(env: Envelope): string {
  const canonical = canonicalJson(env);
  if (!env.sig) return canonical;
  return `${canonical.slice(0, -1)},"sig":"${encodeBase64(env.sig)}"}`;
}

// ---------------------------------------------------------------------------------------------
// Payloads of node behaviors are UTF-8 JSON.

const utf8 = new TextDecoder('utf-8', { fatal: true });

export function encodePayload(value: unknown): Uint8Array {
  const buf = Buffer.from(JSON.stringify(value ?? {}), 'utf8');
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** Decodes a JSON payload; an empty payload is `{}`. */
export function decodePayload(msg: Uint8Array): unknown {
  if (msg.length === 0) return {};
  let text: string;
  try {
    text = utf8.decode(msg);
  } catch {
    throw invalid('msg: payload is not UTF-8');
  }
  try {
    return parseUntrustedJson(text);
  } catch (e) {
    if (isDmsError(e)) throw invalid(`msg: ${e.message}`);
    throw invalid(`msg: payload is not JSON: ${(e as Error).message}`);
  }
}
