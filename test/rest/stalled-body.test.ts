/**
 * A request body that stops arriving. An upload claims the storage it may write before it is
 * read: three connections that each declared 1 GiB, sent 2 bytes and then nothing held 3 GiB of
 * the share for as long as they stayed open (found by a hostile REST probe of a running node).
 * Now such a body is cut after `rest.body_idle_timeout_s` and its claim released; a body that
 * keeps arriving, however slowly, is not. node:http itself cut such a body after 300 s (its
 * bound on a whole request): an upload sending 1 KiB every 5 s was answered 408 at 300 s (found
 * by a probe of a running node, .scratch; longer than a test may wait, so the bound is checked
 * where the server is made).
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HEADERS_TIMEOUT_MS } from '../../http/server.js';
import { type LocalNode, startLocalNode } from '../helpers/local-node.js';
import { waitFor } from '../helpers/network.js';

let node: LocalNode;

beforeAll(async () => {
  node = await startLocalNode({ config: { network: { enabled: false }, rest: { body_idle_timeout_s: 1 } } });
}, 30_000);
afterAll(() => node?.stop());

const uploads = async (): Promise<number> => ((await (await fetch(`${node.url}/api/v1/resources/usage`)).json()) as { stored: { uploads: number } }).stored.uploads;

/** A raw connection that sends an upload's head and `first` bytes of a body of `length`. */
function startUpload(length: number, first: string): Promise<Socket> {
  const { port } = new URL(node.url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1', () => {
      socket.write(`POST /api/v1/blobs HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${length}\r\n\r\n${first}`);
      resolve(socket);
    });
    socket.once('error', reject);
  });
}

describe('a request body that stops arriving', () => {
  it('is cut after rest.body_idle_timeout_s, and the storage its upload claimed is free again', { timeout: 20_000 }, async () => {
    const socket = await startUpload(64 * 1024 * 1024, 'ab');
    await waitFor('the upload to claim its storage', async () => (await uploads()) > 0, { timeoutMs: 5_000 });
    const closed = new Promise<boolean>((r) => socket.once('close', () => r(true)));
    const cut = await Promise.race([closed, new Promise<boolean>((r) => setTimeout(() => r(false), 8_000))]);
    expect(cut, 'the node closed the stalled upload within 8 s').toBe(true);
    await waitFor('its claim to be released', async () => (await uploads()) === 0, { timeoutMs: 5_000 });
    expect((await fetch(`${node.url}/health`)).status).toBe(200);
  });

  it('is not cut for the time the whole request takes, only its head is (node:http cut a steady upload at 300 s)', () => {
    const { server } = node.node.http;
    expect(server.requestTimeout, 'no bound on a whole request').toBe(0);
    expect(server.headersTimeout, 'the request line and headers still have 60 s').toBe(HEADERS_TIMEOUT_MS);
  });

  it('control: a body that keeps arriving more slowly than a byte a second ends as an upload', { timeout: 20_000 }, async () => {
    const body = 'x'.repeat(8);
    const socket = await startUpload(body.length + 1, 'y');
    let answer = '';
    socket.on('data', (d) => (answer += d.toString()));
    for (const c of body) {
      await new Promise((r) => setTimeout(r, 400));
      socket.write(c);
    }
    await waitFor('the upload to be answered', () => answer.includes('\r\n\r\n') && answer, { timeoutMs: 5_000 });
    expect(answer).toMatch(/^HTTP\/1.1 201/);
    socket.destroy();
  });
});

describe('rest.max_connections', () => {
  it('holds no more connections than the bound: past it one that sends nothing goes for the new one', { timeout: 20_000 }, async () => {
    const small = await startLocalNode({ config: { network: { enabled: false }, rest: { max_connections: 3 } } });
    const { port } = new URL(small.url);
    const open = async () => new Promise<Socket>((resolve, reject) => { const s = connect(Number(port), '127.0.0.1', () => resolve(s)); s.once('error', reject); });
    try {
      const held = [await open(), await open(), await open()];
      // Three connections that send nothing: the new one is served, and the oldest of them goes
      // (http/connection-slots.ts; test/rest/http-edges.test.ts has the rest of the rule).
      expect((await fetch(`${small.url}/health`, { signal: AbortSignal.timeout(5_000) })).status).toBe(200);
      await waitFor('an idle connection to be closed', async () => held.some((s) => s.destroyed || s.readableEnded), { timeoutMs: 5_000 });
      for (const s of held) s.destroy();
    } finally {
      await small.stop();
    }
  });
});
