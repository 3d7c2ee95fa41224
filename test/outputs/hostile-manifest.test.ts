/**
 * A result manifest is signed by the node that ran the job, and that node may be hostile: what
 * it names reaches the requester's disk through `dms jobs get`. A real node process, the real
 * CLI, and a foreign peer that answers for a job as its provider with a manifest it signed
 * itself (a job read with `--from`, as a job granted to this node is).
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Manifest, MANIFEST_DOMAIN } from '../../behaviors/jobs/manifest.js';
import type { KeyPair } from '../../runtime/crypto/keys.js';
import { decodePayload } from '../../runtime/wire/envelope.js';
import { ForeignPeer } from '../helpers/peer.js';
import { type NodeProcess, removeHome, runCli, startNode } from '../helpers/node.js';

/** Signed as signManifest signs, but without its schema: a hostile provider signs what it likes. */
function signAnything(manifest: Manifest, key: KeyPair): string {
  const payload = JSON.stringify(manifest);
  const sig = Buffer.from(key.signSync(Buffer.from(MANIFEST_DOMAIN + payload, 'utf8'))).toString('base64');
  return Buffer.from(JSON.stringify({ payload, sig })).toString('base64');
}

describe('dms jobs get against a hostile provider', { timeout: 60_000 }, () => {
  let node: NodeProcess;
  let peer: ForeignPeer;
  let cid: string;
  const scratch = mkdtempSync(join(tmpdir(), 'dms-hostile-manifest-'));
  /** The manifest the foreign peer answers with, per job. */
  const manifests = new Map<string, string>();

  beforeAll(async () => {
    node = await startNode();
    peer = await ForeignPeer.connectedTo(node);
    // Content the node holds already, so nothing needs fetching from the foreign peer.
    const res = await fetch(`${node.url}/api/v1/blobs`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: 'planted by the provider\n' });
    expect(res.status).toBe(201);
    cid = ((await res.json()) as { cid: string }).cid;
    peer.transport.onEnvelope((env) => {
      if (env.be !== '/dms/deployment/manifest' || !env.opt.cont) return;
      const { job_id } = decodePayload(env.msg) as { job_id: string };
      void peer.send(peer.replyTo(env, { manifest: manifests.get(job_id) ?? null }, 'outputs')).catch(() => undefined);
    });
  }, 45_000);

  afterAll(async () => {
    await peer?.stop();
    await node?.stop();
    if (node) removeHome(node.home);
    rmSync(scratch, { recursive: true, force: true });
  });

  /** A job "run" by the foreign peer whose one output is `name`, and `dms jobs get` of it into `<case>/<outDir>`. */
  async function getWith(name: string, label: string, outDir = 'out') {
    const job = randomUUID();
    const manifest: Manifest = {
      job,
      node: peer.host,
      requester: null,
      exit_code: 0,
      ended_at: new Date().toISOString(),
      outputs: [{ name, path: '/outputs', cid, size: 24 }],
      logs: null,
    };
    manifests.set(job, signAnything(manifest, peer.nodeKey));
    const base = join(scratch, label);
    // What the user already has beside the output folder.
    mkdirSync(join(base, 'victim'), { recursive: true });
    writeFileSync(join(base, 'victim', 'keep.txt'), 'mine\n');
    const got = await runCli(['--home', node.home, 'jobs', 'get', job, '--from', peer.host, '--output-dir', join(base, outDir)]);
    return { got, base, job };
  }

  it('refuses an output name that climbs out of the output folder, and touches nothing there', async () => {
    const { got, base } = await getWith('../victim', 'climb');
    expect(got.code, got.stdout + got.stderr).not.toBe(0);
    expect(got.stderr).toMatch(/output name/);
    expect(readFileSync(join(base, 'victim', 'keep.txt'), 'utf8')).toBe('mine\n');
    expect(existsSync(join(base, 'out'))).toBe(false);
  });

  it("never replaces what the user has where an output would go: refused, naming it, unless --force", async () => {
    // A name the job may never have asked for, chosen by the provider to land on the user's folder.
    const { got, base, job } = await getWith('victim', 'existing', '.');
    expect(got.code, got.stdout + got.stderr).not.toBe(0);
    expect(got.stderr).toContain(`${join(base, 'victim')} already exists and is not this output`);
    expect(readFileSync(join(base, 'victim', 'keep.txt'), 'utf8')).toBe('mine\n');

    const forced = await runCli(['--home', node.home, 'jobs', 'get', job, '--from', peer.host, '--output-dir', base, '--force']);
    expect(forced.code, forced.stderr).toBe(0);
    expect(readFileSync(join(base, 'victim'), 'utf8')).toBe('planted by the provider\n');
  });

  it('writes an output again over the same files without --force', async () => {
    const { got, base, job } = await getWith('again', 'again', '.');
    expect(got.code, got.stderr).toBe(0);
    const second = await runCli(['--home', node.home, 'jobs', 'get', job, '--from', peer.host, '--output-dir', base]);
    expect(second.code, second.stderr).toBe(0);
    expect(readFileSync(join(base, 'again'), 'utf8')).toBe('planted by the provider\n');
  });

  it('refuses an output folder that is a file, saying so once, and leaves the file as it was', async () => {
    const { base, job } = await getWith('plain', 'plain', '.');
    const file = join(base, 'a-file');
    writeFileSync(file, 'mine\n');
    const got = await runCli(['--home', node.home, 'jobs', 'get', job, '--from', peer.host, '--output-dir', file]);
    expect(got.code, got.stdout + got.stderr).toBe(1);
    expect(got.stderr).toBe(`dms: ${file} is not a folder: give --output-dir a folder, or a path where none is yet\n`);
    expect(readFileSync(file, 'utf8')).toBe('mine\n');
  });
});
