/**
 * Files between this machine and a node (README "Job outputs"): a path uploaded as content
 * (a file as itself, a directory as a tar) and a job's outputs written out and checked.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { lstat, mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Blockstore } from 'interface-blockstore';
import type { CID } from 'multiformats/cid';
import * as tar from 'tar-stream';
import { ClientError } from '../client/errors.js';
import type { RestClient } from '../client/rest.js';
import { entryPath, importPath } from '../runtime/blocks/unixfs.js';
import { CliError } from './context.js';
import { makeDirsAsync } from '../runtime/files.js';

export interface Uploaded {
  cid: string;
  size: number;
  kind: 'file' | 'directory';
}

/**
 * A directory as a tar stream, entries in name order; a link or anything but a file or directory
 * is refused. `failure` is why the stream ended early, if it did: fetch reports a body that failed
 * as its own failure ("fetch failed"), which read as a node that cannot be reached.
 */
function tarOf(root: string): { stream: Readable; failure: () => unknown } {
  const pack = tar.pack();
  let failed: unknown;
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const name of (await readdir(dir)).sort()) {
      const abs = join(dir, name);
      const path = rel ? `${rel}/${name}` : name;
      const st = await lstat(abs);
      if (st.isDirectory()) {
        pack.entry({ name: path, type: 'directory', mode: 0o755 });
        await walk(abs, path);
      } else if (st.isFile()) {
        await pipeline(createReadStream(abs), pack.entry({ name: path, size: st.size, mode: 0o644 }));
      } else throw new CliError(`${abs}: only regular files and directories are uploaded (links are not)`);
    }
  };
  walk(root, '').then(
    () => pack.finalize(),
    (e: unknown) => {
      failed = e;
      pack.destroy(e as Error);
    },
  );
  return { stream: Readable.from(pack as unknown as AsyncIterable<Buffer>, { objectMode: false }), failure: () => failed };
}

/** Uploads `path` (POST /api/v1/blobs): a file as itself, a directory as a tar. */
export async function upload(rest: RestClient, path: string): Promise<Uploaded> {
  let st;
  try {
    st = await lstat(path);
  } catch {
    throw new CliError(`${path}: no such file or directory`);
  }
  if (!st.isFile() && !st.isDirectory()) throw new CliError(`${path}: only a regular file or a directory can be uploaded`);
  let failure: () => unknown;
  let body: Readable;
  if (st.isFile()) {
    let failed: unknown;
    body = createReadStream(path).on('error', (e) => (failed = e));
    failure = () => failed && new CliError(`${path}: ${(failed as Error).message}`);
  } else ({ stream: body, failure } = tarOf(path));
  let res: Response;
  try {
    res = await rest.response('POST', '/api/v1/blobs', {
      body: Readable.toWeb(body) as ReadableStream,
      contentType: st.isFile() ? 'application/octet-stream' : 'application/x-tar',
      accept: 'application/json',
    });
  } catch (e) {
    // Our own reading failed (a link in the directory, a file that went), and fetch said only
    // that it failed: say why, not that the node cannot be reached. A node's answer (413) stands.
    if (e instanceof ClientError && e.kind === 'unreachable') throw failure() ?? e;
    throw e;
  }
  return (await res.json()) as Uploaded;
}

/** A blockstore that keeps nothing: importing through it only computes the CID. */
const discard: Pick<Blockstore, 'put' | 'has'> = { put: async (cid: CID) => cid, has: async () => false };

/** The CID the files at `path` make, imported exactly as the node imports them. */
export async function cidOfPath(path: string): Promise<string> {
  return (await importPath(path, discard as Blockstore, { maxBytes: Number.MAX_SAFE_INTEGER })).cid.toString();
}

/**
 * Refuses an output folder that is something else (a file, a link to one): said once, before
 * any output is fetched, rather than as each output's path failing to be looked at.
 */
export async function checkOutputDir(dir: string): Promise<void> {
  let st;
  try {
    st = await stat(dir);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw new CliError(`${dir}: cannot look at it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  if (!st.isDirectory()) throw new CliError(`${dir} is not a folder: give --output-dir a folder, or a path where none is yet`);
}

/**
 * What is at `dest` already, against the output `cid` to be written there: nothing, the same
 * files, or something else (another file or folder, a link) that writing the output would
 * destroy. The names an output lands under come from its provider's manifest, which a hostile
 * provider signs as it likes: what the user keeps there is never replaced unasked.
 */
export async function existingOutput(dest: string, cid: string): Promise<'absent' | 'same' | 'other'> {
  let st;
  try {
    st = await lstat(dest);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
    throw new CliError(`${dest}: cannot look at what is there (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  if (!st.isFile() && !st.isDirectory()) return 'other';
  try {
    return (await cidOfPath(dest)) === cid ? 'same' : 'other';
  } catch {
    // A link or a special file inside it: not files an output is made of.
    return 'other';
  }
}

/**
 * Writes one output from its GET answer to `dest`: a tar is unpacked below it (each name
 * checked to stay there), a file written as it is. Written beside it first and moved into
 * place once whole and matching `cid`: a broken fetch never leaves files that look complete.
 * What is at `dest` by then is replaced with `replace` (the caller found the same files there,
 * or was told to replace them, with existingOutput); otherwise only what is still nothing or the
 * same files is, and the written files are removed rather than touch anything else.
 */
export async function writeOutput(res: Response, dest: string, cid: string, replace = false): Promise<void> {
  const partial = `${dest}.partial`;
  await rm(partial, { recursive: true, force: true });
  await makeDirsAsync(dirname(dest));
  const body = Readable.fromWeb(res.body as import('node:stream/web').ReadableStream);
  if ((res.headers.get('content-type') ?? '').startsWith('application/x-tar')) {
    await mkdir(partial);
    const extract = tar.extract();
    const fed = pipeline(body, extract as unknown as NodeJS.WritableStream);
    // Read below; an entry refused there ends the pipe too, which is no second failure.
    fed.catch(() => undefined);
    for await (const entry of extract) {
      const rel = entryPath(entry.header.name);
      const target = join(partial, rel);
      if (entry.header.type === 'directory') {
        await makeDirsAsync(target);
        entry.resume();
      } else if (entry.header.type === 'file') {
        await makeDirsAsync(dirname(target));
        await pipeline(entry, createWriteStream(target));
      } else throw new CliError(`the node sent a ${entry.header.type} entry (${rel}) in a job output`);
    }
    await fed;
  } else {
    await pipeline(body, createWriteStream(partial));
  }
  const got = await cidOfPath(partial);
  if (got !== cid) {
    await rm(partial, { recursive: true, force: true });
    throw new CliError(`the files written for ${dest} make CID ${got}, not ${cid} as the signed manifest says: nothing was kept`);
  }
  if (replace) await rm(dest, { recursive: true, force: true });
  else if ((await existingOutput(dest, cid)) === 'other') {
    await rm(partial, { recursive: true, force: true });
    throw new CliError(`${dest} appeared while the output was written, and is not this output: left as it is, nothing written`);
  } else await rm(dest, { recursive: true, force: true });
  await rename(partial, dest);
}
