import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import { stringify as stringifyLossless } from 'lossless-json';
import { type AnchorKind, type Anchors, addToken, anchorsPath, readAnchors, updateAnchors } from '../../runtime/capability/anchors.js';
import { Authority } from '../../runtime/capability/authority.js';
import { checkChain, delegationProblem, expiryProblem } from '../../runtime/capability/chain.js';
import { covers, parsePath } from '../../runtime/capability/paths.js';
import {
  type Action,
  idFromDid,
  issueRevocation,
  issueToken,
  linksOf,
  type Token,
  tokenFromText,
  tokenId,
  tokenToText,
} from '../../runtime/capability/token.js';
import type { KeyPair } from '../../runtime/crypto/keys.js';
import { errorText } from '../../runtime/errors.js';
import { homePaths, readKey } from '../../runtime/home.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { U64_MAX } from '../../runtime/wire/envelope.js';
import { CliError, globals, homeOf, runningNode } from '../context.js';
import { readTextInput } from '../read-text.js';
import { jobsReadBy, providerTold, type Revoked } from '../read-rights.js';
import { restFor } from '../rest.js';
import { unlockKeys } from '../passphrase.js';

/**
 * `dms cap …`: issue capability tokens and keep this home's trust anchors (docs/CAPABILITIES.md).
 * Tokens are printed alone on stdout as text (so `$(dms cap new …)` captures them); what they
 * say goes to stderr, or everything to stdout as JSON with --json.
 */

interface IssueFlags {
  cap: string[];
  topic: string[];
  expiry: string;
  depth?: number;
  action?: string;
  key?: string;
}

interface DelegateFlags extends IssueFlags {
  from?: string;
}

interface AnchorFlags {
  root: string[];
  require: string[];
  provide: string[];
  revoke: string[];
}

const DEFAULT_EXPIRY = '24h';
const collect = (v: string, prev: string[]) => [...prev, v];

