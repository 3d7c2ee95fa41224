/**
 * npm run bench:outputs — what moving a job's output costs, in one run (README "Job outputs"):
 *  (a) import + sign: a BENCH_OUTPUT_MIB (default 256) MiB file of random bytes imported into a
 *      block store (UnixFS, CIDv1, raw leaves) and a manifest of it signed, per GiB
 *  (b) transfer: the whole DAG fetched over /dms/blocks/1.0.0 between two libp2p hosts (each
 *      block checked and stored), in MB/s, against
 *  (c) a raw libp2p stream carrying the same bytes one way in 256 KiB frames (target: b ≥ 0.8 × c)
 *  (d) `cp` of the same file on the same disk
 * and the RSS of this process while (b) runs, above what it was idle before (target < 100 MB).
 * Both hosts run in this one process, so (b) and (c) pay both ends' CPU alike.
 */
import '../runtime/polyfills.js';
import { execFileSync } from 'node:child_process';
import { createReadStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes, randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signManifest } from '../behaviors/jobs/manifest.js';
import { BlockStore } from '../runtime/blocks/store.js';
import { importFile } from '../runtime/blocks/unixfs.js';
import { KeyPair } from '../runtime/crypto/keys.js';
import { silentLogger } from '../runtime/log.js';
import { BlockExchange } from '../runtime/network/blocks.js';
import { Libp2pTransport } from '../runtime/network/libp2p-transport.js';

const MIB = 1024 * 1024;
const SIZE_MIB = Number(process.env.BENCH_OUTPUT_MIB ?? 256);
const FRAME = 256 * 1024;
const SINK_PROTOCOL = '/dms-bench/sink/1.0.0';

const mbps = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);
const rssMb = () => process.memoryUsage().rss / 1e6;

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'dms-bench-outputs-'));
  const size = SIZE_MIB * MIB;
  const file = join(dir, 'output.bin');
  // Written in pieces: the bench's own buffers must not be what its RSS measures.
  writeFileSync(file, '');
  for (let i = 0; i < SIZE_MIB; i++) writeFileSync(file, randomBytes(MIB), { flag: 'a' });

  const a = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
  const b = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
  const key = KeyPair.generate();
  try {
    const storeA = new BlockStore(join(dir, 'a'));
    const storeB = new BlockStore(join(dir, 'b'));
    await Promise.all([storeA.open(), storeB.open()]);
    const exA = new BlockExchange(a.node, storeA);
    const exB = new BlockExchange(b.node, storeB);
    await Promise.all([exA.start(), exB.start()]);
    await b.node.dial(a.node.getMultiaddrs());

    // (a) import + sign
    let t = performance.now();
    const { cid } = await importFile(createReadStream(file), storeA.fs, { maxBytes: size });
    await signManifest(
      { job: randomUUID(), node: key.peerId, requester: null, exit_code: 0, ended_at: new Date().toISOString(), outputs: [{ name: 'out', path: '/out', cid: cid.toString(), size }], logs: null },
      key,
    );
    const importMs = performance.now() - t;

    // (c) raw stream floor: the same bytes one way, in frames of a block's size.
    let received = 0;
    let sinkDone: () => void = () => undefined;
    await b.node.handle(SINK_PROTOCOL, async (stream) => {
      for await (const chunk of stream) {
        received += chunk.byteLength;
        if (received >= size) sinkDone();
      }
    });
    const sunk = new Promise<void>((r) => (sinkDone = r));
    const out = await a.node.dialProtocol(b.node.peerId, SINK_PROTOCOL);
    const frame = randomBytes(FRAME);
    t = performance.now();
    for (let sent = 0; sent < size; sent += FRAME) if (!out.send(frame)) await out.onDrain();
    await sunk;
    const rawMs = performance.now() - t;
    await out.close();

    // (b) the block protocol, RSS sampled while it runs.
    global.gc?.();
    const idle = rssMb();
    let peak = idle;
    const sampler = setInterval(() => (peak = Math.max(peak, rssMb())), 20);
    t = performance.now();
    await exB.fetchDag(cid, [a.host]);
    const fetchMs = performance.now() - t;
    clearInterval(sampler);

    // (d) cp on the same disk
    t = performance.now();
    execFileSync('cp', [file, join(dir, 'copy.bin')]);
    const cpMs = performance.now() - t;

    const rows = [
      ['import + sign', `${(importMs / (size / (1024 * MIB)) / 1000).toFixed(2)} s/GiB`, `${mbps(size, importMs).toFixed(0)} MB/s`],
      ['fetch over /dms/blocks/1.0.0', `${mbps(size, fetchMs).toFixed(0)} MB/s`, `${exB.stats.fetched} blocks`],
      ['raw libp2p stream', `${mbps(size, rawMs).toFixed(0)} MB/s`, `fetch/raw = ${(rawMs / fetchMs).toFixed(2)} (target ≥ 0.8)`],
      ['cp, same disk', `${mbps(size, cpMs).toFixed(0)} MB/s`, ''],
      ['RSS during fetch', `+${(peak - idle).toFixed(0)} MB`, `idle ${idle.toFixed(0)} MB (target < +100 MB)`],
    ];
    process.stdout.write(`bench:outputs, ${SIZE_MIB} MiB\n`);
    for (const [what, figure, note] of rows) process.stdout.write(`  ${what.padEnd(30)} ${figure.padEnd(14)} ${note}\n`);
  } finally {
    await Promise.all([a.stop(), b.stop()]);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
