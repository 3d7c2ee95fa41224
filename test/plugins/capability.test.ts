// A definePlugin behavior is an ordinary behavior: it runs only for a caller holding its
// capability, the behavior's own name unless it declares `capability`, and then the declared
// one is what the node checks. Callers are signed REST envelopes with keys of their own.
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeTokenList, issueToken } from '../../runtime/capability/token.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { msToNs, nowNs } from '../../runtime/time.js';
import { decodePayload, encodeEnvelope, parseEnvelope } from '../../runtime/wire/envelope.js';
import { envelope, post, rootOf, signEnvelopeSync } from '../helpers/envelopes.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';

const guarded = fileURLToPath(new URL('../fixtures/plugins/guarded.mjs', import.meta.url));

let node: NodeProcess;

beforeAll(async () => {
  node = await startNode({ config: { network: { enabled: false }, plugins: { modules: [guarded] } } });
}, 60_000);
afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
});

/** Invokes `be` on the guarded plugin's actor as `key` (unsigned, so the node signs as operator, when no key), carrying a grant of `caps` when given. */
async function call(be: string, key?: KeyPair, caps?: string[]): Promise<{ status: number; error?: string; payload?: unknown }> {
  const unsigned = envelope({ inbox: 'user-guarded' }, { to: { ...rootOf(node.peerId), addr: { host: node.peerId, inbox: 'guarded' } }, be, cont: '/private/r', ttlMs: 10_000 });
  let env = unsigned;
  if (key) {
    env = { ...unsigned, from: { ...unsigned.from, id: key.id, did: key.did } };
    if (caps) env.cap = encodeTokenList([issueToken(node.operator(), { act: 'invoke', aud: key.did, cap: caps, exp: nowNs() + msToNs(60_000) })]);
    env = signEnvelopeSync(env, key);
  }
  const r = await post(`${node.url}/api/v1/actor/invoke`, encodeEnvelope(env));
  if (r.status !== 200) return { status: r.status, error: r.json?.error ?? r.text };
  return { status: r.status, payload: decodePayload(parseEnvelope(r.text).msg) };
}

describe('a definePlugin behavior without `capability`', () => {
  it('is refused (403) to a caller holding nothing, naming the behavior as the capability', async () => {
    const stranger = KeyPair.generate();
    const r = await call('/plugin/guarded/default', stranger);
    expect(r.status).toBe(403);
    expect(r.error).toBe(`capability /plugin/guarded/default not granted to ${stranger.did}`);
  });

  it('runs for a caller granted its name, and for the node\'s own operator (control)', async () => {
    expect(await call('/plugin/guarded/default', KeyPair.generate(), ['/plugin/guarded/default'])).toEqual({ status: 200, payload: { ran: 'default' } });
    expect(await call('/plugin/guarded/default')).toEqual({ status: 200, payload: { ran: 'default' } });
  });
});

describe('a definePlugin behavior declaring `capability`', () => {
  it('is refused (403) to a caller holding nothing, naming the declared capability', async () => {
    const stranger = KeyPair.generate();
    const r = await call('/plugin/guarded/declared', stranger);
    expect(r.status).toBe(403);
    expect(r.error).toBe(`capability /guarded/special not granted to ${stranger.did}`);
  });

  it('is refused to a caller granted only the behavior\'s name: the declared capability is what is checked', async () => {
    const holder = KeyPair.generate();
    const r = await call('/plugin/guarded/declared', holder, ['/plugin/guarded/declared']);
    expect(r.status).toBe(403);
    expect(r.error).toBe(`capability /guarded/special not granted to ${holder.did}`);
  });

  it('runs for a caller granted the declared capability, which opens nothing else of the plugin', async () => {
    const holder = KeyPair.generate();
    expect(await call('/plugin/guarded/declared', holder, ['/guarded/special'])).toEqual({ status: 200, payload: { ran: 'declared' } });
    const other = await call('/plugin/guarded/default', holder, ['/guarded/special']);
    expect(other.status).toBe(403);
  });
});
