import { Agent, request } from 'node:http';

/**
 * The benches' REST client: node:http on kept connections (as many as a bench's callers per
 * node), not fetch. The load generator shares the machine's two cores with the nodes it
 * measures, and fetch (undici's WHATWG layers) cost 410–655 µs of CPU per job submitted, half of
 * what the node spent on the job; node:http costs 65–170 µs (bench/RESULTS.md, bench:vitals,
 * fourteenth session).
 */
const agent = new Agent({ keepAlive: true, maxSockets: 64 });

/** One REST call under /api/v1 to a bench's node, its JSON answer; anything but a 2xx throws, naming the call. */
export function call(node: { url: string }, method: string, path: string, body?: unknown): Promise<any> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = request(
      `${node.url}/api/v1${path}`,
      { method, agent, headers: payload === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const status = res.statusCode ?? 0;
          if (status < 200 || status >= 300) return reject(new Error(`${method} ${path} answered ${status}: ${text}`));
          try {
            resolve(text === '' ? undefined : JSON.parse(text));
          } catch (e) {
            reject(new Error(`${method} ${path} answered ${status} with a body that is not JSON: ${String(e)}`));
          }
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

