/**
 * Files between this machine and a node (README "Job outputs"): a path uploaded as content
 * (a file as itself, a directory as a tar) and a job's outputs written out and checked.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { lstat, mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { type IncomingMessage, request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { dirname, join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { Blockstore } from 'interface-blockstore';
import type { CID } from 'multiformats/cid';
import * as tar from 'tar-stream';
import { ClientError } from '../client/errors.js';
import { networkReason, notJson, refusalOf, type RestClient, unreachable } from '../client/rest.js';
import { entryPath, importPath } from '../runtime/blocks/unixfs.js';
import { CliError } from './context.js';
import { readBoundedInput } from './read-text.js';
import { errorText } from '../runtime/errors.js';
import { makeDirsAsync } from '../runtime/files.js';

export interface Uploaded {
  cid: string;
  size: number;
  kind: 'file' | 'directory';
}

/**
 * A directory as a tar stream, entries in name order; a link or anything but a file or directory
 * is refused. `failure` is why the stream ended early, if it did: the request it fed then only
 * breaks off, which would read as a node that cannot be reached.
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
        // A tar entry declares its size first: a file that claims none is read first, as it may hold some.
        if (st.size === 0) pack.entry({ name: path, mode: 0o644 }, readUnsized(abs));
        else await pipeline(createReadStream(abs), pack.entry({ name: path, size: st.size, mode: 0o644 }));
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

/**
 * Most bytes read of a file in a directory that claims to be empty. The files of /proc and /sys
 * say they are empty and hold a few lines; what holds more is no such file.
 */
const MAX_UNSIZED_BYTES = 16 * 1024 * 1024;

/** What a file that claims to be empty holds (at most MAX_UNSIZED_BYTES). */
const readUnsized = (path: string): Buffer =>
  readBoundedInput(path, MAX_UNSIZED_BYTES, () => `${path}: it claims to be empty and holds more than ${MAX_UNSIZED_BYTES} bytes; upload it on its own`);

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
  // A file's size is declared, so the node can refuse one its storage share cannot hold before
  // any of it is sent; exactly that many bytes are sent, whatever the file does meanwhile. A
  // file that claims to be empty may not be (those of /proc and /sys): it is sent as read, to
  // its end, its size undeclared, and the node's share bounds it.
  let length: number | undefined;
  if (st.isFile()) {
    let failed: unknown;
    const size = st.size;
    if (size > 0) length = size;
    body = Readable.from(
      (async function* () {
        let read = 0;
        try {
          for await (const chunk of createReadStream(path, size > 0 ? { end: size - 1 } : {}) as AsyncIterable<Buffer>) {
            read += chunk.length;
            yield chunk;
          }
        } catch (e) {
          throw (failed = e);
        }
        if (read < size) throw (failed = new Error(`it shrank while it was sent (${read} of ${size} bytes read)`));
      })(),
      { objectMode: false },
    );
    failure = () => failed && new CliError(`${path}: ${(failed as Error).message}`);
  } else ({ stream: body, failure } = tarOf(path));
  try {
    return (await postStream(rest, '/api/v1/blobs', body, st.isFile() ? 'application/octet-stream' : 'application/x-tar', length)) as Uploaded;
  } catch (e) {
    // Our own reading failed (a link in the directory, a file that went), and the request only
    // broke off: say why, not that the node cannot be reached. A node's answer (413) stands.
    if (e instanceof ClientError && (e.kind === 'unreachable' || e.kind === 'protocol')) throw failure() ?? e;
    throw e;
  }
}

/** How long an upload waits for the node's `100 Continue` before it sends the body anyway (curl waits 1 s). */
const CONTINUE_WAIT_MS = 1_000;
/** `{cid, size}` or an error sentence: an answer past this is not the node's. */
const MAX_ANSWER_CHARS = 1 << 20;

