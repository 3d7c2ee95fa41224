/**
 * What libp2p's refusal to listen means, per address. libp2p throws one
 * UnsupportedListenAddressesError whose only structure is its text: a preamble about its own
 * `transportManager.faultTolerance` setting, then `  <multiaddr>: <error and stack>` for each
 * address. A person starting a node needs the address and the reason, not libp2p's knobs.
 */

export interface ListenFailure {
  /** The multiaddr that could not be bound, as configured. */
  address: string;
  /** Why, in a few words: "address in use", "permission denied", … */
  reason: string;
}

const REASONS: Record<string, string> = {
  EADDRINUSE: 'address in use',
  EADDRNOTAVAIL: 'no such address on this machine',
  EACCES: 'permission denied',
  EPERM: 'permission denied',
};

// "  /ip4/0.0.0.0/tcp/9000: Error: listen EADDRINUSE: address already in use 0.0.0.0:9000"
const ENTRY = /^\s*(\/\S+?): (.*)$/;

/**
 * The addresses a libp2p listen error names, each with its reason; empty when `error` (or
 * its `cause`) is not that error, so callers can pass anything and rephrase only a match.
 */
export function listenFailures(error: unknown): ListenFailure[] {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 4; e = e.cause, depth++) {
    if (e.name !== 'UnsupportedListenAddressesError') continue;
    const out: ListenFailure[] = [];
    for (const line of e.message.split('\n')) {
      const m = ENTRY.exec(line);
      if (m) out.push({ address: m[1], reason: reasonOf(m[2]) });
    }
    return out;
  }
  return [];
}

function reasonOf(text: string): string {
  const code = /\b(E[A-Z]+)\b/.exec(text)?.[1];
  if (code && REASONS[code]) return REASONS[code];
  // libp2p's own placeholder for an address no transport accepted (e.g. /udp without QUIC).
  if (/UnsupportedListenAddress/.test(text) || text.trim() === '') return 'no transport for this address';
  return text.replace(/^Error: /, '').trim();
}
