/**
 * A job pinned to a peer whose profile says it offers nothing is refused at submission, but only
 * from an answer to the question asked for that submission: a peer slow to answer shows the
 * profile it published before, which may predate the share its operator onboarded a moment ago.
 */
import { describe, expect, it } from 'vitest';
import type { JobSpec } from '../../behaviors/jobs/schema.js';
import { refuseNodeOfferingNothing } from '../../http/routes/peers.js';

const PEER = '12D3KooWpinnedpeer';
const offeringNothing = { name: 'p', version: '0.1.0', addrs: [], location: {}, onboarded: null, free: null, executors: ['null'] };

function node(lastSeen: () => string) {
  const system = { isHere: () => false, log: { debug: () => undefined } };
  const http = {
    call: async () => ({ peers: [PEER], dids: {}, nodes: [{ id: PEER, did: null, profile: offeringNothing, last_seen: lastSeen() }] }),
  };
  return { system, http } as unknown as Parameters<typeof refuseNodeOfferingNothing>[1];
}
const spec = { placement: { node: PEER } } as JobSpec;

describe('refusing a job pinned to a peer that offers nothing', () => {
  it('refuses on the answer to its own question', async () => {
    await expect(refuseNodeOfferingNothing(spec, node(() => new Date().toISOString()))).rejects.toThrow(`placement.node: ${PEER} (p) offers nothing`);
  });

  it('does not refuse on an older answer (the peer did not answer in time)', async () => {
    const before = new Date(Date.now() - 5_000).toISOString();
    await expect(refuseNodeOfferingNothing(spec, node(() => before))).resolves.toBeUndefined();
  });
});
