// Must precede libp2p: Node 20 lacks Promise.withResolvers.
import '../../runtime/polyfills.js';
import { startEchoHost } from './raw-libp2p.js';

/*
 * A bare libp2p host (the node's stack, nothing of DMS) serving the echo protocol, in a process
 * of its own: `node --import tsx bench/lib/echo-host.ts`. It prints its addresses as one JSON
 * line and stops when its standard input closes. bench/lib/raw-libp2p.ts dials it, so the raw
 * round trip crosses two processes as a round trip between two nodes does.
 */
const host = await startEchoHost();
process.stdout.write(`${JSON.stringify({ addrs: host.getMultiaddrs().map(String) })}\n`);
process.stdin.resume();
process.stdin.once('end', () => {
  void Promise.resolve(host.stop()).finally(() => process.exit(0));
});