export function registerCapCommands(program: Command): void {
  const cap = program
    .command('cap')
    .description('capability tokens: who may invoke what on which node, and this home\'s trust anchors');

  issueOptions(
    cap
      .command('new')
      .description('sign a new token granting <did> capabilities (as --key, default the operator); prints it, anchors nothing')
      .argument('<did>', 'audience: the did:key that receives the grant'),
  ).action(async (aud: string, flags: IssueFlags, cmd: Command) => {
    const key = await signingKey(cmd, flags.key);
    const t = issue(key, aud, flags);
    printToken(cmd, t, { anchored: null });
  });

  issueOptions(
    cap
      .command('grant')
      .description("grant <did> capabilities on this home's node: signs as the operator and anchors the token as `require`, so the node honours it at once")
      .argument('<did>', 'audience: the did:key that receives the grant'),
  ).action(async (aud: string, flags: IssueFlags, cmd: Command) => {
    const home = homeOf(cmd);
    const key = await signingKey(cmd, flags.key);
    const t = issue(key, aud, flags);
    updateAnchors(anchorsPath(home), (a) => addToken(a, 'require', t));
    printToken(cmd, t, { anchored: 'require' }, `anchored as require in ${anchorsPath(home)}${runningNode(home) ? '; the running node picks it up within a second' : ''}`);
  });

  issueOptions(
    cap
      .command('delegate')
      .description('pass on part of a grant you hold: a token whose chain is that grant, narrowing capabilities, topics, expiry and depth')
      .argument('<did>', 'audience: the did:key that receives the grant')
      .option('--from <token>', "the grant being passed on (text, a file, or - for stdin); default: a provide anchor of this home granted to the signing key that covers what is asked"),
  ).action(async (aud: string, flags: DelegateFlags, cmd: Command) => {
    const home = homeOf(cmd);
    const key = await signingKey(cmd, flags.key);
    const parent = flags.from ? readToken(flags.from, '--from') : pickParent(readAnchors(anchorsPath(home)), key.did, flags);
    const t = issue(key, aud, flags, parent);
    printToken(cmd, t, { anchored: null });
  });

  cap
    .command('anchor')
    .description("add trust anchors to this home: root DIDs, tokens required from callers or provided with this home's calls, revocations")
    .option('--root <did>', 'trust this did:key fully (every token chain must start at a root)', collect, [])
    .option('--require <token>', 'authorize incoming calls by the token\'s audience (text, a file, or -)', collect, [])
    .option('--provide <token>', "attach the token to this home's outgoing calls (text, a file, or -)", collect, [])
    .option('--revoke <token>', 'honour a signed revocation (text, a file, or -)', collect, [])
    .action((flags: AnchorFlags, cmd: Command) => {
      const home = homeOf(cmd);
      const added: { kind: string; what: string }[] = [];
      const roots = flags.root.map((d) => checkedDid(d, '--root'));
      const tokens = (['require', 'provide', 'revoke'] as const).flatMap((kind) => flags[kind].map((text) => ({ kind, t: readToken(text, `--${kind}`) })));
      if (roots.length + tokens.length === 0) throw new CliError('nothing to anchor: give --root, --require, --provide or --revoke');
      for (const { kind, t } of tokens) {
        if ((kind === 'revoke') !== (t.act === 'revoke')) throw new CliError(`--${kind}: ${kind === 'revoke' ? 'expects a revocation' : 'a revocation belongs in --revoke'}`);
      }
      updateAnchors(anchorsPath(home), (a) => {
        for (const did of roots) if (!a.root.includes(did)) (a.root.push(did), added.push({ kind: 'root', what: did }));
        for (const { kind, t } of tokens) if (addToken(a, kind, t)) added.push({ kind, what: tokenId(t) });
      });
      const text = added.length ? added.map((x) => `${x.kind.padEnd(8)} ${x.what}`).join('\n') : 'already anchored; nothing changed';
      say(cmd, { added }, text);
    });

  cap
    .command('list')
    .description("show this home's trust anchors, and whether each token is valid here")
    .action((_opts, cmd: Command) => {
      const a = readAnchors(anchorsPath(homeOf(cmd)));
      const trust = new Authority(a);
      const describe = (kind: AnchorKind) => a[kind].map((t) => summary(t, kind === 'revoke' ? undefined : status(t, trust, kind)));
      const data = { root: a.root, require: describe('require'), provide: describe('provide'), revoke: describe('revoke') };
      const lines = [`root (${a.root.length})`, ...a.root.map((d) => `  ${d}`)];
      for (const kind of ['require', 'provide', 'revoke'] as const) {
        lines.push(`${kind} (${a[kind].length})`);
        for (const s of data[kind]) lines.push(`  ${line(s)}`);
      }
      say(cmd, data, lines.join('\n'));
    });

  cap
    .command('revoke')
    .description('revoke a token (and every token delegated from it): signs a revocation as the operator and anchors it here; prints it for other nodes')
    .argument('<token-or-id>', 'the token (text, a file, or -), its 64-hex id, or a unique prefix of the id of an anchored token (as `cap list` prints)')
    .option('--key <name|file>', 'sign as this key instead of the operator (only its own grants, or those below them, can be revoked by it)')
    .action(async (what: string, flags: { key?: string }, cmd: Command) => {
      const home = homeOf(cmd);
      const target = isTokenId(what) ? undefined : readToken(what, 'token');
      const id = target ? tokenId(target) : anchoredTokenId(readAnchors(anchorsPath(home)), what);
      const key = await signingKey(cmd, flags.key);
      const r = issueRevocation(key, id, target?.exp ?? U64_MAX);
      let dropped = 0;
      updateAnchors(anchorsPath(home), (a) => {
        addToken(a, 'revoke', r);
        // Inert once revoked; dropping them keeps `cap list` to what still matters.
        for (const kind of ['require', 'provide'] as const) {
          const before = a[kind].length;
          a[kind] = a[kind].filter((t) => !linksOf(t).some((l) => tokenId(l) === id));
          dropped += before - a[kind].length;
        }
      });
      const told = target ? await tellJobsOfReadRight(cmd, home, target, id) : [];
      printToken(cmd, r, { anchored: 'revoke', revoked: id, dropped, ...(told.length ? { jobs: told } : {}) }, [`revoked ${id}${dropped ? `; ${dropped} anchored token(s) built on it removed` : ''}`, ...told.map((t) => t.note)].join('\n'));
    });
}

