import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, CLI, cleanEnv, cleanupHomes, tempHome } from './helpers.js';

/*
 * `dms put` sends a file as it reads it (cli/files.ts). Through Node 20's fetch the whole file was
 * read into the command's memory first, whatever the node took: a file larger than the machine's
 * memory could not be sent. A stand-in node that reads slowly shows it: the command's RSS while
 * it sends 160 MiB, against the same command sending a few bytes.
 */
const MIB = 1024 * 1024;
const SIZE = 160 * MIB;
const CID = 'bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy';

let dir: string;
let big: string;
let small: string;
let server: Server;
let port: number;
/** What the stand-in does with each upload. */
let handle: (req: IncomingMessage, res: ServerResponse) => void;

beforeAll(async () => {
  assertBuilt();
  dir = mkdtempSync(join(tmpdir(), 'dms-put-stream-'));
  big = join(dir, 'big.bin');
  small = join(dir, 'small.txt');
  const mib = Buffer.alloc(MIB, 7);
  writeFileSync(big, '');
  for (let i = 0; i < SIZE / MIB; i++) writeFileSync(big, mib, { flag: 'a' });
  writeFileSync(small, 'hello\n');
  server = createServer((req, res) => handle(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});

afterAll(() => {
  server?.close();
  rmSync(dir, { recursive: true, force: true });
  cleanupHomes();
});

/** Reads each upload at about 100 MiB/s, then answers as the node does. */
const slowNode = (received: number[]) => (req: IncomingMessage, res: ServerResponse) => {
  let n = 0;
  req.on('data', (chunk: Buffer) => {
    n += chunk.length;
    req.pause();
    setTimeout(() => req.resume(), Math.ceil(chunk.length / MIB));
  });
  req.on('end', () => {
    received.push(n);
    res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ cid: CID, size: n, kind: 'file' }));
  });
};

/** `dms put <path>` against the stand-in, with the command's highest RSS while it ran. */
function put(path: string): Promise<{ code: number; stdout: string; stderr: string; peakRssMiB: number }> {
  const home = tempHome('put-stream');
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, '--home', home, 'put', path], { cwd: home, env: cleanEnv({ DMS_PORT: String(port) }) });
    let stdout = '';
    let stderr = '';
    let peak = 0;
    const sample = setInterval(() => {
      try {
        const kb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? 0);
        peak = Math.max(peak, kb / 1024);
      } catch {
        // gone already
      }
    }, 20);
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => {
      clearInterval(sample);
      resolve({ code: code ?? 1, stdout, stderr, peakRssMiB: peak });
    });
  });
}

describe.skipIf(process.platform !== 'linux')('dms put streams what it sends', () => {
  it('holds a few MiB of a 160 MiB file at a time, not the file, while a slow node takes it', async () => {
    const received: number[] = [];
    handle = slowNode(received);
    const few = await put(small);
    expect(few.code, few.stderr).toBe(0);
    const many = await put(big);
    expect(many.code, many.stderr).toBe(0);
    expect(many.stdout.trim()).toBe(CID);
    expect(received).toEqual([6, SIZE]);
    // Read ahead of the node, the file alone would be 160 MiB more.
    expect(many.peakRssMiB, `${many.peakRssMiB} MiB sending 160 MiB against ${few.peakRssMiB} MiB sending 6 bytes`).toBeLessThan(few.peakRssMiB + 48);
  }, 60_000);

  const refusal = 'upload of 160 MiB is larger than the 2 MiB of storage free here';
  const refuse = (res: ServerResponse, close: boolean) =>
    res.writeHead(413, { 'content-type': 'application/json', ...(close ? { connection: 'close' } : {}) }).end(JSON.stringify({ error: refusal }));

  it('says the node’s refusal when the node answers before the body is all sent', async () => {
    // Refused at the first bytes, the connection kept and the rest read and dropped: closed, it
    // would end in a reset that may come first (the next case).
    handle = (req, res) => {
      req.once('data', () => refuse(res, false));
      req.resume();
    };
    const refused = await put(big);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(refusal);
  }, 30_000);

  it('stops reading an answer that is not the node’s: endless, or not JSON', async () => {
    handle = (req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(201, { 'content-type': 'application/json' });
        // 4 MiB of answer where `{cid, size, kind}` is expected; the command reads at most 1 MiB.
        const junk = Buffer.alloc(64 * 1024, 0x61);
        let n = 0;
        const more = () => {
          while (n < 64 && res.write(junk)) n++;
          if (n++ < 64) res.once('drain', more);
          else res.end();
        };
        more();
      });
    };
    const endless = await put(small);
    expect(endless.code).not.toBe(0);
    expect(endless.stderr).toMatch(/the node's answer to POST \/api\/v1\/blobs broke off: an answer longer than 1048576 characters/);
    handle = (req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(201, { 'content-type': 'text/html' }).end('<html>a proxy</html>'));
    };
    const html = await put(small);
    expect(html.code).not.toBe(0);
    expect(html.stderr).toContain('the node answered POST /api/v1/blobs with something that is not JSON');
  }, 30_000);

  it('says the file shrank, not that the node broke off, when it is cut short while sent', async () => {
    // Its size is declared before it is sent: a file cut meanwhile would leave the node waiting
    // for bytes that never come.
    const shrinking = join(dir, 'shrinking.bin');
    writeFileSync(shrinking, readFileSync(big).subarray(0, 32 * MIB));
    const received: number[] = [];
    const slow = slowNode(received);
    handle = (req, res) => {
      req.once('data', () => truncateSync(shrinking, MIB));
      slow(req, res);
    };
    const cut = await put(shrinking);
    expect(cut.code).not.toBe(0);
    expect(cut.stderr).toMatch(/shrinking\.bin: it shrank while it was sent \(\d+ of 33554432 bytes read\)/);
  }, 30_000);

  it('says the connection closed on it, not that no node answers, when the node refuses and resets it', async () => {
    // As the node does: the answer, then the connection closed on the unread body (a reset),
    // which may reach the command before the answer does.
    handle = (req, res) => req.once('data', () => refuse(res, true).on('finish', () => req.socket.destroy()));
    const refused = await put(big);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(new RegExp(`${refusal}|closed the connection before it took the whole upload`));
    expect(refused.stderr).not.toMatch(/cannot reach|no node answers/);
  }, 30_000);
});
