/**
 * The node's content-addressed files (README "Job outputs"): its block store under
 * `<home>/data/blocks`, the block protocol over its libp2p when it has a network, and the
 * signed result manifests of its jobs under `<home>/data/manifests`.
 */
import { join } from 'node:path';
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
  /** Absent without a network: then only blocks held here can be read. */
  exchange?: BlockExchange;
  manifests: ManifestFiles;
  limits: Config['blocks'];
  stop(): Promise<void>;
}

export async function startBlocks(system: ActorSystem, config: Config, home: string, log: Logger, transport?: Libp2pTransport): Promise<NodeBlocks> {
  const data = homePaths(home).data;
  const store = new BlockStore(join(data, 'blocks'));
  await store.open();
  const exchange = transport ? new BlockExchange(transport.node, store, { inFlight: config.blocks.fetch_in_flight, log }) : undefined;
  await exchange?.start();
  if (exchange) {
    system.metrics?.gauge('dms_blocks', 'Blocks moved over /dms/blocks/1.0.0 since the node started: fetched (checked and stored), served, rejected (wrong or unasked)', ['direction'], (set) => {
      for (const [direction, n] of Object.entries(exchange.stats)) set({ direction }, n);
    });
  }
  return { store, exchange, manifests: new ManifestFiles(join(data, 'manifests')), limits: config.blocks, stop: async () => exchange?.stop() };
}
