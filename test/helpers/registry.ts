/**
 * A Docker registry on 127.0.0.1 for tests that pull: the engine treats loopback registries as
 * plain HTTP ones, so it pulls from this as from Docker Hub. It serves the registry API's reads
 * (`/v2/`, manifests, blobs) for images made here: the test image's layers (a shell to run),
 * then one layer of random bytes of the size asked, so each image holds that much more on disk.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync } from 'node:zlib';
import type Docker from 'dockerode';
import * as tar from 'tar-stream';

const MANIFEST_TYPE = 'application/vnd.docker.distribution.manifest.v2+json';
const digestOf = (bytes: Buffer) => `sha256:${createHash('sha256').update(bytes).digest('hex')}`;

export interface TestRegistry {
  /** `127.0.0.1:<port>`, the registry part of its images' names. */
  host: string;
  /**
   * Serves `<host>/<name>:latest`: the base image's layers and `extraBytes` of random bytes, that
   * layer sent at `bytesPerSecond` when given. Returns the image's name and that layer's digest and size.
   */
  add(name: string, extraBytes: number, opts?: { bytesPerSecond?: number }): Promise<{ ref: string; filler: { digest: string; size: number } }>;
  /** Manifests asked for, by name: how often the engine pulled each. */
  pulls: Map<string, number>;
  /** Bytes of each blob sent, by digest. */
  served: Map<string, number>;
  close(): Promise<void>;
}

/** The uncompressed layers of `image` as the engine holds it (`docker save`), base first. */
async function layersOf(docker: Docker, image: string): Promise<Buffer[]> {
  const files = new Map<string, Buffer>();
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (header, stream, next) => {
      const parts: Buffer[] = [];
      stream.on('data', (c: unknown) => void parts.push(c as Buffer));
      stream.on('end', () => {
        files.set(header.name, Buffer.concat(parts));
        next();
      });
    });
    extract.on('finish', resolve);
    extract.on('error', reject);
  });
  (await docker.getImage(image).get()).pipe(extract);
  await done;
  const manifest = JSON.parse(files.get('manifest.json')!.toString()) as { Layers: string[] }[];
  return manifest[0].Layers.map((path) => files.get(path)!);
}

/** A tar holding one file of `bytes` random bytes. */
async function randomLayer(bytes: number): Promise<Buffer> {
  const pack = tar.pack();
  pack.entry({ name: 'filler.bin', size: bytes }, randomBytes(bytes));
  pack.finalize();
  const parts: Buffer[] = [];
  for await (const chunk of pack) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

export async function startRegistry(docker: Docker, baseImage: string): Promise<TestRegistry> {
  const base = await layersOf(docker, baseImage);
  const blobs = new Map<string, Buffer>();
  const manifests = new Map<string, Buffer>();
  const pulls = new Map<string, number>();
  const served = new Map<string, number>();
  const rates = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://x').pathname;
    if (path === '/v2/' || path === '/v2') {
      res.writeHead(200, { 'content-type': 'application/json', 'docker-distribution-api-version': 'registry/2.0' });
      return res.end('{}');
    }
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(path);
    const body = m && (m[2] === 'manifests' ? manifests.get(`${m[1]}:${m[3]}`) ?? [...manifests.entries()].find(([, b]) => digestOf(b) === m[3])?.[1] : blobs.get(m[3]));
    if (!m || !body) {
      res.writeHead(404, { 'content-type': 'application/json' });
      return res.end(JSON.stringify({ errors: [{ code: m?.[2] === 'blobs' ? 'BLOB_UNKNOWN' : 'MANIFEST_UNKNOWN', message: 'unknown' }] }));
    }
    if (m[2] === 'manifests' && req.method === 'GET') pulls.set(m[1], (pulls.get(m[1]) ?? 0) + 1);
    res.writeHead(200, {
      'content-type': m[2] === 'manifests' ? MANIFEST_TYPE : 'application/octet-stream',
      'content-length': body.length,
      'docker-content-digest': digestOf(body),
      'docker-distribution-api-version': 'registry/2.0',
    });
    if (req.method === 'HEAD') return res.end();
    const rate = m[2] === 'blobs' ? rates.get(m[3]) : undefined;
    if (!rate) {
      served.set(m[3], (served.get(m[3]) ?? 0) + body.length);
      return res.end(body);
    }
    // A piece every 20 ms, until the body is sent or the engine lets go of it.
    const piece = Math.max(1, Math.round(rate / 50));
    let at = 0;
    const timer = setInterval(() => {
      if (res.destroyed || at >= body.length) {
        clearInterval(timer);
        return res.end();
      }
      const next = body.subarray(at, at + piece);
      at += next.length;
      served.set(m[3], (served.get(m[3]) ?? 0) + next.length);
      res.write(next);
    }, 20);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  const blob = (bytes: Buffer) => {
    const digest = digestOf(bytes);
    blobs.set(digest, bytes);
    return { digest, size: bytes.length };
  };
  return {
    host,
    pulls,
    served,
    async add(name, extraBytes, opts = {}) {
      const layers = [...base, await randomLayer(extraBytes)];
      const config = Buffer.from(
        JSON.stringify({
          architecture: process.arch === 'arm64' ? 'arm64' : 'amd64',
          os: 'linux',
          config: { Cmd: ['sh'] },
          rootfs: { type: 'layers', diff_ids: layers.map(digestOf) },
        }),
      );
      // Level 1: the random bytes do not compress, and the engine only needs gzip's framing.
      const sent = layers.map((l) => blob(gzipSync(l, { level: 1 })));
      const manifest = Buffer.from(
        JSON.stringify({
          schemaVersion: 2,
          mediaType: MANIFEST_TYPE,
          config: { mediaType: 'application/vnd.docker.container.image.v1+json', ...blob(config) },
          layers: sent.map((b) => ({ mediaType: 'application/vnd.docker.image.rootfs.diff.tar.gzip', ...b })),
        }),
      );
      const filler = sent.at(-1)!;
      if (opts.bytesPerSecond) rates.set(filler.digest, opts.bytesPerSecond);
      manifests.set(`${name}:latest`, manifest);
      return { ref: `${host}/${name}:latest`, filler };
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
