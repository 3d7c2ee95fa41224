import * as tar from 'tar-stream';

/** A tar read whole, from its bytes or a stream of them (a response body, an export). */
async function* entriesOf(source: Uint8Array | AsyncIterable<Uint8Array>): AsyncGenerator<{ name: string; type: string | null | undefined; bytes: Buffer }> {
  let whole: Buffer;
  if (source instanceof Uint8Array) whole = Buffer.from(source);
  else {
    const parts: Buffer[] = [];
    for await (const c of source) parts.push(Buffer.from(c));
    whole = Buffer.concat(parts);
  }
  const extract = tar.extract();
  extract.end(whole);
  for await (const entry of extract) {
    const chunks: Buffer[] = [];
    for await (const c of entry) chunks.push(c as Buffer);
    yield { name: entry.header.name, type: entry.header.type, bytes: Buffer.concat(chunks) };
  }
}

/** Every entry by its name: a directory as 'dir', anything else as its bytes. */
export async function tarEntries(source: Uint8Array | AsyncIterable<Uint8Array>): Promise<Map<string, Buffer | 'dir'>> {
  const out = new Map<string, Buffer | 'dir'>();
  for await (const e of entriesOf(source)) out.set(e.name, e.type === 'directory' ? 'dir' : e.bytes);
  return out;
}

/** The regular files alone, by name. */
export async function tarFiles(source: Uint8Array | AsyncIterable<Uint8Array>): Promise<Map<string, Buffer>> {
  const out = new Map<string, Buffer>();
  for await (const e of entriesOf(source)) if (e.type === 'file') out.set(e.name, e.bytes);
  return out;
}

/** The regular files as text, by name: what a test compares with toEqual. */
export async function tarText(source: Uint8Array | AsyncIterable<Uint8Array>): Promise<Record<string, string>> {
  return Object.fromEntries([...(await tarFiles(source))].map(([name, bytes]) => [name, bytes.toString()]));
}
