/**
 * How a node meets the rest of the network through its first peers: the DHT's lookup of its own
 * id asks them for the nodes nearest to it, and connects to those. kad-dht makes that lookup one
 * second after the node starts, then every five minutes. Its lookups run even with no peer known
 * (host.ts allowQueryWithZeroPeers: a dial of an unknown peer fails at once instead of waiting
 * for one), so a node whose first peer came after that second (a loaded machine, `dms peers
 * connect` by hand, a bootstrap peer that was down) met nobody but that peer for five minutes:
 * three nodes started at once on a loaded CI machine, two of them never saw each other.
 *
 * So the lookup is made again a second after the node's first DHT peer is identified, and twice
 * more some seconds apart (two nodes joining through the same peer at the same instant may each ask it
 * before it knows the other); again once a node that lost every connection has a peer anew.
 */
import type { DmsLibp2p } from './host.js';

/**
 * When each lookup starts after the first DHT peer is identified: not at once, as the DHT adds
 * the peer to its table only after identify (a lookup before that found nobody), then twice more.
 */
const LOOKUPS_AT_MS = [1_000, 5_000, 30_000];
/** How long one lookup may take. */
const LOOKUP_MS = 10_000;

export function lookUpSelfOnJoining(node: DmsLibp2p, dhtProtocol: string): void {
  let timers: NodeJS.Timeout[] = [];
  const lookUp = async () => {
    if (node.status !== 'started') return;
    try {
      // Each peer the lookup reaches is asked, and so connected to: nothing to do with the answers.
      for await (const _ of node.services.dht.getClosestPeers(node.peerId.toMultihash().bytes, { signal: AbortSignal.timeout(LOOKUP_MS) })) void _;
    } catch {
      // Nobody found, or the node stopped: the DHT's own lookups go on.
    }
  };
  node.addEventListener('peer:identify', (evt) => {
    if (timers.length > 0 || !evt.detail.protocols.includes(dhtProtocol)) return;
    timers = LOOKUPS_AT_MS.map((ms) => {
      const timer = setTimeout(() => void lookUp(), ms);
      timer.unref();
      return timer;
    });
  });
  // Cut off from every peer: the next peer is a first one again.
  node.addEventListener('peer:disconnect', () => {
    if (node.getConnections().length > 0) return;
    for (const timer of timers) clearTimeout(timer);
    timers = [];
  });
}