/**
 * A job read right (`dms jobs grant`) is also checked by the job's provider, which knows only
 * revocations its requester tells it: revoked here, it is revoked through the running node too
 * (`DELETE /api/v1/jobs/{id}/grants/{grant}`), which tells the provider. Each job's outcome, as a note.
 */
async function tellJobsOfReadRight(cmd: Command, home: string, t: Token, id: string): Promise<{ job: string; note: string }[]> {
  const jobs = jobsReadBy(t);
  if (jobs.length === 0) return [];
  if (!runningNode(home)) {
    return jobs.map((job) => ({ job, note: `job ${job}'s read right: the node is not running, so its provider was not told; run \`dms jobs revoke ${job} ${id}\` once it is` }));
  }
  const rest = restFor(cmd);
  return Promise.all(
    jobs.map(async (job) => {
      try {
        const r = await rest.delete<Revoked>(`/api/v1/jobs/${job}/grants/${id}`);
        return { job, note: `job ${job}'s read right revoked by the node too: ${providerTold(r)}` };
      } catch (e) {
        return { job, note: `job ${job}'s read right: the node did not revoke it (${errorText(e)})` };
      }
    }),
  );
}

// --- issuing ----------------------------------------------------------------------------------

function issueOptions(cmd: Command): Command {
  return cmd
    .option('--cap <path>', 'capability to grant, e.g. /dms/job (repeatable; / grants everything)', collect, [])
    .option('--topic <topic>', 'broadcast topic to grant, e.g. /dms/jobs (repeatable)', collect, [])
    .option('--expiry <duration>', `how long the grant lasts: 30s, 15m, 24h, 7d, or an RFC 3339 time`, DEFAULT_EXPIRY)
    .option('--depth <n>', 'how many further delegations the audience may make (default 0; above 0 makes a delegate token)', parseDepth)
    .option('--action <action>', 'invoke, delegate or broadcast (default: delegate with --depth, broadcast with only --topic, else invoke)')
    .option('--key <name|file>', 'sign as this key: a name under <home>/keys, or a key file (default: the operator)');
}

function issue(key: KeyPair, aud: string, flags: IssueFlags, chain?: Token): Token {
  const cap = flags.cap.map((c) => parsePath(c, '--cap'));
  const topic = flags.topic.map((t) => parsePath(t, '--topic'));
  if (cap.length + topic.length === 0) throw new CliError('grant at least one --cap or --topic');
  const depth = flags.depth ?? 0;
  const act = actionOf(flags.action, depth, cap, topic);
  const exp = expiryOf(flags.expiry, chain);
  let t: Token;
  try {
    t = issueToken(key, { act, aud: checkedDid(aud, 'did'), cap, topic, exp, depth, chain });
  } catch (e) {
    throw new CliError(errorText(e));
  }
  // Refuse here what every node would refuse: better than a token that silently grants nothing.
  if (chain) {
    const problem = delegationProblem(chain, t);
    if (problem) throw new CliError(`cannot delegate: ${problem}`);
  }
  return t;
}

