/**
 * The CIDs this node stores and moves: CIDv1, sha2-256, and a codec of a UnixFS DAG (raw leaves
 * or dag-pb nodes). Anything else (another hash, another codec, CIDv0) is refused before a
 * block is asked for or served, so a hostile want-list cannot make the node hash or look up
 * what it does not keep.
 */
import { createHash } from 'node:crypto';
import { CID } from 'multiformats/cid';
import { invalid } from '../errors.js';

export const RAW_CODEC = 0x55;
export const DAG_PB_CODEC = 0x70;
const SHA2_256 = 0x12;

const shown = (s: string) => (s.length > 80 ? `${s.slice(0, 80)}…` : s);

/** Why `cid` is not one of ours, or null when it is. */
export function cidProblem(cid: CID): string | null {
  if (cid.version !== 1) return `CID version ${cid.version}: only CIDv1 is stored`;
  if (cid.multihash.code !== SHA2_256 || cid.multihash.size !== 32) return `hash 0x${cid.multihash.code.toString(16)}: only sha2-256 is stored`;
  if (cid.code !== RAW_CODEC && cid.code !== DAG_PB_CODEC) return `codec 0x${cid.code.toString(16)}: only raw and dag-pb (UnixFS) are stored`;
  return null;
}

/** A CID as text, checked: a 400 naming what is wrong otherwise. */
export function parseCid(text: string, what = 'cid'): CID {
  let cid: CID;
  try {
    cid = CID.parse(text);
  } catch {
    throw invalid(`${what}: '${shown(text)}' is not a CID`);
  }
  const problem = cidProblem(cid);
  if (problem) throw invalid(`${what}: ${cid.toString()}: ${problem}`);
  return cid;
}

/**
 * Whether `chunks`, one after another, are the block `cid` names: its sha2-256 digest,
 * recomputed over the pieces as they are (a block arrives in the pieces of the frames it came in).
 */
export function chunksMatch(cid: CID, chunks: readonly Uint8Array[]): boolean {
  if (cidProblem(cid)) return false;
  const hash = createHash('sha256');
  for (const c of chunks) hash.update(c);
  return Buffer.from(cid.multihash.digest).equals(hash.digest());
}

export { CID };
