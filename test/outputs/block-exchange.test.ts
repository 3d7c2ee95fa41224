import { Readable } from 'node:stream';
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { CID } from 'multiformats/cid';
import { sha256 } from 'multiformats/hashes/sha2';
import type { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { BlockExchange, MAX_STRIKES } from '../../runtime/network/blocks.js';
import { encodeBytesFrame as frame } from '../../runtime/network/frames.js';
import { importFile, rootEntry, fileContent } from '../../runtime/blocks/unixfs.js';
import type { SingleKadDHT } from '@libp2p/kad-dht';
import { waitFor } from '../helpers/network.js';
import { BlockHosts } from '../helpers/block-hosts.js';
import { DmsError } from '../../runtime/errors.js';

const hosts = new BlockHosts();
afterAll(() => hosts.stop());
const side = () => hosts.side();
const hostile: BlockHosts['hostile'] = (answer) => hosts.hostile(answer);

describe('/dms/blocks/1.0.0', async () => {
  const a = await side();
  const b = await side();
  await b.t.node.dial(a.t.node.getMultiaddrs());
  const data = randomBytes(4 * 1024 * 1024 + 3);
  const { cid } = await importFile(Readable.from([data]), a.store.fs, { maxBytes: data.length });

  it('fetches a whole DAG, each block checked, and a second fetch asks for nothing held', async () => {
    await b.ex.fetchDag(cid, [a.t.host]);
    const fetched = b.ex.stats.fetched;
    expect(fetched).toBeGreaterThan(16);
    const out: Buffer[] = [];
    for await (const c of fileContent(await rootEntry(cid, b.store.fs))) out.push(Buffer.from(c));
    expect(Buffer.concat(out).equals(data)).toBe(true);
    await b.ex.fetchDag(cid, [a.t.host]);
    expect(b.ex.stats.fetched).toBe(fetched);
    expect(a.ex.stats.served).toBe(fetched);
  });

  it('finds a holder through the DHT when the peers named lack the DAG, and then holds and announces it itself', async () => {
    // c knows only b, which lacks the DAG; a announced it. b and c are in a's DHT routing table.
    const c = await side();
    await c.t.node.dial(a.t.node.getMultiaddrs());
    const table = (t: Libp2pTransport) => (t.node.services.dht as SingleKadDHT).routingTable;
    await waitFor('a and c in each other’s DHT routing tables', () => table(a.t).size >= 1 && table(c.t).size >= 1, { timeoutMs: 15_000, intervalMs: 50 });
    const own = randomBytes(300 * 1024);
    const { cid: announced } = await importFile(Readable.from([own]), a.store.fs, { maxBytes: own.length });
    a.ex.announce(announced);
    await waitFor('the DHT to name a as a holder', async () => {
      for await (const p of c.t.node.contentRouting.findProviders(announced, { signal: AbortSignal.timeout(2_000) })) if (p.id.toString() === a.t.host) return true;
      return undefined;
    }, { timeoutMs: 15_000, intervalMs: 200 });
    const outsider = await side();
    expect(await c.ex.fetchDag(announced, [outsider.t.host], undefined, 64 * 1024 * 1024)).toBeGreaterThan(0);
    expect(c.ex.stats.found).toBeGreaterThanOrEqual(1);
    const out: Buffer[] = [];
    for await (const chunk of fileContent(await rootEntry(announced, c.store.fs))) out.push(Buffer.from(chunk));
    expect(Buffer.concat(out).equals(own)).toBe(true);
    await waitFor('the DHT to name c as a holder too', async () => {
      for await (const p of a.t.node.contentRouting.findProviders(announced, { signal: AbortSignal.timeout(2_000) })) if (p.id.toString() === c.t.host) return true;
      return undefined;
    }, { timeoutMs: 15_000, intervalMs: 200 });
  });

  it('names the block no peer has', async () => {
    const absent = CID.createV1(0x55, await sha256.digest(Buffer.from('nobody has this')));
    await expect(b.ex.fetchDag(absent, [a.t.host])).rejects.toThrow(new RegExp(`^block ${absent} not found on the nodes asked \\(${a.t.host}: does not hold it\\)$`));
  });

  it('says a block could not be fetched, not that it is nowhere, when no node asked answered', async () => {
    const gone = await side();
    const host = gone.t.host;
    await b.t.node.dial(gone.t.node.getMultiaddrs());
    await gone.t.stop();
    const block = CID.createV1(0x55, await sha256.digest(Buffer.from('held by a node that is down')));
    const failure = await b.ex.fetchDag(block, [host]).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(DmsError);
    expect((failure as DmsError).kind).toBe('unavailable');
    expect((failure as DmsError).message).toMatch(new RegExp(`^block ${block} could not be fetched: no node that may hold it answered \\(${host}: `));

    // Asked by a node that never knew where it was, and that has no DHT peer to ask: at once,
    // not after the exchange's timeout (10 s here) spent waiting in the DHT for a peer to ask.
    const stranger = await side();
    const began = performance.now();
    const lookup = await stranger.ex.fetchDag(block, [host]).catch((e: unknown) => e);
    expect(performance.now() - began).toBeLessThan(3_000);
    expect((lookup as DmsError).kind).toBe('unavailable');
    expect((lookup as DmsError).message).toContain('no valid addresses');
  });

  it('drops a wrong block and notes its sender, then stops asking it', async () => {
    const liar = await hostile(async (want, stream) => {
      for (const c of want) stream.send(frame(Uint8Array.of(1), c.bytes, Buffer.from('not the block')));
    });
    const c = await side();
    await c.t.node.dial(liar.node.getMultiaddrs());
    const block = CID.createV1(0x55, await sha256.digest(Buffer.from('wanted')));
    await expect(c.ex.fetchDag(block, [liar.host])).rejects.toThrow(/not found/);
    expect(await c.store.has(block)).toBe(false);
    expect(c.ex.strikesOf(liar.host)).toBe(1);
    for (let i = 1; i < MAX_STRIKES; i++) await c.ex.fetchDag(block, [liar.host]).catch(() => undefined);
    await expect(c.ex.fetchDag(block, [liar.host])).rejects.toThrow(/is not asked \(it sent 3 bad blocks\)/);
  });

  it('refuses a block it did not ask for, and blocks sent past the last answer', async () => {
    const other = CID.createV1(0x55, await sha256.digest(Buffer.from('other')));
    const pusher = await hostile(async (_want, stream) => {
      stream.send(frame(Uint8Array.of(1), other.bytes, Buffer.from('other')));
    });
    const endless = await hostile(async (want, stream) => {
      const bytes = Buffer.from('wanted');
      for (let i = 0; i < 1000; i++) if (!stream.send(frame(Uint8Array.of(1), want[0].bytes, bytes))) await stream.onDrain();
    });
    const c = await side();
    await c.t.node.dial(pusher.node.getMultiaddrs());
    await c.t.node.dial(endless.node.getMultiaddrs());
    const block = CID.createV1(0x55, await sha256.digest(Buffer.from('wanted')));
    await expect(c.ex.ask(pusher.host, [block])).rejects.toThrow(/which was not asked for/);
    expect(await c.store.has(other)).toBe(false);
    await expect(c.ex.ask(endless.host, [block])).rejects.toThrow(/past its last answer/);
    expect(c.ex.strikesOf(pusher.host)).toBe(1);
    expect(c.ex.strikesOf(endless.host)).toBe(1);
    // The one block it was asked for did check out and is kept.
    expect(await c.store.has(block)).toBe(true);
  });

  it('refuses a want-list naming one CID more than once, serving none of it', async () => {
    // Found by a hostile peer against a running node: one block named 256 times was read and
    // sent 256 times, 64 MiB for a want-list of one CID.
    const served = a.ex.stats.served;
    await expect(b.ex.ask(a.t.host, Array.from({ length: 8 }, () => cid))).rejects.toThrow();
    expect(a.ex.stats.served).toBe(served);
  });

  it('refuses a want-list naming a CID of another codec', async () => {
    const cbor = CID.createV1(0x71, await sha256.digest(Buffer.from('x')));
    await expect(b.ex.ask(a.t.host, [cbor])).rejects.toThrow();
    expect(a.ex.stats.served).toBeGreaterThan(0);
  });
});

describe('/dms/blocks/1.0.0 streams', () => {
  it('are closed at both ends after each exchange: many exchanges in a row stay within the stream limit', async () => {
    const a = await side();
    const b = await side();
    await b.t.node.dial(a.t.node.getMultiaddrs());
    const data = randomBytes(200 * 1024 * 4);
    const { cid } = await importFile(Readable.from([data]), a.store.fs, { maxBytes: data.length });
    const one = new BlockExchange(b.t.node, b.store, { inFlight: 1, timeoutMs: 10_000 });
    // 40 rounds of one exchange each: past libp2p's default of 32 outbound streams per protocol if any stayed open.
    for (let i = 0; i < 40; i++) {
      await one.ask(a.t.host, [cid]);
      await b.store.fs.delete(cid);
    }
    expect(one.stats.fetched).toBe(40);
  });
});
