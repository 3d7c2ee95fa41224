import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newCaller, rootOf, wire } from '../helpers/envelopes.js';
import { type NodeProcess, removeHome, runCli, startNode } from '../helpers/node.js';

/**
 * Bounds on bearer JWTs, on a real node: a longest lifetime (auth.jwt_max_lifetime_s), and
 * when configured the issuer and audience they must name. A token outside them is refused
 * with 401 saying which bound or claim failed.
 */

const SECRET = 'a-jwt-secret-for-tests-that-is-long-enough-0123456789';
const ISSUER = 'https://issuer.example/dms';
const AUDIENCE = 'dms-node-under-test';
const nowS = () => Math.floor(Date.now() / 1000);

interface Claims {
  iat?: number | null; // null: no iat claim at all
  exp: number;
  iss?: string;
  aud?: string;
}

const jwt = (c: Claims, role = 'operator') => {
  const t = new SignJWT({ role }).setProtectedHeader({ alg: 'HS256' }).setExpirationTime(c.exp);
  if (c.iat !== null) t.setIssuedAt(c.iat ?? nowS());
  if (c.iss) t.setIssuer(c.iss);
  if (c.aud) t.setAudience(c.aud);
  return t.sign(new TextEncoder().encode(SECRET));
};

async function invoke(node: NodeProcess, token: string): Promise<{ status: number; error?: string }> {
  const res = await fetch(`${node.url}/api/v1/actor/invoke`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: wire(newCaller(), { to: rootOf(node.peerId), be: '/public/hello', cont: '/private/r' }),
  });
  const text = await res.text();
  return { status: res.status, error: res.status === 200 ? undefined : JSON.parse(text).error };
}

describe('JWT bounds: lifetime 1 h, issuer and audience required', () => {
  let node: NodeProcess;
  beforeAll(async () => {
    node = await startNode({
      env: { DMS_JWT_SECRET: SECRET },
      config: { network: { enabled: false }, auth: { jwt_max_lifetime_s: 3600, jwt_issuer: ISSUER, jwt_audience: AUDIENCE } },
    });
  });
  afterAll(async () => {
    await node?.stop();
    if (node) removeHome(node.home);
  });

  const ok = { iss: ISSUER, aud: AUDIENCE };

  it('accepts a token within every bound', async () => {
    expect(await invoke(node, await jwt({ ...ok, exp: nowS() + 1800 }))).toEqual({ status: 200, error: undefined });
    expect(await invoke(node, await jwt({ ...ok, iat: null, exp: nowS() + 1800 }))).toEqual({ status: 200, error: undefined });
  });

  it('refuses a lifetime over the maximum, measured from iat, or from now without iat', async () => {
    const long = await invoke(node, await jwt({ ...ok, exp: nowS() + 7200 }));
    expect(long.status).toBe(401);
    expect(long.error).toMatch(/^bearer token lifetime of 7200 s exceeds the 3600 s this node accepts \(auth\.jwt_max_lifetime_s\)$/);
    // Minted long ago with a far expiry: still too long a lifetime, even if little is left.
    const old = await invoke(node, await jwt({ ...ok, iat: nowS() - 86_400, exp: nowS() + 600 }));
    expect(old.status).toBe(401);
    expect(old.error).toMatch(/^bearer token lifetime of 87000 s exceeds the 3600 s/);
    // An iat in the future shortens nothing: the lifetime counts from now at the latest.
    const future = await invoke(node, await jwt({ ...ok, iat: nowS() + 7000, exp: nowS() + 7200 }));
    expect(future.status).toBe(401);
    expect(future.error).toMatch(/^bearer token lifetime of 7[12]\d\d s exceeds the 3600 s/);
    const noIat = await invoke(node, await jwt({ ...ok, iat: null, exp: nowS() + 7200 }));
    expect(noIat.status).toBe(401);
    expect(noIat.error).toMatch(/^bearer token lifetime of 7[12]\d\d s exceeds the 3600 s this node accepts \(auth\.jwt_max_lifetime_s\)$/);
  });

  it('refuses a wrong or missing issuer or audience, naming the claim', async () => {
    const exp = nowS() + 600;
    for (const [claims, claim] of [
      [{ aud: AUDIENCE, iss: 'https://someone.else', exp }, 'iss'],
      [{ aud: AUDIENCE, exp }, 'iss'],
      [{ iss: ISSUER, aud: 'another-node', exp }, 'aud'],
      [{ iss: ISSUER, exp }, 'aud'],
    ] as const) {
      const r = await invoke(node, await jwt(claims));
      expect(r.status, JSON.stringify(claims)).toBe(401);
      expect(r.error).toBe(`bearer token rejected: ${claim} claim invalid`);
    }
  });

  it('dms auth token signs with the configured issuer and audience, within the lifetime', async () => {
    const r = await runCli(['--home', node.home, 'auth', 'token', '--role', 'operator', '--expiry', '30m'], { DMS_JWT_SECRET: SECRET });
    expect(r.code, r.stderr).toBe(0);
    expect(await invoke(node, r.stdout.trim())).toEqual({ status: 200, error: undefined });
  });
});

describe('JWT bounds by default', () => {
  let node: NodeProcess;
  beforeAll(async () => {
    node = await startNode({ env: { DMS_JWT_SECRET: SECRET }, config: { network: { enabled: false } } });
  });
  afterAll(async () => {
    await node?.stop();
    if (node) removeHome(node.home);
  });

  it('accepts up to a day, any issuer and audience; refuses longer', async () => {
    expect((await invoke(node, await jwt({ exp: nowS() + 86_000, iss: 'anyone', aud: 'anything' }))).status).toBe(200);
    const week = await invoke(node, await jwt({ exp: nowS() + 7 * 86_400 }));
    expect(week.status).toBe(401);
    expect(week.error).toBe('bearer token lifetime of 604800 s exceeds the 86400 s this node accepts (auth.jwt_max_lifetime_s)');
  });
});
