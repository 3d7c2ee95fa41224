import { createHash, randomBytes } from 'node:crypto';
import { type KeyPair, publicKeyFromId, verifyKeyFromId, verifySync } from '../crypto/keys.js';
import { invalid } from '../errors.js';
import { decodeBase64, encodeBase64 } from '../wire/base64.js';
import { parseJsonLossless, U64_MAX } from '../wire/envelope.js';
import { isPath } from './paths.js';

/**
 * Capability tokens (docs/CAPABILITIES.md): "issuer grants audience the capabilities `cap`
 * (and broadcast topics `topic`) until `exp`", signed by the issuer's Ed25519 key. A token may
 * embed, as `chain`, the token that granted its issuer what it passes on.
 */

export const ACTIONS = ['invoke', 'delegate', 'broadcast', 'revoke'] as const;
export type Action = (typeof ACTIONS)[number];

export const TOKEN_VERSION = 1;
/** Bounds on what a stranger can make the node parse and verify. */
export const LIMITS = {
  chainLinks: 16,
  listTokens: 16,
  listBytes: 64 * 1024,
  paths: 64,
  depth: 255,
  didLength: 128,
  nonceLength: 64,
} as const;

export interface Token {
  v: typeof TOKEN_VERSION;
  act: Action;
  /** did:key of the signer. */
  iss: string;
  /** did:key of the grantee; empty for a revocation. */
  aud: string;
  /** Capability paths granted (a revocation carries none). */
  cap: string[];
  /** Broadcast topics granted (paths as well). */
  topic: string[];
  /** Expiry, ns since the Unix epoch (a uint64, kept exact). */
  exp: bigint;
  /** How many further delegation links may hang below this one. */
  depth: number;
  /** Random hex: two grants with equal content still differ (and revoke separately). */
  nonce: string;
  /** Revocations only: id of the token revoked. */
  rev?: string;
  /** The token that granted `iss` what this one passes on. */
  chain?: Token;
  sig: Uint8Array;
}

export type UnsignedToken = Omit<Token, 'sig'>;

export const SIGNING_PREFIX = 'dms:cap:';
const str = JSON.stringify;
const strList = (xs: readonly string[]) => `[${xs.map((x) => str(x)).join(',')}]`;

/**
 * The canonical JSON of a token without `sig`: members in a fixed order, `topic`, `rev` and
 * `chain` left out when empty, integers as bare digits, no whitespace. The embedded chain is
 * written whole, signature included, so a link signs exactly the grant it builds on.
 */
export function canonicalTokenJson(t: UnsignedToken): string {
  let out = `{"v":${t.v},"act":${str(t.act)},"iss":${str(t.iss)},"aud":${str(t.aud)},"cap":${strList(t.cap)}`;
  if (t.topic.length) out += `,"topic":${strList(t.topic)}`;
  out += `,"exp":${t.exp},"depth":${t.depth},"nonce":${str(t.nonce)}`;
  if (t.rev) out += `,"rev":${str(t.rev)}`;
  if (t.chain) out += `,"chain":${encodeTokenJson(t.chain)}`;
  return out + '}';
}

// Encodings and ids are asked for repeatedly (ids per revocation check, JSON per chain link):
// tokens are immutable once signed, so each is computed once.
const jsonMemo = new WeakMap<Token, string>();
const idMemo = new WeakMap<Token, string>();

/** A signed token as JSON text: the canonical form plus `sig`. */
export function encodeTokenJson(t: Token): string {
  let json = jsonMemo.get(t);
  if (json === undefined) {
    json = `${canonicalTokenJson(t).slice(0, -1)},"sig":"${encodeBase64(t.sig)}"}`;
    jsonMemo.set(t, json);
  }
  return json;
}

export const tokenSigningBytes = (t: UnsignedToken): Buffer => Buffer.from(SIGNING_PREFIX + canonicalTokenJson(t), 'utf8');

/** A token's id: hex SHA-256 of its JSON, signature and chain included. Revocations name it. */
export function tokenId(t: Token): string {
  let id = idMemo.get(t);
  if (id === undefined) {
    id = createHash('sha256').update(encodeTokenJson(t)).digest('hex');
    idMemo.set(t, id);
  }
  return id;
}

/** The key id behind a did:key, or an error naming the field. */
export function idFromDid(did: string, field = 'did'): string {
  const notKey = () => invalid(`${field}: '${did.slice(0, 80)}' is not an Ed25519 did:key`);
  if (!did.startsWith('did:key:')) throw notKey();
  const id = did.slice('did:key:'.length);
  try {
    publicKeyFromId(id);
  } catch {
    throw notKey();
  }
  return id;
}

