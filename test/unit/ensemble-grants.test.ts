/**
 * The members grants a node holds (actors/ensembles/grants.ts): versions, expiry, each
 * requester's grants apart from the others', and the bounds on how many a peer may make it hold.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { assignSlots, ensembleNetworkName, inSubnet } from '../../actors/ensembles/docker-networks.js';
import { GrantRegistry } from '../../actors/ensembles/grants.js';
import { type EnsembleMembers, MAX_GRANT_MS } from '../../behaviors/ensembles/schema.js';

const R = 'requester-r';
const X = 'hostile-x';
const NODE_A = 'node-a';
const NODE_B = 'node-b';

function clock(start = 1_000_000) {
  let t = start;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

function members(ensemble: string, version: number, expires_at: number, nodes: Record<string, string | null> = { server: NODE_A, client: NODE_B }): EnsembleMembers {
  return { ensemble, version, expires_at, parts: Object.entries(nodes).map(([part, node]) => ({ part, job_id: randomUUID(), node, ports: part === 'server' ? [8080] : [] })) };
}

describe('the members grants', () => {
  it('a newer version replaces the grant, an older one arriving late is ignored, the same one renews it', () => {
    const c = clock();
    const g = new GrantRegistry(undefined, c.now);
    const e = randomUUID();
    expect(g.put(R, members(e, 1, c.now() + 60_000)).accepted).toBe(true);
    expect(g.put(R, members(e, 3, c.now() + 60_000, { server: NODE_B })).accepted).toBe(true);
    const late = g.put(R, members(e, 2, c.now() + 60_000, { server: 'node-c' }));
    expect(late).toMatchObject({ accepted: false, grant: { version: 3 } });
    expect(g.get(R, e)?.parts.map((p) => p.node)).toEqual([NODE_B]);
    c.advance(30_000);
    expect(g.put(R, members(e, 3, c.now() + 60_000, { server: NODE_B })).grant.expires_at).toBe(c.now() + 60_000);
  });

  it('drops a grant once it expires; one that arrives expired or too far ahead is refused', () => {
    const c = clock();
    const g = new GrantRegistry(undefined, c.now);
    const e = randomUUID();
    g.put(R, members(e, 1, c.now() + 1_000));
    expect(g.hostsPart(R, e, NODE_B)).toBe(true);
    c.advance(1_000);
    expect(g.get(R, e)).toBeUndefined();
    expect(g.hostsPart(R, e, NODE_B)).toBe(false);
    expect(g.size).toBe(0);
    expect(() => g.put(R, members(e, 2, c.now()))).toThrow(/expired/);
    expect(() => g.put(R, members(e, 2, c.now() + MAX_GRANT_MS + 60_000))).toThrow(/MAX_GRANT_MS/);
    // Within the allowance for clocks apart: taken, and cut to MAX_GRANT_MS.
    expect(g.put(R, members(e, 2, c.now() + MAX_GRANT_MS + 5_000)).grant.expires_at).toBe(c.now() + MAX_GRANT_MS);
  });

  it('keeps each requester apart: a hostile peer granting the same ensemble id changes nothing of the requester\'s', () => {
    const c = clock();
    const g = new GrantRegistry(undefined, c.now);
    const e = randomUUID();
    g.put(R, members(e, 1, c.now() + 60_000));
    g.put(X, members(e, 99, c.now() + 60_000, { server: X, client: X }));
    expect(g.hostsPart(R, e, X)).toBe(false);
    expect(g.hostsPart(X, e, X)).toBe(true);
    expect(g.revoke(X, e)).toBe(true);
    expect(g.get(R, e)?.version).toBe(1);
    expect(g.revoke(R, e)).toBe(true);
    expect(g.revoke(R, e)).toBe(false);
  });

  it('refuses past its bounds per requester and in all, with a clear error, and makes room of expired grants', () => {
    const c = clock();
    const g = new GrantRegistry({ perRequester: 3, total: 5 }, c.now);
    for (let i = 0; i < 3; i++) g.put(X, members(randomUUID(), 1, c.now() + 1_000));
    expect(() => g.put(X, members(randomUUID(), 1, c.now() + 1_000))).toThrow(/already holds grants for 3 ensembles on this node \(at most 3\)/);
    // Another requester is not held back by X's flood.
    g.put(R, members(randomUUID(), 1, c.now() + 60_000));
    g.put(R, members(randomUUID(), 1, c.now() + 60_000));
    expect(() => g.put(R, members(randomUUID(), 1, c.now() + 60_000))).toThrow(/5 ensemble grants \(at most 5\)/);
    c.advance(1_000);
    g.put(R, members(randomUUID(), 1, c.now() + 60_000));
    expect(g.size).toBe(3);
  });

  it('refuses a grant naming a part twice or giving one job to two parts', () => {
    const c = clock();
    const g = new GrantRegistry(undefined, c.now);
    const e = randomUUID();
    const m = members(e, 1, c.now() + 60_000);
    expect(() => g.put(R, { ...m, parts: [m.parts[0]!, m.parts[0]!] })).toThrow(/names part server twice/);
    expect(() => g.put(R, { ...m, parts: [m.parts[0]!, { ...m.parts[1]!, job_id: m.parts[0]!.job_id }] })).toThrow(/gives job .* to two parts/);
  });

  it('tells its listeners of changes and of expiry', () => {
    const c = clock();
    const g = new GrantRegistry(undefined, c.now);
    const seen: (number | undefined)[] = [];
    g.onChange((grant) => seen.push(grant?.version));
    const e = randomUUID();
    g.put(R, members(e, 1, c.now() + 1_000));
    c.advance(2_000);
    g.sweep();
    expect(seen).toEqual([1, undefined]);
  });
});

describe("an ensemble's networks on a node", () => {
  it('put every part in the first slot none of whose ports it declares again, keeping slots parts already have', () => {
    const parts = [
      { part: 'web', ports: [8080] },
      { part: 'api', ports: [8080, 9090] },
      { part: 'db', ports: [5432] },
      { part: 'cache', ports: [9090] },
    ];
    expect(Object.fromEntries(assignSlots(parts))).toEqual({ api: 0, cache: 1, db: 0, web: 1 });
    // A slot held (a container's hosts file says so) stays, and the others fit around it.
    expect(Object.fromEntries(assignSlots(parts, new Map([['web', 0]])))).toEqual({ web: 0, api: 1, cache: 0, db: 0 });
  });

  it('name networks apart for two requesters, or two nodes, using the same ensemble id', () => {
    const e = randomUUID();
    expect(ensembleNetworkName('n1', R, e, 0)).toMatch(new RegExp(`^dms-ens-${e}-[0-9a-f]{8}$`));
    expect(ensembleNetworkName('n1', R, e, 0)).not.toBe(ensembleNetworkName('n1', X, e, 0));
    expect(ensembleNetworkName('n1', R, e, 0)).not.toBe(ensembleNetworkName('n2', R, e, 0));
    expect(ensembleNetworkName('n1', R, e, 2)).toBe(`${ensembleNetworkName('n1', R, e, 0)}-2`);
  });

  it('let only addresses of the ensemble bridge use the names', () => {
    expect(inSubnet('172.18.0.5', '172.18.0.0/16')).toBe(true);
    expect(inSubnet('::ffff:172.18.3.5', '172.18.0.0/16')).toBe(true);
    expect(inSubnet('172.19.0.5', '172.18.0.0/16')).toBe(false);
    expect(inSubnet('192.168.16.130', '192.168.16.128/28')).toBe(true);
    expect(inSubnet('192.168.16.150', '192.168.16.128/28')).toBe(false);
    expect(inSubnet('fe80::1', '172.18.0.0/16')).toBe(false);
    expect(inSubnet('not an address', '172.18.0.0/16')).toBe(false);
  });
});
