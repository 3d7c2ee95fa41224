import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readAnchors } from '../../runtime/capability/anchors.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import { initHome, isSealedKey, readKey, writeKey } from '../../runtime/home.js';

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'dms-keys-'));
  dirs.push(d);
  return d;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const PASS = 'correct horse battery staple';

describe('keys at rest', () => {
  it('seals a key under a passphrase: no seed on disk, mode 0600, readable only with the passphrase', () => {
    const path = join(tmp(), 'k.json');
    const key = KeyPair.generate();
    writeKey(path, key, PASS);
    const text = readFileSync(path, 'utf8');
    expect(text).not.toContain(Buffer.from(key.seed).toString('hex'));
    expect(JSON.parse(text).sealed).toMatchObject({ kdf: 'scrypt', cipher: 'aes-256-gcm' });
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(isSealedKey(path)).toBe(true);
    expect(readKey(path, PASS).did).toBe(key.did);
    const noPass = (() => {
      try {
        readKey(path, undefined);
      } catch (e) {
        return e as DmsError;
      }
    })();
    expect(noPass?.message).toMatch(/is encrypted: set DMS_PASSPHRASE/);
    expect(() => readKey(path, 'wrong')).toThrow(/wrong passphrase/);
  });

  it('detects a sealed seed moved under another identity, or altered', () => {
    const path = join(tmp(), 'k.json');
    writeKey(path, KeyPair.generate(), PASS);
    const file = JSON.parse(readFileSync(path, 'utf8'));
    writeFileSync(path, JSON.stringify({ ...file, did: KeyPair.generate().did }));
    expect(() => readKey(path, PASS)).toThrow(/wrong passphrase, or the file was altered/);
    const data = Buffer.from(file.sealed.data, 'base64');
    data[0] ^= 1;
    writeFileSync(path, JSON.stringify({ ...file, sealed: { ...file.sealed, data: data.toString('base64') } }));
    expect(() => readKey(path, PASS)).toThrow(/wrong passphrase, or the file was altered/);
  });

  it('still reads plain key files, and writes them 0600 without a passphrase', () => {
    const path = join(tmp(), 'k.json');
    const key = KeyPair.generate();
    writeKey(path, key);
    expect(isSealedKey(path)).toBe(false);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readKey(path, PASS).did).toBe(key.did);
  });

  it('initHome seals both keys when given a passphrase and makes the operator the root anchor', () => {
    const home = tmp();
    const r = initHome(home, PASS);
    expect(r.encrypted).toEqual({ node: true, operator: true });
    expect(readAnchors(join(home, 'anchors.json')).root).toEqual([r.operator.did]);
    expect(() => initHome(home, undefined)).toThrow(/is encrypted/);
    expect(initHome(home, PASS).operator.did).toBe(r.operator.did);
    const plain = initHome(tmp(), undefined);
    expect(plain.encrypted).toEqual({ node: false, operator: false });
  });
});