export interface IssueOptions {
  act: Exclude<Action, 'revoke'>;
  aud: string;
  cap: readonly string[];
  topic?: readonly string[];
  exp: bigint;
  depth?: number;
  chain?: Token;
}

function sign(key: KeyPair, body: UnsignedToken): Token {
  return { ...body, sig: key.signSync(tokenSigningBytes(body)) };
}

const newNonce = () => randomBytes(12).toString('hex');

/** Signs a new grant. It checks the token's own shape; whether it narrows its chain is `delegationProblem`'s job. */
export function issueToken(key: KeyPair, o: IssueOptions): Token {
  const t = sign(key, {
    v: TOKEN_VERSION,
    act: o.act,
    iss: key.did,
    aud: o.aud,
    cap: [...o.cap],
    topic: [...(o.topic ?? [])],
    exp: o.exp,
    depth: o.depth ?? 0,
    nonce: newNonce(),
    ...(o.chain ? { chain: o.chain } : {}),
  });
  checkShape(t, 'token');
  return t;
}

/** Signs a revocation of the token with id `rev`, valid until `exp` (no later than the revoked token could live). */
export function issueRevocation(key: KeyPair, rev: string, exp: bigint = U64_MAX): Token {
  const t = sign(key, { v: TOKEN_VERSION, act: 'revoke', iss: key.did, aud: '', cap: [], topic: [], exp, depth: 0, nonce: newNonce(), rev });
  checkShape(t, 'revocation');
  return t;
}

/** Whether the token's signature verifies under its issuer's key. */
export function signatureValid(t: Token): boolean {
  let key;
  try {
    key = verifyKeyFromId(idFromDid(t.iss));
  } catch {
    return false;
  }
  return verifySync(key, tokenSigningBytes(t), t.sig);
}

// ---------------------------------------------------------------------------------------------
// Reading. Tokens arrive from strangers: every field is checked, every size bounded.

type Json = Record<string, unknown>;

function field<T>(o: Json, name: string, where: string, check: (v: unknown) => v is T, expected: string): T {
  const v = o[name];
  if (!check(v)) throw invalid(`${where}.${name} must be ${expected}`);
  return v;
}

const isString = (v: unknown): v is string => typeof v === 'string';
const isBigint = (v: unknown): v is bigint => typeof v === 'bigint';
const isPathList = (v: unknown): v is string[] =>
  Array.isArray(v) && v.length <= LIMITS.paths && v.every((x) => typeof x === 'string' && isPath(x));

const KNOWN = new Set(['v', 'act', 'iss', 'aud', 'cap', 'topic', 'exp', 'depth', 'nonce', 'rev', 'chain', 'sig']);

/** A token from its parsed JSON (integers as bigint); `where` names it in error texts. */
export function tokenFromJson(value: unknown, where = 'token', level = 1): Token {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) throw invalid(`${where} must be a JSON object`);
  if (level > LIMITS.chainLinks) throw invalid(`${where}: a chain has at most ${LIMITS.chainLinks} links`);
  const o = value as Json;
  for (const k of Object.keys(o)) if (!KNOWN.has(k)) throw invalid(`${where}: unknown member '${k.slice(0, 40)}'`);
  const v = field(o, 'v', where, isBigint, `${TOKEN_VERSION}`);
  if (v !== BigInt(TOKEN_VERSION)) throw invalid(`${where}.v: version ${v} is not supported (this node reads ${TOKEN_VERSION})`);
  const act = field(o, 'act', where, (x): x is Action => ACTIONS.includes(x as Action), ACTIONS.join(', '));
  const depth = field(o, 'depth', where, isBigint, 'an integer');
  const topic = o.topic === undefined ? [] : field(o, 'topic', where, isPathList, `a list of at most ${LIMITS.paths} paths`);
  const t: Token = {
    v: TOKEN_VERSION,
    act,
    iss: field(o, 'iss', where, isString, 'a did:key'),
    aud: field(o, 'aud', where, isString, 'a did:key'),
    cap: field(o, 'cap', where, isPathList, `a list of at most ${LIMITS.paths} paths`),
    topic,
    exp: field(o, 'exp', where, isBigint, 'an integer (ns since the epoch)'),
    depth: depth >= 0n && depth <= BigInt(LIMITS.depth) ? Number(depth) : -1,
    nonce: field(o, 'nonce', where, isString, 'a string'),
    sig: decodeBase64(field(o, 'sig', where, isString, 'base64'), `${where}.sig`),
  };
  if (o.rev !== undefined) t.rev = field(o, 'rev', where, isString, 'a token id');
  if (o.chain !== undefined) t.chain = tokenFromJson(o.chain, `${where}.chain`, level + 1);
  checkShape(t, where);
  return t;
}