function actionOf(flag: string | undefined, depth: number, cap: string[], topic: string[]): Exclude<Action, 'revoke'> {
  if (flag === undefined) return depth > 0 ? 'delegate' : cap.length === 0 ? 'broadcast' : 'invoke';
  if (flag !== 'invoke' && flag !== 'delegate' && flag !== 'broadcast') throw new CliError(`--action: '${flag}' is not invoke, delegate or broadcast`);
  if (depth > 0 && flag !== 'delegate') throw new CliError('--depth above 0 needs --action delegate');
  if (flag === 'broadcast' && topic.length === 0) throw new CliError('a broadcast token needs at least one --topic');
  return flag;
}

const UNITS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `--expiry` as ns since the epoch; a delegation cannot outlive its parent, so it is capped there. */
function expiryOf(text: string, chain?: Token): bigint {
  const m = /^(\d+)([smhd])$/.exec(text.trim());
  let exp: bigint;
  if (m) exp = nowNs() + msToNs(Number(m[1]) * UNITS[m[2]]);
  else {
    const ms = Date.parse(text);
    if (!/^\d{4}-\d{2}-\d{2}/.test(text) || Number.isNaN(ms)) throw new CliError(`--expiry: '${text}' is neither a duration (30s, 15m, 24h, 7d) nor an RFC 3339 time`);
    exp = msToNs(ms);
  }
  if (exp <= nowNs()) throw new CliError(`--expiry: '${text}' is in the past`);
  return chain && chain.exp < exp ? chain.exp : exp;
}

function parseDepth(text: string): number {
  if (!/^\d{1,3}$/.test(text) || Number(text) > 255) throw new CliError(`--depth: '${text}' is not a whole number from 0 to 255`);
  return Number(text);
}

function checkedDid(text: string, what: string): string {
  const did = text.trim();
  try {
    idFromDid(did, what);
  } catch (e) {
    throw new CliError(errorText(e));
  }
  return did;
}

/** The provide anchor a delegation hangs below: granted to the signer, covering what is asked. */
function pickParent(a: Anchors, did: string, flags: IssueFlags): Token {
  const cap = flags.cap.map((c) => parsePath(c, '--cap'));
  const topic = flags.topic.map((t) => parsePath(t, '--topic'));
  const now = nowNs();
  const parent = a.provide.find((t) => t.aud === did && t.act === 'delegate' && t.depth > 0 && t.exp > now && covers(t.cap, cap) && covers(t.topic, topic));
  if (!parent) throw new CliError(`no provide anchor of this home lets ${did} delegate ${[...cap, ...topic].join(', ')}; pass the grant with --from`);
  return parent;
}

// --- keys and tokens from arguments -------------------------------------------------------------

/** Hex of at most a token id's length, and not a file: an id or the prefix of one, never a token text. */
const isTokenId = (arg: string): boolean => /^[0-9a-f]{1,64}$/i.test(arg.trim()) && !existsSync(arg);

/**
 * The id of a token to revoke: a whole 64-hex id as given (the token may be anchored on other
 * nodes only), else the one anchored token (or link of one's chain) whose id starts with it.
 */
function anchoredTokenId(a: Anchors, given: string): string {
  const prefix = given.trim().toLowerCase();
  const ids = [...new Set([...a.require, ...a.provide].flatMap((t) => linksOf(t).map(tokenId)))];
  const matches = ids.filter((id) => id.startsWith(prefix));
  if (matches.length === 1) return matches[0];
  if (prefix.length === 64) return prefix;
  if (matches.length === 0) throw new CliError(`no anchored token id starts with '${prefix}'; \`dms cap list\` shows them (a token anchored elsewhere needs its whole 64-hex id, or the token itself)`);
  throw new CliError(`'${prefix}' matches ${matches.length} anchored tokens: ${matches.join(', ')}; give more characters`);
}

