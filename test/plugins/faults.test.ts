// A plugin that sends or invokes without waiting for the outcome (README "Plugins", ctx.send,
// ctx.invoke): a refusal nobody awaited was an unhandled rejection, which ended the node's
// process, and the behavior was /public, so anyone could end it. The node logs it and goes on.
// So it does for a fault the plugin's own code lets escape: the plugin's fault guard takes it.
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePayload, encodeEnvelope, parseEnvelope } from '../../runtime/wire/envelope.js';
import { envelope, post, rootOf } from '../helpers/envelopes.js';
import { type NodeProcess, removeHome, startNode } from '../helpers/node.js';

const fire = fileURLToPath(new URL('../fixtures/plugins/fire-and-forget.mjs', import.meta.url));

let node: NodeProcess;
beforeAll(async () => {
  node = await startNode({ config: { network: { enabled: false }, plugins: { modules: [fire] } } });
}, 60_000);
afterAll(async () => {
  await node?.stop();
  if (node) removeHome(node.home);
});

async function call(be: string): Promise<{ status: number; payload?: unknown }> {
  const env = envelope({ inbox: 'user-fire' }, { to: { ...rootOf(node.peerId), addr: { host: node.peerId, inbox: 'fire' } }, be, cont: '/private/r', ttlMs: 10_000 });
  const r = await post(`${node.url}/api/v1/actor/invoke`, encodeEnvelope(env));
  return r.status === 200 ? { status: 200, payload: decodePayload(parseEnvelope(r.text).msg) } : { status: r.status };
}

const healthy = async () => (await fetch(`${node.url}/health`).then((r) => r.status, () => 0)) === 200;

describe('a plugin behavior that does not wait for what it sent', { timeout: 30_000 }, () => {
  it.each([
    ['send', '/public/fire/send', { sent: true }],
    ['invoke', '/public/fire/invoke', { invoked: true }],
  ])('an unawaited %s that is refused leaves the node running', async (_what, be, answer) => {
    expect(await call(be)).toEqual({ status: 200, payload: answer });
    // The refusal comes at once: the node would have ended within a few milliseconds.
    await new Promise((r) => setTimeout(r, 500));
    expect(await healthy()).toBe(true);
    expect(node.proc.exitCode).toBe(null);
  });
});

describe("a fault a plugin's own code lets escape", { timeout: 30_000 }, () => {
  it.each([
    ['a timer that throws', '/public/fire/throw-later', 'thrown in a timer of the plugin'],
    ['a rejection left unhandled', '/public/fire/reject', 'rejected by the plugin, unhandled'],
  ])('%s is logged as the plugin\'s, and the node goes on', async (_what, be, message) => {
    expect(await call(be)).toEqual({ status: 200, payload: { armed: true } });
    await new Promise((r) => setTimeout(r, 500));
    expect(await healthy()).toBe(true);
    expect(node.proc.exitCode).toBe(null);
    expect(node.logs()).toContain(`plugin fault: ${message} (the node goes on)`);
  });
});
