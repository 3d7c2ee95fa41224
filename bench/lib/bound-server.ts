/**
 * The machine's bound for a signed REST invoke (issue 25): what node:http can serve on this
 * machine when each request does only the work an invoke cannot skip — parse the envelope (the
 * node's own lossless JSON and schema, runtime/wire/envelope.ts), check its Ed25519 signature
 * (runtime/crypto/signing.ts), and sign a reply envelope — with one worker process per core, the
 * most a machine gives one service. No actors, no mailbox, no replay cache, no capability
 * checks: whatever the node serves below this is its own cost.
 *
 * Run as `node --import tsx bench/lib/bound-server.ts`; prints its port, then serves until
 * SIGTERM. The primary only forks; each worker listens on the shared port.
 */
import '../../runtime/polyfills.js';
import cluster from 'node:cluster';
import { createServer } from 'node:http';
import { availableParallelism } from 'node:os';
import { signEnvelope, verifyEnvelope } from '../../runtime/crypto/signing.js';
import { KeyPair } from '../../runtime/crypto/keys.js';
import { raiseMallocThresholds } from '../../runtime/malloc-thresholds.js';
import { nextNonce } from '../../runtime/time.js';
import { encodeEnvelope, encodePayload, type Envelope, parseEnvelope } from '../../runtime/wire/envelope.js';

if (cluster.isPrimary) {
  const workers = Array.from({ length: availableParallelism() }, () => cluster.fork());
  // Port 0 in every worker is one port shared by all of them (the primary holds it).
  const port = await new Promise<number>((resolve) => cluster.once('listening', (_w, address) => resolve(address.port)));
  process.stdout.write(`${port}\n`);
  // The workers are gone before the primary is: a worker closing its server tells the primary,
  // and one that found it gone died of EPIPE, printing its trace under the bench's figures.
  process.on('SIGTERM', () => {
    void Promise.all(workers.map((w) => new Promise((r) => (w.isDead() ? r(undefined) : (w.once('exit', r), w.kill('SIGTERM')))))).then(() => process.exit(0));
  });
} else {
  // The node keeps freed heap once it serves (runtime/malloc-thresholds.ts): so does the bound.
  raiseMallocThresholds();
  const key = KeyPair.generate();
  const hello = encodePayload({ hello: 'world' });
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        let status = 200;
        let out: string;
        try {
          const request = parseEnvelope(Buffer.concat(chunks).toString('utf8'));
          await verifyEnvelope(request);
          const reply: Envelope = {
            to: request.from,
            be: request.opt.cont ?? request.be,
            from: { id: key.id, did: key.did, addr: { host: request.to.addr.host, inbox: request.to.addr.inbox } },
            nonce: nextNonce(),
            opt: { exp: request.opt.exp },
            msg: hello,
          };
          out = encodeEnvelope(await signEnvelope(reply, key));
        } catch (e) {
          status = 400;
          out = JSON.stringify({ error: String(e) });
        }
        res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
        res.end(out);
      })();
    });
  });
  server.keepAliveTimeout = 65_000;
  server.listen(0, '127.0.0.1');
  // Nothing to finish: the bench has read its figures when it stops the bound.
  process.on('SIGTERM', () => process.exit(0));
}
