/**
 * What the block server holds for askers that do not read (README "Job outputs", Moving blocks):
 * blocks read from disk ahead of sending, and blocks sent into a stream whose reader takes
 * nothing, count against one bound for the whole node. Sixteen exchanges asking for 1 MiB blocks
 * and never reading held 9 MiB each before (8 read ahead and the one being sent), and any number
 * of connections could ask so; an honest fetch beside them still completes.
 */
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import type { Stream } from '@libp2p/interface';
import * as dagPb from '@ipld/dag-pb';
import * as raw from 'multiformats/codecs/raw';
import { UnixFS } from 'ipfs-unixfs';
import { BLOCKS_PROTOCOL } from '../../runtime/network/blocks.js';
import { encodeBytesFrame as frame } from '../../runtime/network/frames.js';
import { MAX_BLOCK_BYTES } from '../../runtime/blocks/store.js';
import { fileContent, rootEntry } from '../../runtime/blocks/unixfs.js';
import { block, type Block } from '../helpers/dag.js';
import { BlockHosts } from '../helpers/block-hosts.js';
import { waitFor, within } from '../helpers/network.js';

const hosts = new BlockHosts();
afterAll(() => hosts.stop());

const MiB = 1024 * 1024;

/** A UnixFS file whose leaves are `leaves`, in order. */
function fileOf(leaves: Block[]): Block {
  const data = new UnixFS({ type: 'file', blockSizes: leaves.map(([, b]) => BigInt(b.length)) });
  return block(dagPb.code, dagPb.encode(dagPb.prepare({ Data: data.marshal(), Links: leaves.map(([cid, b]) => ({ Hash: cid, Tsize: b.length, Name: '' })) })));
}

describe('the block server', () => {
  it('holds no more than its bound for askers that never read, and an honest fetch beside them completes', { timeout: 50_000 }, async () => {
    const BOUND = 8 * MiB;
    const server = await hosts.side({ inFlight: 16, timeoutMs: 30_000, serveBufferBytes: BOUND });
    // 40 blocks as large as a block may be: what a slow reader asks for.
    const large: Block[] = Array.from({ length: 40 }, () => block(raw.code, randomBytes(MAX_BLOCK_BYTES)));
    for (const [cid, bytes] of large) expect(await server.store.putVerified(cid, bytes)).toBe(true);
    const honestFile = fileOf(large.slice(0, 8));
    await server.store.putVerified(...honestFile);

    const before = process.memoryUsage().arrayBuffers;
    // Two peers, each with as many exchanges as a connection may open (8), each asking for all
    // 40 blocks and then reading nothing.
    const stalled: Stream[] = [];
    for (let p = 0; p < 2; p++) {
      const reader = await hosts.host();
      await reader.node.dial(server.t.node.getMultiaddrs());
      for (let s = 0; s < 8; s++) {
        const stream = await reader.node.dialProtocol(server.t.node.peerId, BLOCKS_PROTOCOL);
        stream.pause();
        stream.send(frame(Buffer.from(JSON.stringify({ want: large.map(([cid]) => cid.toString()) }))));
        stalled.push(stream);
      }
    }
    // Until the server has read all it will for them: nothing more is served for a while.
    let last = -1;
    let still = 0;
    await waitFor('the server to stop reading for the stalled askers', () => {
      const now = process.memoryUsage().arrayBuffers;
      still = Math.abs(now - last) < MiB / 2 ? still + 1 : 0;
      last = now;
      return still >= 4;
    }, { timeoutMs: 15_000, intervalMs: 250 });
    const grown = process.memoryUsage().arrayBuffers - before;
    // The bound, and what the stalled askers' own ends hold in this process (a stream window of 256 KiB each) with room to spare.
    expect(grown, `buffers grew by ${(grown / MiB).toFixed(1)} MiB for 16 askers that never read`).toBeLessThan(BOUND + 16 * MiB);
    expect(server.ex.serving.held).toBeLessThanOrEqual(BOUND);

    // An honest fetch of 8 of those blocks while the stalled askers still hold theirs.
    expect(stalled.every((s) => s.status === 'open')).toBe(true);
    const honest = await hosts.side({ inFlight: 16, timeoutMs: 30_000 });
    await honest.t.node.dial(server.t.node.getMultiaddrs());
    await within(15_000, 'an honest fetch from the server beside the stalled askers', honest.ex.fetchDag(honestFile[0], [server.t.host]));
    let read = 0;
    for await (const c of fileContent(await rootEntry(honestFile[0], honest.store.fs))) read += c.byteLength;
    expect(read).toBe(8 * MAX_BLOCK_BYTES);
    expect(server.ex.serving.peak).toBeLessThanOrEqual(BOUND);
    stalled.forEach((s) => s.abort(new Error('done')));
  });

  it('ends an exchange whose asker takes nothing for the stall time, and gives its room back', { timeout: 30_000 }, async () => {
    const server = await hosts.side({ inFlight: 16, timeoutMs: 60_000, stallMs: 1_000, serveBufferBytes: 8 * MiB });
    const large: Block[] = Array.from({ length: 12 }, () => block(raw.code, randomBytes(MAX_BLOCK_BYTES)));
    for (const [cid, bytes] of large) await server.store.putVerified(cid, bytes);
    const reader = await hosts.host();
    await reader.node.dial(server.t.node.getMultiaddrs());
    const stream = await reader.node.dialProtocol(server.t.node.peerId, BLOCKS_PROTOCOL);
    stream.pause();
    stream.send(frame(Buffer.from(JSON.stringify({ want: large.map(([cid]) => cid.toString()) }))));
    await waitFor('the server to hold blocks for the asker that reads nothing', () => server.ex.serving.held > 0, { timeoutMs: 10_000 });
    // Held until the exchange's timeout (60 s) before: with the room of 32 such askers, new peers waited as long.
    await waitFor('the stalled exchange to give its room back', () => server.ex.serving.held === 0, { timeoutMs: 8_000, intervalMs: 100 });
    stream.abort(new Error('done'));
  });
});