const HEX = /^[0-9a-f]+$/;

/** Rules every token obeys on its own, whoever made it. */
function checkShape(t: Token, where: string): void {
  const bad = (why: string) => invalid(`${where}: ${why}`);
  if (t.iss.length > LIMITS.didLength) throw bad('iss is too long');
  idFromDid(t.iss, `${where}.iss`);
  if (t.exp < 0n || t.exp > U64_MAX) throw bad(`exp must be an integer from 0 to ${U64_MAX}`);
  if (t.depth < 0) throw bad(`depth must be an integer from 0 to ${LIMITS.depth}`);
  if (t.nonce.length > LIMITS.nonceLength || !HEX.test(t.nonce)) throw bad('nonce must be hex');
  if (t.sig.length !== 64) throw bad('sig must be 64 bytes');
  if (t.act === 'revoke') {
    if (!t.rev || t.rev.length !== 64 || !HEX.test(t.rev)) throw bad('a revocation names the revoked token id (64 hex digits) in rev');
    if (t.aud || t.cap.length || t.topic.length || t.chain) throw bad('a revocation carries no audience, capabilities, topics or chain');
    return;
  }
  if (t.rev !== undefined) throw bad('rev belongs to revocations only');
  if (t.aud.length > LIMITS.didLength) throw bad('aud is too long');
  idFromDid(t.aud, `${where}.aud`);
  if (t.act === 'broadcast' && t.topic.length === 0) throw bad('a broadcast token names at least one topic');
  if (t.act !== 'broadcast' && t.cap.length === 0 && t.topic.length === 0) throw bad('a token grants at least one capability or topic');
  if (t.act !== 'delegate' && t.depth !== 0) throw bad(`depth is for delegate tokens; a(n) ${t.act} token has depth 0`);
  if (t.chain?.act === 'revoke') throw bad('a revocation cannot be a chain link');
}

// ---------------------------------------------------------------------------------------------
// Text forms. In an envelope `cap` holds the UTF-8 JSON array of tokens; people and files pass
// single tokens as base64url of the token JSON, which survives shells and copy-paste.

/** The bytes of an envelope's `cap`: a JSON array of tokens. */
export function encodeTokenList(tokens: readonly Token[]): Uint8Array {
  const buf = Buffer.from(`[${tokens.map(encodeTokenJson).join(',')}]`, 'utf8');
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** Parses an envelope's `cap`; every failure is an `invalid` DmsError naming the problem. */
export function decodeTokenList(bytes: Uint8Array): Token[] {
  if (bytes.length > LIMITS.listBytes) throw invalid(`cap: larger than ${LIMITS.listBytes} bytes`);
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw invalid('cap: not UTF-8');
  }
  const value = parseJsonLossless(text);
  if (!Array.isArray(value)) throw invalid('cap: must be a JSON array of tokens');
  if (value.length > LIMITS.listTokens) throw invalid(`cap: at most ${LIMITS.listTokens} tokens`);
  return value.map((v, i) => tokenFromJson(v, `cap[${i}]`));
}

/** A single token as text: base64url of its JSON. */
export const tokenToText = (t: Token): string => Buffer.from(encodeTokenJson(t), 'utf8').toString('base64url');

/** Reads a token from its text form (or its plain JSON). */
export function tokenFromText(text: string, where = 'token'): Token {
  const t = text.trim();
  if (t.length > LIMITS.listBytes * 2) throw invalid(`${where}: too long`);
  let json = t;
  if (!t.startsWith('{')) {
    if (!/^[A-Za-z0-9_-]+$/.test(t)) throw invalid(`${where}: not a token (expected base64url text or JSON)`);
    json = Buffer.from(t, 'base64url').toString('utf8');
    // Any word is base64url: what it decodes to is named, not the JSON parser's complaint about it.
    if (!json.startsWith('{')) throw invalid(`${where}: not a token (its text does not decode to a token's JSON)`);
  }
  return tokenFromJson(parseJsonLossless(json), where);
}

/** A token and the tokens above it, leaf first. */
export function linksOf(t: Token): Token[] {
  const links: Token[] = [];
  for (let cur: Token | undefined = t; cur; cur = cur.chain) links.push(cur);
  return links;
}
