import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { stringify as stringifyLossless } from 'lossless-json';
import { DmsClient, type Reply } from '../../client/client.js';
import { ClientError } from '../../client/errors.js';
import type { Target } from '../../client/target.js';
import { anchorsPath, readAnchors } from '../../runtime/capability/anchors.js';
import { readKey } from '../../runtime/home.js';
import { isDmsError } from '../../runtime/errors.js';
import { parseUntrustedJson } from '../../runtime/json.js';
import { encodeEnvelope, type Envelope, type Handle, parseJsonLossless } from '../../runtime/wire/envelope.js';
import { CliError, globals, homeOf, nodeFailure, nodeUrl } from '../context.js';
import { readTextInput } from '../read-text.js';
import { unlockKeys } from '../passphrase.js';
import { restCredentials } from './auth.js';
import { keyPath, readToken } from './cap.js';
import { terminalSafe } from '../terminal.js';
import { patientFetch } from '../patient-fetch.js';

interface TargetOptions {
  to?: string;
  host?: string;
}

interface CallOptions extends TargetOptions {
  timeout?: number;
}

interface BroadcastOptions {
  topic: string;
  limit?: number;
  timeout?: number;
}

/** Replies to a CLI call wait at most this long unless --timeout says otherwise. */
const DEFAULT_INVOKE_S = 30;
const DEFAULT_BROADCAST_S = 5;
const MAX_TIMEOUT_S = 86_400;

const PAYLOAD_HELP = 'JSON payload (default {}; - reads it from stdin)';
const TO_HELP = "destination: an inbox name or a handle as JSON (default: the node's root actor)";
const HOST_HELP = 'peer id of the node the destination inbox lives on (default: this node)';

