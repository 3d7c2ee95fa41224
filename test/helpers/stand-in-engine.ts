/**
 * A stand-in Docker engine on a unix socket, for what a real one will not do on demand: leave
 * requests unanswered. It answers the calls the Docker executor makes (image, container, network,
 * wait, logs, archive, events) with just enough to go on; every request whose "METHOD /path"
 * (the API version prefix left out) matches `hang` is held open with no answer, as a wedged
 * engine holds it. Containers never run anything: one "exits" when it is stopped or removed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Docker from 'dockerode';

interface StandInContainer {
  id: string;
  labels: Record<string, string>;
  /** The network it was created on (HostConfig.NetworkMode), as the engine reports it back. */
  networkMode: string;
  exitCode: number | null;
  /** Waits answered and held until the container exits: each then gets the exit code. */
  waits: Set<ServerResponse>;
  /** Log follows answered and held until the container exits. */
  follows: Set<ServerResponse>;
}

export class StandInEngine {
  /** Requests matching this go unanswered ("POST /containers/create", "GET /images/x/json"...). */
  hang: RegExp | null = null;
  /** Whether images are present; when not, a pull is answered with `pullEvents` and then as `pullStalls` says. */
  imagePresent = true;
  /** The progress lines a pull answers with. */
  pullEvents: object[] = [{ status: 'Pulling from dms-test/busybox' }];
  /** After its events, the pull says nothing more and never ends. */
  pullStalls = false;
  /** Log follows stay open after their container exits, as a wedged engine's log copier may leave them. */
  followsOutliveExit = false;
  /** Every request seen, as "METHOD /path" with its query. */
  readonly seen: string[] = [];
  readonly containers = new Map<string, StandInContainer>();
  private readonly open = new Set<ServerResponse>();
  private made = 0;
  readonly dir = mkdtempSync(join(tmpdir(), 'dms-stand-in-engine-'));
  readonly socketPath = join(this.dir, 'docker.sock');
  private readonly server = createServer((req, res) => {
    this.open.add(res);
    res.on('close', () => this.open.delete(res));
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => this.route(req, body, res));
  });

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(this.socketPath, resolve));
    return this;
  }

  /** A client of this engine. */
  client(): Docker {
    return new Docker({ socketPath: this.socketPath });
  }

  /** Whether a request whose "METHOD /path" matches `re` was seen. */
  asked(re: RegExp): boolean {
    return this.seen.some((r) => re.test(r));
  }

  close(): void {
    for (const res of this.open) res.destroy();
    this.server.closeAllConnections();
    this.server.close();
    rmSync(this.dir, { recursive: true, force: true });
  }

  private route(req: IncomingMessage, body: string, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://engine');
    const path = url.pathname.replace(/^\/v[\d.]+/, '');
    const asked = `${req.method} ${path}`;
    this.seen.push(`${asked}${url.search}`);
    if (this.hang?.test(asked)) return;
    const json = (status: number, value: unknown): void => void res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
    const none = (status = 204): void => void res.writeHead(status).end();
    const container = /^\/containers\/([^/]+)(?:\/(\w+))?$/.exec(path);
    const c = container ? this.containers.get(container[1]!) : undefined;
    if (path === '/_ping') return void res.writeHead(200, { 'content-type': 'text/plain' }).end('OK');
    if (path === '/version') return json(200, { Version: '27.0.0-stand-in', ApiVersion: '1.45' });
    if (path === '/events') return this.hold(res, 'application/json');
    if (req.method === 'GET' && path === '/containers/json') return json(200, []);
    if (req.method === 'GET' && path === '/networks') return json(200, []);
    if (/^\/images\/.+\/json$/.test(path)) return this.imagePresent ? json(200, { Id: 'sha256:stand-in' }) : json(404, { message: 'No such image' });
    if (req.method === 'POST' && path === '/images/create') return this.pull(res);
    if (req.method === 'POST' && path === '/containers/create') {
      const id = `standin${String(++this.made).padStart(57, '0')}`;
      const spec = JSON.parse(body || '{}') as { Labels?: Record<string, string>; HostConfig?: { NetworkMode?: string } };
      this.containers.set(id, { id, labels: spec.Labels ?? {}, networkMode: spec.HostConfig?.NetworkMode ?? 'bridge', exitCode: null, waits: new Set(), follows: new Set() });
      return json(201, { Id: id, Warnings: [] });
    }
    if (path.startsWith('/networks/')) return req.method === 'DELETE' ? json(404, { message: 'no such network' }) : json(201, { Id: 'stand-in-network' });
    if (container && !c) return json(404, { message: `No such container: ${container[1]}` });
    if (!c || !container) return json(404, { message: `no ${asked} here` });
    switch (`${req.method} ${container[2] ?? ''}`) {
      case 'POST start':
        return none();
      case 'GET json':
        return json(200, {
          Id: c.id,
          Config: { Labels: c.labels },
          State: { Status: c.exitCode === null ? 'running' : 'exited', ExitCode: c.exitCode ?? 0, OOMKilled: false, StartedAt: new Date().toISOString() },
          HostConfig: { Memory: 0, NetworkMode: c.networkMode },
        });
      case 'POST wait':
        if (c.exitCode !== null) return json(200, { StatusCode: c.exitCode });
        // As the engine does: the answer's head at once, its body when the container exits.
        return this.hold(res, 'application/json', c.waits);
      case 'GET logs':
        if (c.exitCode !== null) return void res.writeHead(200, { 'content-type': 'application/vnd.docker.multiplexed-stream' }).end();
        return this.hold(res, 'application/vnd.docker.multiplexed-stream', c.follows);
      case 'GET archive':
        return this.hold(res, 'application/x-tar');
      case 'POST stop':
      case 'POST kill':
        this.exit(c, 143);
        return none();
      case 'DELETE ':
        this.exit(c, 137);
        this.containers.delete(c.id);
        return none();
      default:
        return json(404, { message: `no ${asked} here` });
    }
  }

  /** Answered at once, its body held: until the container exits, or for good. */
  private hold(res: ServerResponse, type: string, until?: Set<ServerResponse>): void {
    res.writeHead(200, { 'content-type': type });
    res.flushHeaders();
    until?.add(res);
  }

  private exit(c: StandInContainer, code: number): void {
    if (c.exitCode !== null) return;
    c.exitCode = code;
    for (const res of c.waits) res.end(JSON.stringify({ StatusCode: code }));
    if (!this.followsOutliveExit) for (const res of c.follows) res.end();
    c.waits.clear();
    c.follows.clear();
  }

  private pull(res: ServerResponse): void {
    res.writeHead(200, { 'content-type': 'application/json' });
    for (const ev of this.pullEvents) res.write(`${JSON.stringify(ev)}\n`);
    if (this.pullStalls) return;
    this.imagePresent = true;
    res.end();
  }
}
