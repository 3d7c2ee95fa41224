/** CIDs the operator pinned (`dms pin`): their DAGs are never collected. One JSON file, written whole. */
import { readFileSync } from 'node:fs';
import { DmsError } from '../errors.js';
import { writeJsonAtomic } from '../files.js';
import { parseCid } from './cid.js';
import type { CID } from 'multiformats/cid';

export const MAX_PINS = 10_000;

export class Pins {
  private readonly set: Set<string>;

  constructor(private readonly path: string) {
    let list: unknown = [];
    try {
      list = JSON.parse(readFileSync(path, 'utf8'));
    } catch {
      // None yet, or unreadable: none.
    }
    this.set = new Set(Array.isArray(list) ? list.filter((c): c is string => typeof c === 'string') : []);
  }

  list(): string[] {
    return [...this.set].sort();
  }

  cids(): CID[] {
    return this.list().map((c) => parseCid(c));
  }

  add(text: string): string {
    const cid = parseCid(text).toString();
    if (!this.set.has(cid) && this.set.size >= MAX_PINS) throw new DmsError('too_large', `at most ${MAX_PINS} pins`);
    this.set.add(cid);
    writeJsonAtomic(this.path, this.list());
    return cid;
  }

  remove(text: string): boolean {
    const cid = parseCid(text).toString();
    const had = this.set.delete(cid);
    if (had) writeJsonAtomic(this.path, this.list());
    return had;
  }
}
