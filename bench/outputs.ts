/**
 * npm run bench:outputs — what moving a job's output costs, in one run (README "Job outputs"):
 *  (a) import + sign: a BENCH_OUTPUT_MIB (default 256) MiB file of random bytes imported into a
 *      block store (UnixFS, CIDv1, raw leaves) and a manifest of it signed, per GiB
 *  (b) transfer: the whole DAG fetched over /dms/blocks/1.0.0 between two libp2p hosts (each
 *      block checked and stored), in MB/s, against
 *  (c) a raw libp2p stream carrying as many bytes one way in 256 KiB frames: one buffer sent again
 *      and again, read from no file (target: b ≥ 0.8 × c)
 *  (d) `cp` of the same file on the same disk
 * and the RSS of both sides while (b) runs, above what each was idle before (target < 100 MB).
 * The two hosts are two processes, as two nodes are: the holder (the provider, which imported
 * the output and serves it) in a child, the fetcher (the requester) in this one; each pays its
 * own side's CPU on its own event loop, in (b) and (c) alike. (b) and (c) alternate over
 * BENCH_OUTPUT_ROUNDS rounds (default 3; each fetch into an empty store) and the ratio is the
 * median of each round's: on a shared machine one pair moves by tens of percent. The CPU time
 * (user + system, all threads) each side took is printed beside, which load moves less.
 * (b') once more with the leaves checked but not written: what storing the blocks costs.
 */