export function registerActorCommands(program: Command): void {
  const actor = program
    .command('actor')
    .description("talk to actors through the node's REST interface, with envelopes signed by the operator key");
  // Sealed keys are unlocked before any action runs: asked at a terminal, else DMS_PASSPHRASE.
  actor.hook('preAction', (_actor, action) => unlockKeys([keyPath(homeOf(action), (action.opts() as KeyOptions).key)]));

  actor
    .command('handle')
    .description("print the handle of the node's root actor")
    .action(async (_opts, cmd: Command) => {
      const client = clientFor(cmd);
      const handle = await call(homeOf(cmd), () => client.handle());
      printJson(handle);
    });

  actor
    .command('send')
    .description('send a message to an actor without waiting for a reply')
    .argument('<behavior>', 'behavior name, e.g. /public/hello')
    .argument('[payload-json]', PAYLOAD_HELP)
    .option('--to <inbox|handle-json>', TO_HELP)
    .option('--host <peer-id>', HOST_HELP)
    .option('--timeout <seconds>', `how long the message stays valid (default ${DEFAULT_INVOKE_S})`, parseSeconds)
    .option('--key <name|file>', KEY_HELP)
    .option('--cap <token>', CAP_HELP, collectCaps, [])
    .action(async (be: string, payloadText: string | undefined, opts: CallOptions, cmd: Command) => {
      const client = clientFor(cmd);
      const payload = parsePayload(payloadText);
      const env = await call(homeOf(cmd), () => client.send(parseTarget(opts), be, payload, { ttlMs: ttlMs(opts.timeout, DEFAULT_INVOKE_S) }));
      if (globals(cmd).json) printJson({ sent: true, envelope: envelopeJson(env) });
      else process.stdout.write(`sent ${be} to ${describeHandle(env.to)}\n`);
    });

  actor
    .command('invoke')
    .description("send a message to an actor and print its reply's payload")
    .argument('<behavior>', 'behavior name, e.g. /public/hello')
    .argument('[payload-json]', PAYLOAD_HELP)
    .option('--to <inbox|handle-json>', TO_HELP)
    .option('--host <peer-id>', HOST_HELP)
    .option('--timeout <seconds>', `seconds to wait for the reply (default ${DEFAULT_INVOKE_S})`, parseSeconds)
    .option('--key <name|file>', KEY_HELP)
    .option('--cap <token>', CAP_HELP, collectCaps, [])
    .action(async (be: string, payloadText: string | undefined, opts: CallOptions, cmd: Command) => {
      const client = clientFor(cmd);
      const payload = parsePayload(payloadText);
      const reply = await call(homeOf(cmd), () => client.invoke(parseTarget(opts), be, payload, { ttlMs: ttlMs(opts.timeout, DEFAULT_INVOKE_S) }), be);
      printJson(globals(cmd).json ? replyJson(reply) : reply.payload);
    });

  actor
    .command('broadcast')
    .description('publish a message on a topic and print the replies that arrive in time')
    .argument('<behavior>', 'behavior name, e.g. /broadcast/hello')
    .argument('[payload-json]', PAYLOAD_HELP)
    .requiredOption('--topic <topic>', 'publish/subscribe topic, e.g. /dms/hello')
    .option('--limit <n>', 'return as soon as this many replies arrived', parseLimit)
    .option('--timeout <seconds>', `seconds to collect replies (default ${DEFAULT_BROADCAST_S})`, parseSeconds)
    .option('--key <name|file>', KEY_HELP)
    .option('--cap <token>', CAP_HELP, collectCaps, [])
    .action(async (be: string, payloadText: string | undefined, opts: BroadcastOptions, cmd: Command) => {
      const client = clientFor(cmd);
      const payload = parsePayload(payloadText);
      const seconds = opts.timeout ?? DEFAULT_BROADCAST_S;
      const replies = await call(homeOf(cmd), () =>
        client.broadcast(opts.topic, be, payload, { limit: opts.limit, ttlMs: ttlMs(seconds, DEFAULT_BROADCAST_S) }),
      );
      if (globals(cmd).json) return printJson(replies.map(replyJson));
      if (replies.length === 0) {
        process.stdout.write(`no replies within ${seconds} s\n`);
        return;
      }
      for (const r of replies) {
        process.stdout.write(terminalSafe(`reply from ${describeHandle(r.env.from)}${r.env.from.did ? ` (${r.env.from.did})` : ''}\n`));
        if (r.error !== undefined) process.stdout.write(terminalSafe(`error: ${r.error}\n`));
        else printJson(printable(r.payload));
      }
    });
}

/**
 * A client for this home's node, signing as the home's operator (the identity a person acts
 * under) or --key. Envelopes carry the --cap tokens and the home's provide anchors that fit
 * them; DMS_API_KEY / DMS_TOKEN authenticate to a node with REST auth on.
 */
export function clientFor(cmd: Command): DmsClient {
  const home = homeOf(cmd);
  const opts = cmd.opts() as KeyOptions;
  const path = keyPath(home, opts.key);
  if (!existsSync(path)) throw new CliError(`no operator key at ${path}; run \`dms init\` to create the home's keys`);
  const provide = [...(opts.cap ?? []).map((c) => readToken(c, '--cap')), ...readAnchors(anchorsPath(home)).provide];
  return new DmsClient({ url: nodeUrl(cmd), key: readKey(path), provide, headers: restCredentials(), fetch: patientFetch });
}

interface KeyOptions {
  key?: string;
  cap?: string[];
}

const KEY_HELP = 'sign as this key: a name under <home>/keys or a key file (default: the operator)';
const CAP_HELP = 'attach this capability token (text, a file, or -); repeatable. The home\'s provide anchors that fit are attached too';
const collectCaps = (v: string, prev: string[]) => [...prev, v];

/** Runs a client call, turning its failures into one line a person can act on. */
async function call<T>(home: string, fn: () => Promise<T>, be?: string): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    if (!(e instanceof ClientError)) throw e;
    if (e.kind === 'timeout' && e.status === 408) throw new CliError(`${e.message}; a longer --timeout may help`);
    throw nodeFailure(e, home, be ?? 'the actor');
  }
}

