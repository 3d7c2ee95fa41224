/**
 * The node's content-addressed files (README "Job outputs"): its block store under
 * `<home>/data/blocks`, the block protocol over its libp2p when it has a network, and the
 * signed result manifests of its jobs under `<home>/data/manifests`.
 */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { CID } from 'multiformats/cid';
import { openManifest } from '../behaviors/jobs/manifest.js';
import { parseCid } from '../runtime/blocks/cid.js';
import { Pins } from '../runtime/blocks/pins.js';
import { collectGarbage, type Collected } from '../runtime/blocks/retention.js';
import { errorText } from '../runtime/errors.js';
import { Volumes } from '../runtime/volumes.js';
import { ManifestFiles } from '../actors/outputs/manifest-files.js';
import { BlockStore } from '../runtime/blocks/store.js';
import type { Config } from '../runtime/config.js';
import { homePaths } from '../runtime/home.js';
import type { Logger } from '../runtime/log.js';
import { BlockExchange } from '../runtime/network/blocks.js';
import type { ActorSystem } from '../runtime/system.js';
import type { Libp2pTransport } from '../runtime/network/libp2p-transport.js';

export interface NodeBlocks {
  store: BlockStore;
  pins: Pins;
  /** Deletes what retention lets go now (also every GC_INTERVAL_MS while the bound is set). */
  collect(): Promise<Collected>;
  /** More CIDs retention keeps, asked at each collection: the inputs of jobs not yet ended (the job store's). */
  keepAlso(roots: () => Promise<CID[]>): void;
  /** Absent without a network: then only blocks held here can be read. */
  exchange?: BlockExchange;
  manifests: ManifestFiles;
  volumes: Volumes;
  limits: Config['blocks'];
  stop(): Promise<void>;
}

export async function startBlocks(system: ActorSystem, config: Config, home: string, log: Logger, transport?: Libp2pTransport): Promise<NodeBlocks> {
  const data = homePaths(home).data;
  const store = new BlockStore(join(data, 'blocks'));
  await store.open();
  system.metrics?.gauge('dms_block_reads', 'Block files read since the node started: on the event loop while the disk answered from memory, through the thread pool for 2 s after a read went to the disk (runtime/blocks/block-reads.ts)', ['via'], (set) => {
    set({ via: 'event_loop' }, store.reads.counts.direct);
    set({ via: 'pool' }, store.reads.counts.pooled);
  });
  const exchange = transport ? new BlockExchange(transport.node, store, { inFlight: config.blocks.fetch_in_flight, stallMs: config.blocks.exchange_stall_ms, serveBufferBytes: config.blocks.serve_buffer_bytes, log }) : undefined;
  await exchange?.start();
  if (exchange) {
    system.metrics?.gauge('dms_blocks', 'Blocks moved over /dms/blocks/1.0.0 since the node started: fetched (checked and stored), served, rejected (wrong or unasked); found: holders the DHT named', ['direction'], (set) => {
      for (const [direction, n] of Object.entries(exchange.stats)) set({ direction }, n);
    });
  }
  const manifests = new ManifestFiles(join(data, 'manifests'));
  const pins = new Pins(join(data, 'pins.json'));
  let more: () => Promise<CID[]> = async () => [];
  const collect = async () =>
    collectGarbage(store, config.blocks.max_blocks_bytes || Number.MAX_SAFE_INTEGER, [...pins.cids(), ...(await recentResults(manifests.dir, config.blocks.result_ttl_s)), ...(await more())]);
  let timer: NodeJS.Timeout | undefined;
  if (config.blocks.max_blocks_bytes > 0) {
    timer = setInterval(() => void collect().then(
      (c) => c.deleted > 0 && log.info(c, 'blocks collected'),
      (e: unknown) => log.warn({ err: errorText(e) }, 'block collection failed'),
    ), GC_INTERVAL_MS);
    timer.unref();
  }
  return {
    store,
    exchange,
    manifests,
    volumes: new Volumes(join(data, 'volumes')),
    pins,
    collect,
    keepAlso: (roots) => {
      more = roots;
    },
    limits: config.blocks,
    stop: async () => {
      clearInterval(timer);
      await exchange?.stop();
    },
  };
}

/** How often retention runs while `blocks.max_blocks_bytes` is set. */
const GC_INTERVAL_MS = 60_000;

/** The CIDs result manifests younger than `ttlS` name: their outputs and logs. */
async function recentResults(dir: string, ttlS: number): Promise<CID[]> {
  const out: CID[] = [];
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return out;
  }
  const since = Date.now() - ttlS * 1000;
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    try {
      if ((await stat(join(dir, name))).mtimeMs < since) continue;
      const file = JSON.parse(await readFile(join(dir, name), 'utf8')) as { manifest: string };
      const m = openManifest(file.manifest);
      for (const c of [...m.outputs.map((o) => o.cid), m.logs?.cid]) if (c) out.push(parseCid(c));
    } catch {
      // Not a manifest: nothing of it is kept.
    }
  }
  return out;
}
