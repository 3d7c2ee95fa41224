/**
 * A list page bounded in bytes as well as in count: items of a stored list may each be as large
 * as a request body (a job's spec, an ensemble's), so a page of a thousand of them could be a
 * reply of a gigabyte. Read in slices, the page stops where the bytes do.
 */

export interface BoundedPage {
  offset: number;
  /** Items at most; unbounded when left out. */
  limit?: number;
  /** Bytes of items at most (as `bytesOf` measures them); always one item at least. */
  maxBytes: number;
  /** Items read at a time: what one read holds beyond the page. */
  slice: number;
}

/** The page `read(offset, limit)` gives slice by slice, ended by `limit` or `maxBytes`. */
export async function readBoundedPage<T>(page: BoundedPage, read: (offset: number, limit: number) => Promise<T[]>, bytesOf: (item: T) => number): Promise<T[]> {
  const items: T[] = [];
  let bytes = 0;
  const limit = page.limit ?? Number.POSITIVE_INFINITY;
  for (let offset = page.offset; items.length < limit; offset += page.slice) {
    const slice = await read(offset, Math.min(page.slice, limit - items.length));
    for (const item of slice) {
      bytes += bytesOf(item);
      if (bytes > page.maxBytes && items.length > 0) return items;
      items.push(item);
    }
    if (slice.length < page.slice) break;
  }
  return items;
}
