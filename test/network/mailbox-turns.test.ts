/**
 * One peer flooding a behavior that is slow (an operator's plugin that waits on an outside
 * service, open to everyone) must not shut every other caller out of that actor. First come
 * first served, the flooder's envelopes went into the actor's mailbox at the node's intake rate
 * (thousands a second) while the behavior took 128 a second: another peer's calls waited 4.0 and
 * 10.9 s behind them (watched), and a flood past 4,096 would fill the mailbox and have every
 * other caller refused until it drained.
 * Now a mailbox takes its senders in turns, grouped by host, and one host may hold a quarter of
 * it (runtime/mailbox.ts).
 */
import { fileURLToPath } from 'node:url';
import { peerIdFromString } from '@libp2p/peer-id';
import { describe, expect, it } from 'vitest';
import { DmsClient } from '../../client/client.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { encodeFrame } from '../../runtime/network/frames.js';
import { ACTOR_PROTOCOL } from '../../runtime/network/libp2p-transport.js';
import { msToNs, nextNonce, nowNs } from '../../runtime/time.js';
import { decodePayload, encodeEnvelope, encodePayload, type Envelope } from '../../runtime/wire/envelope.js';
import { signEnvelopeSync } from '../helpers/envelopes.js';
import { startIdentities } from '../helpers/identities.js';
import { listenAddr, waitFor } from '../helpers/network.js';
import { ForeignPeer } from '../helpers/peer.js';
import { nodeWithPeers } from '../helpers/started.js';

const plugin = fileURLToPath(new URL('../fixtures/plugins/open-slow.mjs', import.meta.url));
const INBOX = 'open-slow';
const BE = '/public/open-slow/wait';
/** Each call waits this long: 64 at once, the actor takes 128 a second. */
const WAIT_MS = 500;
/** Past a host's share (1,024) in two peers' halves, and enough to wait many seconds behind first come first served. */
const FLOOD = 2_000;

// Killed after the test: stopped gracefully, it would first serve what is left of the flood (seconds of it).
const scene = nodeWithPeers({ config: { plugins: { modules: [plugin] } } }, 'kill');

/** A signed call of the slow behavior from `peer`'s identity `key`, its reply to `cont`. */
function call(key: KeyPair, peer: string, cont: string, ttlMs: number): Envelope {
  const env: Envelope = {
    to: { id: '', did: '', addr: { host: scene.node.peerId, inbox: INBOX } },
    be: BE,
    from: { id: key.id, did: key.did, addr: { host: peer, inbox: 'caller' } },
    nonce: nextNonce(),
    opt: { exp: nowNs() + msToNs(ttlMs), cont },
    msg: encodePayload({ ms: WAIT_MS }),
  };
  return signEnvelopeSync(env, key);
}

/** The node's count of envelopes for the slow behavior with `outcome`, and its mailbox's depth. */
async function observed(outcome: string): Promise<{ count: number; depth: number }> {
  const text = await (await fetch(`${scene.node.url}/metrics`)).text();
  const count = Number(new RegExp(`dms_envelopes_total\\{behavior="${BE}",outcome="${outcome}"\\} (\\d+)`).exec(text)?.[1] ?? 0);
  const depth = Number(new RegExp(`dms_mailbox_depth\\{actor="${INBOX}"\\} (\\d+)`).exec(text)?.[1]);
  return { count, depth };
}

describe('a peer flooding a slow behavior', () => {
  it('fills only its host’s share of the actor’s mailbox, however many identities it has: another peer and the operator are served meanwhile', { timeout: 90_000 }, async () => {
    // Two identities on an address of their own (127.0.0.9), each writing half the flood on the
    // actor stream as fast as the node reads, within a peer's share: together past their host's.
    // They read no replies.
    const { node } = scene;
    const flooders = (await startIdentities(2, { localAddress: '127.0.0.9' })).map((f) => scene.keep(f));
    await Promise.all(
      flooders.map(async (flooder, n) => {
        expect(await flooder.dial(listenAddr(node))).toBe(true);
        const key = KeyPair.generate();
        const from = flooder.host.peerId.toString();
        const stream = await flooder.host.dialProtocol(peerIdFromString(node.peerId), ACTOR_PROTOCOL);
        for (let i = 0; i < FLOOD / 2; i++) {
          if (!stream.send(encodeFrame(encodeEnvelope(call(key, from, `/private/flood-${n}-${i}`, 60_000))))) await stream.onDrain({ signal: AbortSignal.timeout(20_000) });
        }
      }),
    );
    // Every envelope of it taken in: handled, waiting, or refused past its host's share.
    const refused = await waitFor('the node to take in the whole flood', async () => {
      const [ok, rejected] = [await observed('ok'), await observed('rejected')];
      return ok.count + ok.depth + rejected.count >= FLOOD && rejected;
    }, { timeoutMs: 20_000 });
    // Counted per peer alone, each half was within its share and none was refused.
    expect(refused.count, 'the flood refused past its host’s share').toBeGreaterThan(0);
    expect(refused.depth).toBeLessThanOrEqual(1_024);

    // Another peer's calls (from 127.0.0.1), while the flood still waits: each answered in about the call's own time.
    const honest = scene.keep(await ForeignPeer.connectedTo(node));
    const answers: string[] = [];
    for (let i = 0; i < 3; i++) {
      const started = Date.now();
      await honest.send(call(honest.key, honest.host, `/private/honest-${i}`, 20_000));
      const reply = await waitFor(`the answer to honest call ${i}`, () => honest.replies(`/private/honest-${i}`)[0], { timeoutMs: 15_000, intervalMs: 10 });
      answers.push(`${JSON.stringify(decodePayload(reply.msg))} in ${Date.now() - started} ms`);
    }
    // And the operator's, over REST.
    const started = Date.now();
    const operator = await new DmsClient({ url: node.url, timeoutMs: 15_000 }).invoke({ inbox: INBOX }, BE, { ms: WAIT_MS });
    answers.push(`operator: ${JSON.stringify(operator.payload)} in ${Date.now() - started} ms`);

    const { depth } = await observed('ok');
    // The flood still waits behind them: the calls went in turns, not behind it.
    expect(depth, `the flood still waiting when the other calls were done (${answers.join('; ')})`).toBeGreaterThan(64);
    expect(answers.every((a) => a.includes(`{"waited_ms":${WAIT_MS}}`)), answers.join('; ')).toBe(true);
    // In turns, a call waits for the next free slot (every few ms), then its own 500 ms; first
    // come first served it waited behind what was left of the flood (seconds), or was refused.
    for (const a of answers) expect(Number(/in (\d+) ms/.exec(a)![1]), answers.join('; ')).toBeLessThan(3_000);
  });
});
