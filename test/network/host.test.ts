import type { Stream } from '@libp2p/interface';
import { describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import { createHost } from '../../runtime/network/host.js';

describe('createHost', () => {
  it('takes the node key as its libp2p identity and is left unstarted', async () => {
    const keyPair = KeyPair.generate();
    // mDNS is only configured here: an unstarted node sends no multicast.
    const node = await createHost({ keyPair, enableMdns: true });
    expect(node.peerId.toString()).toBe(keyPair.peerId);
    expect(node.status).toBe('stopped');
    expect(node.services.mdns).toBeDefined();
    expect((await createHost({ keyPair })).services.mdns).toBeUndefined();
  });

  it('refuses malformed listen and bootstrap addresses before libp2p sees them', async () => {
    const keyPair = KeyPair.generate();
    const cases = [
      { opts: { listen: ['garbage'] }, text: /listen address 'garbage' is not a multiaddr/ },
      { opts: { bootstrap: ['/ip4/127.0.0.1/tcp/4001'] }, text: /must end in \/p2p\/<peer id>/ },
    ];
    for (const { opts, text } of cases) {
      const e = await createHost({ keyPair, ...opts }).catch((err: unknown) => err);
      expect(e).toBeInstanceOf(DmsError);
      expect((e as DmsError).kind).toBe('invalid');
      expect((e as DmsError).message).toMatch(text);
    }
  });

  it('makes a writer that waits for each drain hold little unsent, after the first drain too', { timeout: 20_000 }, async () => {
    // The block server, the actor channel and the tunnel write `if (!send(x)) await onDrain()`.
    // Unpatched, @libp2p/utils kept its first drain's promise resolved, so from then on every
    // wait returned at once and the writer queued all it had (patches/@libp2p+utils+*.patch).
    const MIB = 1024 * 1024;
    const TOTAL = 16 * MIB;
    const [sender, receiver] = await Promise.all([createHost({ keyPair: KeyPair.generate() }), createHost({ keyPair: KeyPair.generate() })]);
    try {
      let received = 0;
      const all = new Promise<void>((resolve) => {
        void receiver.handle('/dms-test/sink/1.0.0', (stream: Stream) => {
          stream.addEventListener('message', (e) => {
            received += e.data.byteLength;
            if (received >= TOTAL) resolve();
          });
        });
      });
      await Promise.all([sender.start(), receiver.start()]);
      const stream = await sender.dialProtocol(receiver.getMultiaddrs(), '/dms-test/sink/1.0.0');
      const chunk = new Uint8Array(64 * 1024).fill(7);
      let drains = 0;
      let mostQueued = 0;
      for (let sent = 0; sent < TOTAL; sent += chunk.byteLength) {
        if (!stream.send(chunk)) {
          mostQueued = Math.max(mostQueued, stream.writeBufferLength);
          await stream.onDrain();
          drains++;
        }
      }
      await all;
      expect(received).toBe(TOTAL);
      expect(drains).toBeGreaterThan(1);
      expect(mostQueued).toBeLessThan(MIB);
    } finally {
      await Promise.all([sender.stop(), receiver.stop()]);
    }
  });

  it('rejects a wait for a drain that asks after its stream was closed, instead of waiting for ever', { timeout: 20_000 }, async () => {
    const [sender, receiver] = await Promise.all([createHost({ keyPair: KeyPair.generate() }), createHost({ keyPair: KeyPair.generate() })]);
    try {
      // A receiver that never reads: the sender's window runs out and stays out.
      await receiver.handle('/dms-test/stall/1.0.0', (stream: Stream) => stream.pause());
      await Promise.all([sender.start(), receiver.start()]);
      const stream = await sender.dialProtocol(receiver.getMultiaddrs(), '/dms-test/stall/1.0.0');
      const chunk = new Uint8Array(64 * 1024);
      while (stream.send(chunk));
      stream.abort(new Error('given up'));
      const outcome = await Promise.race([
        stream.onDrain().then(() => 'drained', (e: Error) => `rejected: ${e.name}`),
        new Promise((r) => setTimeout(() => r('still waiting after 2 s'), 2_000)),
      ]);
      expect(outcome).toBe('rejected: StreamClosedError');
    } finally {
      await Promise.all([sender.stop(), receiver.stop()]);
    }
  });
});
