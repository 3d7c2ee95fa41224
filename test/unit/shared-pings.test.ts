import { describe, expect, it, vi } from 'vitest';
import { SharedPings } from '../../runtime/network/pings.js';

/** A ping that answers when told, counting how many were sent and which were aborted. */
function scripted() {
  const sent: { peer: string; signal: AbortSignal; answer(ms: number): void }[] = [];
  const pings = new SharedPings(
    (peer, signal) =>
      new Promise<number>((resolve, reject) => {
        sent.push({ peer, signal, answer: resolve });
        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      }),
  );
  return { pings, sent };
}

describe('shared pings', () => {
  it('sends one ping per peer however many ask at once, and a new one once it is answered', async () => {
    const { pings, sent } = scripted();
    const asked = [pings.of('a', 5_000), pings.of('a', 5_000), pings.of('b', 5_000)];
    expect(sent.map((s) => s.peer)).toEqual(['a', 'b']);
    sent[0].answer(3);
    sent[1].answer(7);
    expect(await Promise.all(asked)).toEqual([3, 3, 7]);
    const again = pings.of('a', 5_000);
    expect(sent).toHaveLength(3);
    sent[2].answer(4);
    expect(await again).toBe(4);
  });

  it('lets each caller give up at its own bound; the ping goes on while another still waits, and stops once none does', async () => {
    const { pings, sent } = scripted();
    const short = pings.of('a', 20);
    const long = pings.of('a', 200);
    await expect(short).rejects.toMatchObject({ kind: 'timeout', message: expect.stringContaining('after 20 ms') });
    expect(sent[0].signal.aborted).toBe(false);
    await expect(long).rejects.toMatchObject({ kind: 'timeout', message: expect.stringContaining('after 200 ms') });
    // Its own timer ends it at that same bound, which may fire just after the caller's.
    await vi.waitFor(() => expect(sent[0].signal.aborted).toBe(true), { timeout: 1_000, interval: 5 });
    expect(sent).toHaveLength(1);
  });
});