/**
 * POSTs `body` to the node as it is read, and parses the node's JSON answer. Through node:http,
 * not fetch: Node 20's fetch (undici 6.24) reads a streamed request body into memory as fast as
 * it can be read, whatever the socket takes (measured: all 268 MB of a 256 MiB upload held in
 * buffers at once, 2.0 s; through node:http 80 MB of RSS in all, 0.8 s), so a file larger than
 * the machine's memory could not be sent. Here the file is read only as the socket drains.
 */
async function postStream(rest: RestClient, path: string, body: Readable, contentType: string, length?: number): Promise<unknown> {
  const url = rest.url + path;
  const target = new URL(url);
  const send = target.protocol === 'https:' ? httpsRequest : httpRequest;
  const headers = { ...rest.headersFor('application/json', contentType), expect: '100-continue', ...(length !== undefined ? { 'content-length': String(length) } : {}) };
  const req = send(target, { method: 'POST', headers });
  let connected = false;
  // A socket the agent kept from an earlier upload (`dms run -i` sends each input) is connected already.
  req.once('socket', (socket) => (socket.connecting ? socket.once('connect', () => (connected = true)) : (connected = true)));
  const answer = new Promise<IncomingMessage>((resolve, reject) => {
    req.once('response', resolve);
    req.once('error', reject);
  });
  answer.catch(() => undefined);
  // The body goes once the node says go on (it does when it starts reading it), or after
  // CONTINUE_WAIT_MS when nothing comes (a proxy between that does not pass the question on),
  // and not at all when the node answers first: a refusal made on the headers (a declared size
  // the share cannot hold) then reaches the caller whole, where a body sent at once met the
  // connection the node closed after answering, and the reset could overtake the answer.
  req.flushHeaders();
  let wait: NodeJS.Timeout | undefined;
  const go = await Promise.race([
    new Promise<boolean>((resolve) => {
      req.once('continue', () => resolve(true));
      wait = setTimeout(() => resolve(true), CONTINUE_WAIT_MS);
    }),
    answer.then(
      () => false,
      () => false,
    ),
  ]);
  clearTimeout(wait);
  // A node that refuses while the body is being sent (past what is free) answers and closes
  // before the body is all sent: its answer is what the caller hears, not the broken write.
  const sent = go ? pipeline(body, req).catch(() => undefined) : Promise.resolve();
  let res: IncomingMessage;
  try {
    res = await answer;
  } catch (e) {
    body.destroy();
    const code = (e as NodeJS.ErrnoException).code;
    // The node closes the connection after refusing an upload it has not read to the end, and
    // its answer may be lost with the rest of what it sent: that is no unreachable node.
    if (connected && (code === 'ECONNRESET' || code === 'EPIPE')) {
      throw new ClientError({ kind: 'protocol', url, message: `the node at ${rest.url} closed the connection before it took the whole upload (${code}); it does so when it refuses one, larger than blocks.max_upload_bytes or than its storage share has free`, cause: e });
    }
    // node:http's error is the socket's own, where networkReason looks for fetch's `cause`.
    throw unreachable(rest.url, url, networkReason({ cause: e }), e);
  }
  let text = '';
  try {
    res.setEncoding('utf8');
    for await (const chunk of res) {
      text += chunk as string;
      if (text.length > MAX_ANSWER_CHARS) throw new Error(`an answer longer than ${MAX_ANSWER_CHARS} characters`);
    }
  } catch (e) {
    res.destroy();
    throw new ClientError({ kind: 'protocol', url, status: res.statusCode, message: `the node's answer to POST ${path} broke off: ${errorText(e)}`, cause: e });
  } finally {
    body.destroy();
    // Answered before the body was asked for: the request is never finished, its connection goes.
    if (!go) req.destroy();
  }
  await sent;
  const status = res.statusCode ?? 0;
  if (status < 200 || status > 299) throw refusalOf(status, res.statusMessage ?? '', text, url);
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw notJson('POST', path, url, status);
  }
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