import '../runtime/polyfills.js';
import { execFileSync, spawn } from 'node:child_process';
import { createReadStream, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { randomBytes, randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { peerIdFromString } from '@libp2p/peer-id';
import { multiaddr } from '@multiformats/multiaddr';
import { CID } from 'multiformats/cid';
import { chunksMatch, RAW_CODEC } from '../runtime/blocks/cid.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signManifest } from '../behaviors/jobs/manifest.js';
import { BlockStore } from '../runtime/blocks/store.js';
import { importFile } from '../runtime/blocks/unixfs.js';
import { KeyPair } from '../runtime/crypto/keys.js';
import { silentLogger } from '../runtime/log.js';
import { BlockExchange } from '../runtime/network/blocks.js';
import { Libp2pTransport } from '../runtime/network/libp2p-transport.js';
import { raiseMallocThresholds } from '../runtime/malloc-thresholds.js';
import { cpuSeconds } from './lib/load.js';

const MIB = 1024 * 1024;
const SIZE_MIB = Number(process.env.BENCH_OUTPUT_MIB ?? 256);
const SIZE = SIZE_MIB * MIB;
const ROUNDS = Number(process.env.BENCH_OUTPUT_ROUNDS ?? 3);
const FRAME = 256 * 1024;
const SOURCE_PROTOCOL = '/dms-bench/source/1.0.0';

const mbps = (bytes: number, ms: number) => bytes / 1e6 / (ms / 1000);
const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
const PAGE = 4096;
/** Resident MB of process `pid` (Linux's /proc): read, not asked, so sampling costs the sampled side nothing. */
const rssMb = (pid: number) => (Number(readFileSync(`/proc/${pid}/statm`, 'utf8').split(' ')[1]) * PAGE) / 1e6;
/** CPU milliseconds process `pid` (every thread) has run so far (the scheduler's ns account). */
const cpuMs = (pid: number): number => cpuSeconds(pid) * 1000;

interface Timed {
  ms: number;
  /** CPU milliseconds of the fetcher (this process) and of the holder. */
  cpu: { fetcher: number; holder: number };
}

/** A store that checks each leaf and keeps only the DAG's nodes: the fetch without the disk. */
class UnwrittenLeaves extends BlockStore {
  override async putVerifiedChunks(cid: CID, chunks: readonly Uint8Array[]): Promise<boolean> {
    if (cid.code !== RAW_CODEC) return super.putVerifiedChunks(cid, chunks);
    return chunksMatch(cid, chunks);
  }
}

interface HolderReady {
  addrs: string[];
  peer: string;
  cid: string;
  importMs: number;
}

/**
 * The provider's side, in a process of its own: imports the file into its block store, signs a
 * manifest of it, serves the blocks, and serves SOURCE_PROTOCOL (the file's size in FRAME-sized
 * frames down each stream opened to it). Prints what the fetcher needs, then runs until its
 * stdin closes.
 */
async function holder(dir: string): Promise<void> {
  raiseMallocThresholds(); // as a node does once it serves
  const a = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
  const store = new BlockStore(join(dir, 'a'));
  await store.open();
  const exchange = new BlockExchange(a.node, store);
  await exchange.start();
  const key = KeyPair.generate();
  const t = performance.now();
  const { cid } = await importFile(createReadStream(join(dir, 'output.bin')), store.fs, { maxBytes: SIZE });
  await signManifest(
    { job: randomUUID(), node: key.peerId, requester: null, exit_code: 0, ended_at: new Date().toISOString(), outputs: [{ name: 'out', path: '/out', cid: cid.toString(), size: SIZE }], logs: null },
    key,
  );
  const importMs = performance.now() - t;
  const frame = randomBytes(FRAME);
  await a.node.handle(SOURCE_PROTOCOL, async (stream) => {
    for (let sent = 0; sent < SIZE; sent += FRAME) if (!stream.send(frame)) await stream.onDrain();
    await stream.close();
  });
  const ready: HolderReady = { addrs: a.node.getMultiaddrs().map(String), peer: a.host, cid: cid.toString(), importMs };
  process.stdout.write(JSON.stringify(ready) + '\n');
  process.stdin.resume();
  await new Promise((r) => process.stdin.once('end', r));
  // A read that went to the disk sends the reads after it through the thread pool for a while (runtime/blocks/block-reads.ts): a fetch read from memory should show none.
  process.stderr.write(`holder's block reads: ${store.reads.counts.direct} on the event loop, ${store.reads.counts.pooled} through the thread pool\n`);
  await a.stop();
}

async function main(): Promise<void> {
  // Both sides keep freed heap as a serving node does (runtime/malloc-thresholds.ts).
  raiseMallocThresholds();
  const dir = mkdtempSync(join(tmpdir(), 'dms-bench-outputs-'));
  const file = join(dir, 'output.bin');
  // Written in pieces: the bench's own buffers must not be what its RSS measures.
  writeFileSync(file, '');
  for (let i = 0; i < SIZE_MIB; i++) writeFileSync(file, randomBytes(MIB), { flag: 'a' });

  // `node --cpu-prof --import tsx bench/outputs.ts` profiles both sides: the child takes the flags.
  const child = spawn(process.execPath, [...process.execArgv.filter((f) => f.startsWith('--cpu-prof')), '--import', 'tsx', fileURLToPath(import.meta.url), 'holder', dir], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const holderPid = child.pid!;
  const b = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
  try {
    const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`the holder exited with code ${code}`))));
    exited.catch(() => undefined);
    const line = await Promise.race([createInterface({ input: child.stdout! })[Symbol.asyncIterator]().next(), exited]);
    const ready = JSON.parse(line.value as string) as HolderReady;
    const cid = CID.parse(ready.cid);
    const holderPeer = peerIdFromString(ready.peer);
    await b.node.dial(ready.addrs.map((m) => multiaddr(m)));

    const timed = async (f: () => Promise<unknown>): Promise<Timed> => {
      const [fetcher, held] = [cpuMs(process.pid), cpuMs(holderPid)];
      const t0 = performance.now();
      await f();
      return { ms: performance.now() - t0, cpu: { fetcher: cpuMs(process.pid) - fetcher, holder: cpuMs(holderPid) - held } };
    };

    // (c) raw stream floor: as many bytes one way, holder to fetcher, in frames of a block's size.
    const raw = async () => {
      const stream = await b.node.dialProtocol(holderPeer, SOURCE_PROTOCOL);
      let received = 0;
      for await (const chunk of stream) received += chunk.byteLength;
      if (received !== SIZE) throw new Error(`the raw stream carried ${received} bytes, not ${SIZE}`);
      await stream.close();
    };

    // (b) the block protocol into an empty store each round, both sides' RSS sampled while it
    // runs. Only the fetch is timed: the store is opened before and removed after.
    let fetched = 0;
    const idle = { fetcher: 0, holder: 0 };
    const peak = { fetcher: 0, holder: 0 };
    const fetchInto = async (round: number, Store = BlockStore): Promise<Timed> => {
      const store = new Store(join(dir, `b${round}`));
      await store.open();
      const exchange = new BlockExchange(b.node, store);
      global.gc?.();
      idle.fetcher = Math.max(idle.fetcher, rssMb(process.pid));
      idle.holder = Math.max(idle.holder, rssMb(holderPid));
      const sampler = setInterval(() => {
        peak.fetcher = Math.max(peak.fetcher, rssMb(process.pid) - idle.fetcher);
        peak.holder = Math.max(peak.holder, rssMb(holderPid) - idle.holder);
      }, 20);
      try {
        const took = await timed(() => exchange.fetchDag(cid, [ready.peer]));
        fetched = exchange.stats.fetched;
        return took;
      } finally {
        clearInterval(sampler);
        rmSync(join(dir, `b${round}`), { recursive: true, force: true });
      }
    };
    const rounds: { raw: Timed; fetch: Timed }[] = [];
    for (let i = 0; i < ROUNDS; i++) rounds.push({ raw: await timed(raw), fetch: await fetchInto(i) });
    const rawMs = median(rounds.map((r) => r.raw.ms));
    const fetchMs = median(rounds.map((r) => r.fetch.ms));
    const ratio = median(rounds.map((r) => r.raw.ms / r.fetch.ms));
    const unwritten = await fetchInto(ROUNDS, UnwrittenLeaves);
    const rawAfter = await timed(raw);

    // (d) cp on the same disk
    const t = performance.now();
    execFileSync('cp', [file, join(dir, 'copy.bin')]);
    const cpMs = performance.now() - t;

    const cpu = (pick: (r: { raw: Timed; fetch: Timed }) => Timed) =>
      `${median(rounds.map((r) => pick(r).cpu.holder)).toFixed(0)} + ${median(rounds.map((r) => pick(r).cpu.fetcher)).toFixed(0)} ms`;
    const rows = [
      ['import + sign', `${(ready.importMs / (SIZE / (1024 * MIB)) / 1000).toFixed(2)} s/GiB`, `${mbps(SIZE, ready.importMs).toFixed(0)} MB/s`],
      ['fetch over /dms/blocks/1.0.0', `${mbps(SIZE, fetchMs).toFixed(0)} MB/s`, `${fetched} blocks; median of ${ROUNDS} rounds`],
      ['raw libp2p stream', `${mbps(SIZE, rawMs).toFixed(0)} MB/s`, `fetch/raw = ${ratio.toFixed(2)} (target ≥ 0.8), median of ${rounds.map((r) => (r.raw.ms / r.fetch.ms).toFixed(2)).join(', ')}`],
      ['CPU per round, holder + fetcher', `raw ${cpu((r) => r.raw)}`, `fetch ${cpu((r) => r.fetch)} (medians; user + system, all threads)`],
      [
        'fetch, leaves checked, not written',
        `${mbps(SIZE, unwritten.ms).toFixed(0)} MB/s`,
        `/ raw after it ${(rawAfter.ms / unwritten.ms).toFixed(2)}; CPU ${unwritten.cpu.holder.toFixed(0)} + ${unwritten.cpu.fetcher.toFixed(0)} ms against raw ${rawAfter.cpu.holder.toFixed(0)} + ${rawAfter.cpu.fetcher.toFixed(0)} ms`,
      ],
      ['cp, same disk', `${mbps(SIZE, cpMs).toFixed(0)} MB/s`, ''],
      ['RSS during fetch, fetcher', `+${peak.fetcher.toFixed(0)} MB`, `idle ${idle.fetcher.toFixed(0)} MB (target < +100 MB)`],
      ['RSS during fetch, holder', `+${peak.holder.toFixed(0)} MB`, `idle ${idle.holder.toFixed(0)} MB (target < +100 MB)`],
    ];
    process.stdout.write(`bench:outputs, ${SIZE_MIB} MiB, holder and fetcher in two processes\n`);
    for (const [what, figure, note] of rows) process.stdout.write(`  ${what!.padEnd(34)} ${figure!.padEnd(16)} ${note}\n`);
  } finally {
    child.stdin!.end();
    await b.stop();
    await new Promise((r) => (child.exitCode !== null ? r(undefined) : child.once('exit', r)));
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[2] === 'holder') await holder(process.argv[3]!);
else await main();
