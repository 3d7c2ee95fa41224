import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MANIFEST_DOMAIN, type Manifest, openManifest, signManifest } from '../../behaviors/jobs/manifest.js';
import { KeyPair } from '../../runtime/crypto/keys.js';

const provider = KeyPair.generate();
const requester = KeyPair.generate();
const other = KeyPair.generate();
const manifest = (node = provider.peerId): Manifest => ({
  job: randomUUID(),
  node,
  requester: requester.peerId,
  exit_code: 0,
  ended_at: new Date().toISOString(),
  outputs: [{ name: 'out', path: '/outputs', cid: 'bafybeichheahhopbsyfu34k2d4yu5wiy7727l4bdyxeywhy3hdkdl53o7m', size: 3 }],
  logs: null,
});
const reseal = (signed: string, edit: (o: { payload: string; sig: string }) => void) => {
  const outer = JSON.parse(Buffer.from(signed, 'base64').toString());
  edit(outer);
  return Buffer.from(JSON.stringify(outer)).toString('base64');
};

describe('result manifests', () => {
  it('opens one signed by the node it names, about the job and requester expected', async () => {
    const m = manifest();
    const signed = await signManifest(m, provider);
    expect(openManifest(signed, { job: m.job, node: provider.peerId, requester: requester.peerId })).toEqual(m);
  });

  it('refuses one signed by a node other than the job provider', async () => {
    const m = manifest(other.peerId);
    const signed = await signManifest(m, other);
    expect(() => openManifest(signed, { job: m.job, node: provider.peerId })).toThrow(`manifest: signed by node ${other.peerId}, not by the job's provider ${provider.peerId}`);
    // Naming the provider but signed by another key: the signature does not check out.
    const forged = reseal(signed, (o) => (o.payload = o.payload.replace(other.peerId, provider.peerId)));
    expect(() => openManifest(forged, { job: m.job, node: provider.peerId })).toThrow(`manifest: its signature is not node ${provider.peerId}'s`);
    await expect(signManifest(manifest(), other)).rejects.toThrow(/cannot be signed by/);
  });

  it('refuses one edited after signing, another job\'s, or another requester\'s', async () => {
    const m = manifest();
    const signed = await signManifest(m, provider);
    const edited = reseal(signed, (o) => (o.payload = o.payload.replace('"size":3', '"size":4')));
    expect(() => openManifest(edited)).toThrow(/its signature is not node/);
    expect(() => openManifest(signed, { job: randomUUID() })).toThrow(/it is job .*'s, not job/);
    expect(() => openManifest(signed, { requester: other.peerId })).toThrow(`manifest: made for requester ${requester.peerId}, not ${other.peerId}`);
    expect(() => openManifest('bm90IGpzb24=')).toThrow(/not a signed result manifest/);
  });

  it('is not any other signature of the node key: an envelope signature over the same bytes fails', async () => {
    const m = manifest();
    const signed = await signManifest(m, provider);
    const bare = reseal(signed, (o) => (o.sig = Buffer.from(provider.signSync(Buffer.from(o.payload))).toString('base64')));
    expect(() => openManifest(bare)).toThrow(/its signature is not node/);
  });

  it('refuses one whose signed payload holds a key twice: another reader could take the other value', async () => {
    const m = manifest();
    // Signed as it is: only the duplicate is wrong with it.
    const payload = JSON.stringify(m).replace('{', '{"exit_code":1,');
    const sig = Buffer.from(provider.signSync(Buffer.from(MANIFEST_DOMAIN + payload))).toString('base64');
    const signed = Buffer.from(JSON.stringify({ payload, sig })).toString('base64');
    expect(() => openManifest(signed)).toThrow('manifest: not a signed result manifest (duplicate key "exit_code")');
    const outer = Buffer.from(`{"payload":${JSON.stringify(JSON.stringify(m))},"sig":"${sig}","sig":"${sig}"}`).toString('base64');
    expect(() => openManifest(outer)).toThrow('manifest: not a signed result manifest (duplicate key "sig")');
  });
});
