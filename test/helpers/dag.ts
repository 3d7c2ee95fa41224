/**
 * DAGs a hostile node would make, block by block: a few blocks whose links repeat one block
 * stand for files of any size, or directories of any number of files. Put in a node's block
 * store beforehand (holdBlocks), they are what a fetch from that node would have left there.
 */
import { createHash, randomBytes } from 'node:crypto';
import { join } from 'node:path';
import * as dagPb from '@ipld/dag-pb';
import { UnixFS } from 'ipfs-unixfs';
import { CID } from 'multiformats/cid';
import * as raw from 'multiformats/codecs/raw';
import { create as digestOf } from 'multiformats/hashes/digest';
import { BlockStore } from '../../runtime/blocks/store.js';

/** A block: its CID and its bytes. */
export type Block = [CID, Uint8Array];

const SHA2_256 = 0x12;

export const block = (codec: number, bytes: Uint8Array): Block => [CID.createV1(codec, digestOf(SHA2_256, createHash('sha256').update(bytes).digest())), bytes];

/** A UnixFS file node whose `count` links all name `leaf` (of `leafSize` bytes). */
export function repeatingFile(leaf: CID, leafSize: number, count: number): Block {
  const data = new UnixFS({ type: 'file', blockSizes: Array.from({ length: count }, () => BigInt(leafSize)) });
  return block(dagPb.code, dagPb.encode(dagPb.prepare({ Data: data.marshal(), Links: Array.from({ length: count }, () => ({ Hash: leaf, Tsize: leafSize, Name: '' })) })));
}

/** A UnixFS directory of `count` entries (`<prefix>00000`, …), every one of them `to`. */
export function repeatingDir(to: CID, count: number, prefix: string): Block {
  const links = Array.from({ length: count }, (_, i) => ({ Hash: to, Tsize: 0, Name: `${prefix}${String(i).padStart(5, '0')}` }));
  return block(dagPb.code, dagPb.encode(dagPb.prepare({ Data: new UnixFS({ type: 'directory' }).marshal(), Links: links })));
}

/** A file of 256 GiB in three blocks: a 64 KiB leaf, a node of 2,048 links to it, a root of 2,048 links to that. */
export function fileOf256GiB(): { root: CID; blocks: Block[] } {
  const leaf = block(raw.code, randomBytes(64 * 1024));
  const middle = repeatingFile(leaf[0], leaf[1].length, 2048);
  const root = repeatingFile(middle[0], 2048 * leaf[1].length, 2048);
  return { root: root[0], blocks: [leaf, middle, root] };
}

/** The empty file, as a raw block. */
export const emptyFile = (): Block => block(raw.code, new Uint8Array(0));

/** Puts `blocks` in the block store of the node at `home`. */
export async function holdBlocks(home: string, blocks: readonly Block[]): Promise<void> {
  const store = new BlockStore(join(home, 'data', 'blocks'));
  await store.open();
  for (const [cid, bytes] of blocks) await store.fs.put(cid, bytes);
}
