/**
 * npm run bench:outputs — what moving a job's output costs, in one run (README "Job outputs"):
 *  (a) import + sign: a BENCH_OUTPUT_MIB (default 256) MiB file of random bytes imported into a
 *      block store (UnixFS, CIDv1, raw leaves) and a manifest of it signed, per GiB
 *  (b) transfer: the whole DAG fetched over /dms/blocks/1.0.0 between two libp2p hosts (each
 *      block checked and stored), in MB/s, against
 *  (c) a raw libp2p stream carrying the same bytes one way in 256 KiB frames (target: b ≥ 0.8 × c)
 *  (d) `cp` of the same file on the same disk
 * and the RSS of this process while (b) runs, above what it was idle before (target < 100 MB).
 * Both hosts run in this one process, so (b) and (c) pay both ends' CPU alike. (b) and (c)
 * alternate over BENCH_OUTPUT_ROUNDS rounds (default 3; each fetch into an empty store) and the
 * ratio is the median of each round's: on a shared machine one pair moves by tens of percent.
 * The CPU time (user + system, all threads) each took is printed beside, which load moves less.
 * (b') once more with the leaves checked but not written: what storing the blocks costs.
 */
import '../runtime/polyfills.js';
import { execFileSync } from 'node:child_process';
import { createReadStream, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type { CID } from 'multiformats/cid';
import { RAW_CODEC } from '../runtime/blocks/cid.js';
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
const ROUNDS = Number(process.env.BENCH_OUTPUT_ROUNDS ?? 3);
const FRAME = 256 * 1024;
const SINK_PROTOCOL = '/dms-bench/sink/1.0.0';

const mbps = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);
const rssMb = () => process.memoryUsage().rss / 1e6;
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];

/** Wall and CPU (user + system, every thread of the process) milliseconds `f` took. */
async function timed(f: () => Promise<void>): Promise<{ ms: number; cpuMs: number }> {
  const cpu = process.cpuUsage();
  const t = performance.now();
  await f();
  const d = process.cpuUsage(cpu);
  return { ms: performance.now() - t, cpuMs: (d.user + d.system) / 1000 };
}

/** A store that checks each leaf and keeps only the DAG's nodes: the fetch without the disk. */
class UnwrittenLeaves extends BlockStore {
  override async putVerifiedChunks(cid: CID, chunks: readonly Uint8Array[]): Promise<boolean> {
    if (cid.code !== RAW_CODEC) return super.putVerifiedChunks(cid, chunks);
    const hash = createHash('sha256');
    for (const c of chunks) hash.update(c);
    return Buffer.from(cid.multihash.digest).equals(hash.digest());
  }
}

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
    await storeA.open();
    const exA = new BlockExchange(a.node, storeA);
    await exA.start();
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
    const frame = randomBytes(FRAME);
    const raw = async () => {
      received = 0;
      const sunk = new Promise<void>((r) => (sinkDone = r));
      const out = await a.node.dialProtocol(b.node.peerId, SINK_PROTOCOL);
      for (let sent = 0; sent < size; sent += FRAME) if (!out.send(frame)) await out.onDrain();
      await sunk;
      await out.close();
    };

    // (b) the block protocol into an empty store each round, RSS sampled while it runs.
    let fetched = 0;
    let idle = 0;
    let peak = 0;
    const fetch = async (round: number, Store = BlockStore) => {
      const storeB = new Store(join(dir, `b${round}`));
      await storeB.open();
      const exB = new BlockExchange(b.node, storeB);
      global.gc?.();
      idle = Math.max(idle, rssMb());
      const sampler = setInterval(() => (peak = Math.max(peak, rssMb() - idle)), 20);
      try {
        await exB.fetchDag(cid, [a.host]);
      } finally {
        clearInterval(sampler);
      }
      fetched = exB.stats.fetched;
      rmSync(join(dir, `b${round}`), { recursive: true, force: true });
    };
    const rounds: { raw: { ms: number; cpuMs: number }; fetch: { ms: number; cpuMs: number } }[] = [];
    for (let i = 0; i < ROUNDS; i++) rounds.push({ raw: await timed(raw), fetch: await timed(() => fetch(i)) });
    const rawMs = median(rounds.map((r) => r.raw.ms));
    const fetchMs = median(rounds.map((r) => r.fetch.ms));
    const ratio = median(rounds.map((r) => r.raw.ms / r.fetch.ms));
    const unwritten = await timed(() => fetch(ROUNDS, UnwrittenLeaves));
    const rawAfter = await timed(raw);

    // (d) cp on the same disk
    t = performance.now();
    execFileSync('cp', [file, join(dir, 'copy.bin')]);
    const cpMs = performance.now() - t;

    const rows = [
      ['import + sign', `${(importMs / (size / (1024 * MIB)) / 1000).toFixed(2)} s/GiB`, `${mbps(size, importMs).toFixed(0)} MB/s`],
      ['fetch over /dms/blocks/1.0.0', `${mbps(size, fetchMs).toFixed(0)} MB/s`, `${fetched} blocks; median of ${ROUNDS} rounds`],
      ['raw libp2p stream', `${mbps(size, rawMs).toFixed(0)} MB/s`, `fetch/raw = ${ratio.toFixed(2)} (target ≥ 0.8), median of ${rounds.map((r) => (r.raw.ms / r.fetch.ms).toFixed(2)).join(', ')}`],
      ['CPU per round (all threads)', `raw ${median(rounds.map((r) => r.raw.cpuMs)).toFixed(0)} ms`, `fetch ${median(rounds.map((r) => r.fetch.cpuMs)).toFixed(0)} ms (medians)`],
      ["fetch, leaves checked, not written", `${mbps(size, unwritten.ms).toFixed(0)} MB/s`, `/ raw after it ${(rawAfter.ms / unwritten.ms).toFixed(2)}; CPU ${unwritten.cpuMs.toFixed(0)} ms against raw ${rawAfter.cpuMs.toFixed(0)} ms`],
      ['cp, same disk', `${mbps(size, cpMs).toFixed(0)} MB/s`, ''],
      ['RSS during fetch', `+${peak.toFixed(0)} MB`, `idle ${idle.toFixed(0)} MB (target < +100 MB)`],
    ];
    process.stdout.write(`bench:outputs, ${SIZE_MIB} MiB\n`);
    for (const [what, figure, note] of rows) process.stdout.write(`  ${what.padEnd(30)} ${figure.padEnd(14)} ${note}\n`);
  } finally {
    await Promise.all([a.stop(), b.stop()]);
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