function parsePayload(text: string | undefined): unknown {
  if (text === undefined) return {};
  const source = text === '-' ? readTextInput('-') : text;
  try {
    return parseUntrustedJson(source);
  } catch (e) {
    if (isDmsError(e)) throw new CliError(`payload: ${e.message}`);
    throw new CliError(`payload is not valid JSON: ${(e as Error).message}`);
  }
}

/** `--to`/`--host` into a client Target: an inbox name, a `{host?, inbox}` object, or a full handle. */
export function parseTarget(opts: TargetOptions): Target {
  const host = opts.host?.trim() || undefined;
  const to = opts.to?.trim();
  if (!to) return host ? { host, inbox: 'root' } : 'root';
  if (!to.startsWith('{')) return { host, inbox: to };
  let value: unknown;
  try {
    value = parseUntrustedJson(to);
  } catch (e) {
    if (isDmsError(e)) throw new CliError(`--to: ${e.message}`);
    throw new CliError(`--to: not valid JSON: ${(e as Error).message}`);
  }
  const v = value as { id?: unknown; did?: unknown; host?: unknown; inbox?: unknown; addr?: { host?: unknown; inbox?: unknown } };
  if (v.addr !== undefined) {
    if (host) throw new CliError('--host cannot be combined with a full handle in --to; put the host in its addr');
    const a = v.addr;
    if (!a || typeof a !== 'object' || typeof a.inbox !== 'string' || !a.inbox) throw new CliError('--to: a handle needs addr.inbox');
    if (!optionalString(a.host) || !optionalString(v.id) || !optionalString(v.did)) {
      throw new CliError('--to: handle fields id, did and addr.host must be strings');
    }
    return { id: v.id ?? '', did: v.did ?? '', addr: { host: a.host ?? '', inbox: a.inbox } };
  }
  if (typeof v.inbox !== 'string' || !v.inbox) throw new CliError('--to: expected an inbox name, {"inbox": ...} or a handle with addr');
  if (!optionalString(v.host)) throw new CliError('--to: host must be a string');
  return { host: v.host || host, inbox: v.inbox };
}

const optionalString = (x: unknown): x is string | undefined => x === undefined || typeof x === 'string';

function parseSeconds(text: string): number {
  const s = Number(text);
  if (!/^\d+(\.\d+)?$/.test(text.trim()) || !(s > 0) || s > MAX_TIMEOUT_S) {
    throw new CliError(`--timeout: '${text}' is not a number of seconds (above 0, at most ${MAX_TIMEOUT_S})`);
  }
  return s;
}

function parseLimit(text: string): number {
  if (!/^[1-9]\d{0,8}$/.test(text.trim())) throw new CliError(`--limit: '${text}' is not a positive integer`);
  return Number(text);
}

const ttlMs = (seconds: number | undefined, fallback: number): number => Math.round((seconds ?? fallback) * 1000);

const describeHandle = (h: Handle): string => `${h.addr.host || '(this node)'}/${h.addr.inbox || '(broadcast)'}`;

/** The envelope as its wire JSON, integers kept exact (nonce and exp exceed JavaScript numbers). */
const envelopeJson = (env: Envelope): unknown => parseJsonLossless(encodeEnvelope(env));

function replyJson<T>(r: Reply<T>): Record<string, unknown> {
  const out: Record<string, unknown> = { payload: printable(r.payload) };
  if (r.error !== undefined) Object.assign(out, { error: r.error, kind: r.errorKind });
  out.envelope = envelopeJson(r.env);
  return out;
}

/** A payload that is not JSON (only possible from broadcast replies) is shown as its base64. */
const printable = (payload: unknown): unknown =>
  payload instanceof Uint8Array ? { base64: Buffer.from(payload).toString('base64') } : payload;

/** Pretty JSON that writes bigints as bare integers, as the wire does. */
function printJson(value: unknown): void {
  process.stdout.write(`${stringifyLossless(value, null, 2) ?? 'null'}\n`);
}
