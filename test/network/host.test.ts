import { describe, expect, it } from 'vitest';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { DmsError } from '../../runtime/errors.js';
import { createHost } from '../../runtime/network/host.js';

describe('createHost', () => {
  it('takes the node key as its libp2p identity and is left unstarted', async () => {
    const keyPair = KeyPair.generate();
    // mDNS is only configured here: an unstarted node sends no multicast.
    const node = await createHost({ keyPair, enableMdns: true });
    expect(node.peerId.toString()).toBe(keyPair.peerId);
    expect(node.status).toBe('stopped');
    expect(node.services.mdns).toBeDefined();
    expect((await createHost({ keyPair })).services.mdns).toBeUndefined();
  });

  it('refuses malformed listen and bootstrap addresses before libp2p sees them', async () => {
    const keyPair = KeyPair.generate();
    const cases = [
      { opts: { listen: ['garbage'] }, text: /listen address 'garbage' is not a multiaddr/ },
      { opts: { bootstrap: ['/ip4/127.0.0.1/tcp/4001'] }, text: /must end in \/p2p\/<peer id>/ },
    ];
    for (const { opts, text } of cases) {
      const e = await createHost({ keyPair, ...opts }).catch((err: unknown) => err);
      expect(e).toBeInstanceOf(DmsError);
      expect((e as DmsError).kind).toBe('invalid');
      expect((e as DmsError).message).toMatch(text);
    }
  });
});