/** A key by name under <home>/keys (operator, node, or one made by `dms key new`), or a file. */
export function keyPath(home: string, nameOrFile: string | undefined): string {
  if (!nameOrFile) return homePaths(home).operatorKey;
  const named = join(homePaths(home).keys, `${nameOrFile}.json`);
  if (/^[A-Za-z0-9_.-]+$/.test(nameOrFile) && existsSync(named)) return named;
  if (existsSync(nameOrFile)) return nameOrFile;
  throw new CliError(`no key named '${nameOrFile}' in ${homePaths(home).keys} and no such file`);
}

export async function signingKey(cmd: Command, nameOrFile?: string): Promise<KeyPair> {
  const path = keyPath(homeOf(cmd), nameOrFile);
  if (!existsSync(path)) throw new CliError(`no key at ${path}; run \`dms init\` to create the home's keys`);
  await unlockKeys([path]);
  try {
    return readKey(path);
  } catch (e) {
    throw new CliError(errorText(e));
  }
}

/** A token given on the command line: its text, a file holding it, or - for stdin. */
export function readToken(arg: string, what: string): Token {
  let text = arg;
  if (arg === '-') text = readTextInput('-');
  else if (!arg.trim().startsWith('{') && arg.length < 4096 && existsSync(arg)) text = readTextInput(arg);
  try {
    return tokenFromText(text, what);
  } catch (e) {
    throw new CliError(errorText(e));
  }
}

// --- output -----------------------------------------------------------------------------------

interface Summary {
  id: string;
  act: Action;
  iss: string;
  aud?: string;
  cap?: string[];
  topic?: string[];
  exp: bigint;
  expires: string;
  depth?: number;
  links: number;
  rev?: string;
  status?: string;
}

function summary(t: Token, status?: string): Summary {
  const s: Summary = { id: tokenId(t), act: t.act, iss: t.iss, exp: t.exp, expires: expiresText(t.exp), links: linksOf(t).length };
  if (t.act === 'revoke') s.rev = t.rev;
  else Object.assign(s, { aud: t.aud, cap: t.cap, topic: t.topic, depth: t.depth });
  if (status !== undefined) s.status = status;
  return s;
}

function status(t: Token, trust: Authority, kind: AnchorKind): string {
  if (kind === 'provide') return t.exp > nowNs() ? 'unexpired (checked by the nodes it is sent to)' : 'expired';
  const r = checkChain(t, trust);
  if (!r.ok) return `grants nothing here: ${r.reason}`;
  return expiryProblem(r.grant, nowNs()) ?? 'valid';
}

function expiresText(exp: bigint): string {
  if (exp >= U64_MAX - 1n) return 'never';
  const ms = exp / 1_000_000n;
  return ms > 8_640_000_000_000_000n ? 'far future' : new Date(Number(ms)).toISOString();
}

function line(s: Summary): string {
  const head = `${s.id.slice(0, 12)} ${s.act}`;
  if (s.act === 'revoke') return `${head} of ${s.rev} by ${s.iss}`;
  const what = [...(s.cap ?? []), ...(s.topic ?? []).map((t) => `topic ${t}`)].join(', ');
  return `${head} ${what} to ${s.aud} by ${s.iss}, until ${s.expires}${s.depth ? `, depth ${s.depth}` : ''}${s.links > 1 ? `, ${s.links} links` : ''} — ${s.status}`;
}

function printToken(cmd: Command, t: Token, extra: Record<string, unknown>, note?: string): void {
  const s = summary(t);
  if (globals(cmd).json) {
    process.stdout.write(`${stringifyLossless({ token: tokenToText(t), ...s, ...extra }, null, 2)}\n`);
    return;
  }
  process.stdout.write(`${tokenToText(t)}\n`);
  process.stderr.write(`${line({ ...s, status: 'signed' })}\n`);
  if (note) process.stderr.write(`${note}\n`);
}

function say(cmd: Command, data: unknown, text: string): void {
  if (globals(cmd).json) process.stdout.write(`${stringifyLossless(data, null, 2)}\n`);
  else process.stdout.write(`${text}\n`);
}
