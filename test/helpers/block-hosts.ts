/**
 * libp2p hosts on 127.0.0.1 that move blocks (`/dms/blocks/1.0.0`), each with a block store in a
 * temporary directory: honest ones (a BlockExchange) and hostile ones that answer a want-list as
 * the test says. `stop()` ends them all and removes their directories.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Stream } from '@libp2p/interface';
import { CID } from 'multiformats/cid';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { silentLogger } from '../../runtime/log.js';
import { Libp2pTransport } from '../../runtime/network/libp2p-transport.js';
import { BLOCKS_PROTOCOL, BlockExchange, type BlockExchangeOptions } from '../../runtime/network/blocks.js';
import { BlockStore } from '../../runtime/blocks/store.js';

export interface BlockSide {
  t: Libp2pTransport;
  store: BlockStore;
  ex: BlockExchange;
}

export class BlockHosts {
  private readonly transports: Libp2pTransport[] = [];
  private readonly dirs: string[] = [];

  /** A bare host: no block protocol of its own. */
  async host(): Promise<Libp2pTransport> {
    const t = await Libp2pTransport.create({ keyPair: KeyPair.generate(), listen: ['/ip4/127.0.0.1/tcp/0'], log: silentLogger() });
    this.transports.push(t);
    return t;
  }

  /** A block store in a directory of its own. */
  async store(): Promise<BlockStore> {
    const d = mkdtempSync(join(tmpdir(), 'dms-bx-'));
    this.dirs.push(d);
    const store = new BlockStore(join(d, 'blocks'));
    await store.open();
    return store;
  }

  /** An honest node: serves its store and fetches into it. */
  async side(opts: BlockExchangeOptions = { inFlight: 16, timeoutMs: 10_000 }): Promise<BlockSide> {
    const t = await this.host();
    const store = await this.store();
    const ex = new BlockExchange(t.node, store, opts);
    await ex.start();
    return { t, store, ex };
  }

  /** A hostile holder: reads the want-list, then answers with what `answer` makes of it. */
  async hostile(answer: (want: CID[], stream: Stream) => Promise<void>): Promise<Libp2pTransport> {
    const t = await this.host();
    await t.node.handle(BLOCKS_PROTOCOL, async (stream) => {
      for await (const chunk of stream) {
        const bytes = Buffer.from(chunk.subarray());
        const text = bytes.subarray(bytes.indexOf(0x7b)).toString('utf8');
        const want = (JSON.parse(text) as { want: string[] }).want.map((c) => CID.parse(c));
        await answer(want, stream);
        await stream.close().catch(() => undefined);
        return;
      }
    });
    return t;
  }

  async stop(): Promise<void> {
    await Promise.all(this.transports.map((t) => t.stop()));
    this.dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
  }
}
