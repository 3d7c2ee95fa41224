import '../runtime/polyfills.js';
import { DmsClient } from '../client/client.js';
import { DevEvents, startCluster, stopCluster } from '../test/helpers/network.js';
const nodes = await startCluster(5, { node: () => ({ args: ['--dev'] }) });
const [r, ...ps] = nodes;
const call = async (n: any, m: string, p: string, b?: unknown) => (await fetch(`${n.url}/api/v1${p}`, { method: m, headers: b ? { 'content-type': 'application/json' } : {}, body: b ? JSON.stringify(b) : undefined })).json();
await call(r, 'PUT', '/device/config', { onboarded: { cpu: 0.04, memory: '4MiB' } });
for (const p of ps) await call(p, 'PUT', '/device/config', { onboarded: { cpu: 2, memory: '4GiB' } });
const c = new DmsClient({ url: r.url });
while (!ps.every(async () => true) || (await c.peers()).length < 4) await new Promise((x) => setTimeout(x, 200));
const spec = { name: 'b', image: 'none', executor: 'null', resources: { cpu: 0.05, memory: '8MiB' } };
for (let i = 0; i < 20; i++) { const j: any = await call(r, 'POST', '/jobs', spec); while ((await call(r, 'GET', `/jobs/${j.id}`)).status === 'pending') await new Promise((x) => setTimeout(x, 5)); }
const dev = await DevEvents.open(r.url, ['transition', 'envelope']);
const devs = await Promise.all(ps.map((p) => DevEvents.open(p.url, ['envelope'])));
const t0 = performance.now();
const j: any = await call(r, 'POST', '/jobs', spec);
while ((await call(r, 'GET', `/jobs/${j.id}`)).status === 'pending') await new Promise((x) => setTimeout(x, 2));
console.log('wall', performance.now() - t0);
await new Promise((x) => setTimeout(x, 300));
const base = Date.parse(j.created_at);
for (const e of dev.events as any[]) {
  if (e.type === 'transition' && e.instance === j.id) console.log(Date.parse(e.at) - base, e.machine, e.from, '->', e.to, e.event);
  if (e.type === 'envelope' && /deployment|gather|job\/(started|accept)|executor\/start/.test(e.behavior)) console.log(Date.parse(e.at) - base, e.direction, e.actor, e.behavior.slice(0, 40), e.from?.host?.slice(-4), '->', e.to?.host?.slice(-4), e.reply_ms ?? '');
}
for (const d of devs) for (const e of d.events as any[]) if (/deployment\/bid|gather|resources/.test(e.behavior)) console.log('P', Date.parse(e.at) - base, e.direction, e.actor, e.behavior.slice(0, 30), e.reply_ms ?? '');
await stopCluster(nodes);
process.exit(0);
