/**
 * How many addresses the node keeps for one peer. libp2p's peer store keeps every address it is
 * told of for an hour, and checks each new one against each held (quadratic): a peer naming
 * 1,000 made-up addresses of its own in each of 26 DHT `ADD_PROVIDER` messages (26 KB each)
 * cost a node 20 s of CPU, its event loop held, `/health` answered in 4 s. An honest node has a
 * few addresses; here one peer has at most MAX_PEER_ADDRESSES, and any one write names at most
 * that many.
 */
import type { PeerData, PeerId, PeerStore } from '@libp2p/interface';

export const MAX_PEER_ADDRESSES = 32;

const named = (data: PeerData): number => (data.addresses?.length ?? 0) + (data.multiaddrs?.length ?? 0);

/** `data` naming at most `room` addresses: itself when it fits. */
function within(data: PeerData, room: number): PeerData {
  if (named(data) <= room) return data;
  const addresses = data.addresses?.slice(0, room);
  const multiaddrs = data.multiaddrs?.slice(0, Math.max(0, room - (addresses?.length ?? 0)));
  return { ...data, ...(data.addresses && { addresses }), ...(data.multiaddrs && { multiaddrs }) };
}

/** Bounds what `peerStore`'s writes may hold of one peer's addresses, in place: its users hold this object. */
export function boundPeerAddresses(peerStore: PeerStore, max = MAX_PEER_ADDRESSES): void {
  const { merge, patch, save } = peerStore;
  // save and patch replace a peer's addresses with those named: at most `max` of them.
  peerStore.save = (id: PeerId, data: PeerData, options?) => save.call(peerStore, id, within(data, max), options);
  peerStore.patch = (id: PeerId, data: PeerData, options?) => patch.call(peerStore, id, within(data, max), options);
  // merge adds them to those held: only as many as there is room for.
  peerStore.merge = async (id: PeerId, data: PeerData, options?) => {
    if (named(data) === 0) return merge.call(peerStore, id, data, options);
    const held = await peerStore.get(id, options).then(
      (p) => p.addresses.length,
      () => 0,
    );
    return merge.call(peerStore, id, within(data, Math.max(0, max - held)), options);
  };
}
