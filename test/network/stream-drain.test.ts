/**
 * Backpressure on a libp2p stream of the node's stack (two hosts on loopback): what the block
 * server, the actor channel and the tunnel rely on when they write
 * `if (!stream.send(x)) await stream.onDrain()`. Both cases fail on @libp2p/utils 7.4.1 without
 * patches/@libp2p+utils+7.4.1.patch.
 */
import type { Stream } from '@libp2p/interface';
import { describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { createHost } from '../../runtime/network/host.js';

describe("a stream's onDrain", () => {
  it('makes a writer that waits for each drain hold little unsent, after the first drain too', { timeout: 20_000 }, async () => {
    // Unpatched, the first drain's promise stayed resolved, so from then on every wait
    // returned at once and the writer queued all it had.
    const MIB = 1024 * 1024;
    const TOTAL = 16 * MIB;
    const [sender, receiver] = await Promise.all([createHost({ keyPair: KeyPair.generate() }), createHost({ keyPair: KeyPair.generate() })]);
    try {
      let received = 0;
      let resolveAll!: () => void;
      const all = new Promise<void>((r) => (resolveAll = r));
      await receiver.handle('/dms-test/sink/1.0.0', (stream: Stream) => {
        stream.addEventListener('message', (e) => {
          received += e.data.byteLength;
          if (received >= TOTAL) resolveAll();
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
