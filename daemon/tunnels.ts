/**
 * Ports and tunnels (README "Ports and tunnels"), wired into the node: as a provider, the
 * `/dms/tunnel/1.0.0` handler that lets a job's requester through to its declared ports; as a
 * requester, the local listeners of `dms jobs port-forward`, each connection tunnelled to the
 * job wherever it runs now. The listeners live in the node, not in the CLI: the node's libp2p
 * key is what the provider recognises, and it never leaves the node. The listeners last as long
 * as their job: the actor `forwards` hears from the orchestrator when a job with ports ends.
 */
import { randomUUID } from 'node:crypto';
import { connect, createServer, isIP, type Server, type Socket } from 'node:net';
import Docker from 'dockerode';
import { containerAddress } from '../actors/executors/container-spec.js';
import type { GrantRegistry } from '../actors/ensembles/grants.js';
import { ForwardBehaviors, FORWARDS_INBOX, FORWARDS_INTERNAL_CAPABILITY, ForwardsEndedPayload } from '../behaviors/jobs/forwards.js';
import { isTerminal, type Job } from '../behaviors/jobs/schema.js';
import { defineBehavior } from '../runtime/behavior.js';
import { rememberNewest } from '../runtime/bounded-map.js';
import { type ActorContext, defineActor, makeActor } from '../runtime/component.js';
import { type Config, isLoopback } from '../runtime/config.js';
import { DmsError, errorText, invalid, notFound } from '../runtime/errors.js';
import type { Logger } from '../runtime/log.js';
import type { Libp2pTransport } from '../runtime/network/libp2p-transport.js';
import type { ActorSystem } from '../runtime/system.js';
// Types only: the protocol's code (and libp2p's) is loaded when a network is there to use it.
import type { TunnelRequest, TunnelServer, TunnelTarget } from '../runtime/network/tunnel.js';
import type { Storage } from '../storage/index.js';
import type { Forward, PortForwarder } from '../http/routes/ports.js';

export interface TunnelsOptions {
  host: string;
  /** Where the actor `forwards` is bound, which hears when jobs end. */
  system: ActorSystem;
  /** Who hosts the parts of ensembles, by their requesters' grants: let through to those parts' ports. */
  ensembles?: EnsembleHosts;
  config: Config;
  storage: Storage;
  log: Logger;
  transport?: Libp2pTransport;
  docker?: Docker;
}

/** Where this node reaches a job of its own: its container's address on its network. */
async function localTarget(docker: Docker, job: Job, port: number): Promise<TunnelTarget> {
  if (job.status !== 'running' || !job.container_id) throw new DmsError('conflict', `job ${job.id} is ${job.status}, not running: nothing listens on its ports`);
  if (job.executor !== 'docker') throw new DmsError('conflict', `job ${job.id} runs with the ${job.executor} executor, which has no network to reach`);
  let host: string | undefined;
  try {
    host = await containerAddress(docker, job.container_id);
  } catch (e) {
    throw new DmsError('unavailable', `job ${job.id}'s container cannot be inspected: ${errorText(e)}`, { cause: e });
  }
  if (!host) throw new DmsError('unavailable', `job ${job.id}'s container has no network address`);
  return { host, port };
}

/** Whom an ensemble's tunnels are open to: the ensemble-net actor's grants (README "Names between parts"). */
export type EnsembleHosts = Pick<GrantRegistry, 'hostsPart'>;

/**
 * The provider's check of a tunnel request: the job runs here, the port is declared, and the
 * opener placed the job or, for a part of an ensemble, hosts another part of it by the
 * requester's unexpired grant. The header stays `{job_id, port}`: the ensemble and its
 * requester are read from the job's own record, never taken from the opener.
 */
export function authorizer(host: string, storage: Storage, docker: Docker, ensembles?: EnsembleHosts) {
  return async (peer: string, req: TunnelRequest): Promise<TunnelTarget> => {
    const job = await storage.jobs.get(req.job_id);
    const here = job !== null && (job.node === null || job.node === host);
    // A job of this node's own has its grants under this node's name.
    const member = (j: Job) => j.ensemble !== null && j.ensemble !== undefined && (ensembles?.hostsPart(j.requester ?? host, j.ensemble, peer) ?? false);
    // One answer for unknown and someone else's: a stranger learns nothing of which jobs exist.
    if (!job || !here || (job.requester !== peer && !member(job))) {
      throw new DmsError('forbidden', `job ${req.job_id} is not a job peer ${peer} placed on this node, nor a host of its ensemble by an unexpired grant`);
    }
    if (!job.ports.includes(req.port)) throw new DmsError('forbidden', `job ${req.job_id} does not declare port ${req.port} (its ports: ${job.ports.join(', ') || 'none'})`);
    return localTarget(docker, job, req.port);
  };
}

interface OpenForward extends Forward {
  server: Server;
  sockets: Set<Socket>;
}

/**
 * Jobs whose end arrived lately: a forward whose listener was still being opened when its job
 * ended is refused rather than left open. A job's end is stored before it is told, so a job that
 * ended longer ago is refused on its status.
 */
const JUST_ENDED = 1024;

/** The local listeners of `dms jobs port-forward`, bounded (`tunnel.max_forwards`). */
export class PortForwards implements PortForwarder {
  private readonly forwards = new Map<string, OpenForward>();
  private readonly justEnded = new Map<string, true>();
  /** Listeners being opened: they count against the bound, or requests arriving together all pass it. */
  private opening = 0;

  constructor(private readonly opts: TunnelsOptions & { docker: Docker }) {}

  list(jobId?: string): Forward[] {
    return [...this.forwards.values()].filter((f) => !jobId || f.job_id === jobId).map(({ id, job_id, port, local }) => ({ id, job_id, port, local }));
  }

  async open(job: Job, port: number, local?: string): Promise<Forward> {
    if (isTerminal(job.status)) throw new DmsError('conflict', `job ${job.id} has ended (${job.status}): nothing listens on its ports any more`);
    if (!job.ports.includes(port)) throw invalid(`job ${job.id} does not declare port ${port} (its ports: ${job.ports.join(', ') || 'none'})`);
    const max = this.opts.config.tunnel.max_forwards;
    if (this.forwards.size + this.opening >= max) throw new DmsError('overloaded', `this node already holds ${max} forwards (tunnel.max_forwards): stop one first`);
    const { host, port: localPort } = parseLocal(local);
    if (!this.opts.config.tunnel.forward_any_address && !isLoopback(host)) {
      throw invalid(
        `local: ${host} is not a loopback address: a forward there lets anyone who reaches this machine connect to the job's port, with no credentials; listen on 127.0.0.1, or set tunnel.forward_any_address`,
      );
    }
    const server = createServer();
    // Each connection holds a tunnel at the provider, which bounds them per peer too.
    server.maxConnections = this.opts.config.tunnel.max_streams_per_peer;
    const forward: OpenForward = { id: randomUUID(), job_id: job.id, port, local: '', server, sockets: new Set() };
    server.on('connection', (socket) => this.connection(forward, socket));
    this.opening++;
    try {
      await new Promise<void>((resolve, reject) => {
        server.once('error', (e) => reject(new DmsError('conflict', `cannot listen on ${host}:${localPort}: ${errorText(e)}`)));
        server.listen(localPort, host, () => resolve());
      });
    } finally {
      this.opening--;
    }
    if (this.justEnded.has(job.id)) {
      server.close();
      throw new DmsError('conflict', `job ${job.id} has ended: nothing listens on its ports any more`);
    }
    server.on('error', (e) => this.opts.log.warn({ forward: forward.id, err: errorText(e) }, 'port-forward listener failed'));
    const address = server.address();
    forward.local = typeof address === 'object' && address ? `${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}` : String(address);
    this.forwards.set(forward.id, forward);
    this.opts.log.info({ forward: forward.id, job_id: job.id, port, local: forward.local }, 'port-forward opened');
    return this.list().find((f) => f.id === forward.id)!;
  }

  close(jobId: string, id: string): Forward {
    const forward = this.forwards.get(id);
    if (!forward || forward.job_id !== jobId) throw notFound(`job ${jobId} has no forward ${id}`);
    this.forwards.delete(id);
    forward.server.close();
    for (const s of forward.sockets) s.destroy();
    return { id, job_id: forward.job_id, port: forward.port, local: forward.local };
  }

  /** The job ended: its forwards stop, connections and all, and no longer count against the bound. */
  ended(jobId: string): void {
    rememberNewest(this.justEnded, jobId, true, JUST_ENDED);
    const closed = [...this.forwards.values()].filter((f) => f.job_id === jobId).map((f) => this.close(jobId, f.id));
    if (closed.length > 0) this.opts.log.info({ job_id: jobId, forwards: closed.length }, 'port-forwards of an ended job stopped');
  }

  stop(): void {
    for (const f of [...this.forwards.values()]) this.close(f.job_id, f.id);
  }

  private connection(forward: OpenForward, socket: Socket): void {
    forward.sockets.add(socket);
    socket.on('close', () => forward.sockets.delete(socket));
    socket.on('error', () => undefined);
    socket.pause();
    this.tunnel(forward, socket).catch((e: unknown) => {
      this.opts.log.warn({ forward: forward.id, job_id: forward.job_id, err: errorText(e) }, 'port-forward connection failed');
      socket.destroy();
    });
  }

  /** Read afresh for every connection: a job placed again elsewhere is followed there. */
  private async tunnel(forward: OpenForward, socket: Socket): Promise<void> {
    const job = await this.opts.storage.jobs.get(forward.job_id);
    if (!job) throw notFound(`job ${forward.job_id} no longer exists`);
    const idleMs = this.opts.config.tunnel.idle_timeout_ms;
    if (job.node === null || job.node === this.opts.host) {
      const target = await localTarget(this.opts.docker, job, forward.port);
      const upstream = connect(target);
      upstream.once('connect', () => {
        socket.resume();
        socket.pipe(upstream).pipe(socket);
      });
      upstream.setTimeout(idleMs, () => upstream.destroy());
      upstream.on('error', () => socket.destroy());
      upstream.on('close', () => socket.destroy());
      socket.on('close', () => upstream.destroy());
      return;
    }
    if (!this.opts.transport) throw new DmsError('unavailable', `job ${job.id} runs on ${job.node}, and this node has no network`);
    if (job.status !== 'running') throw new DmsError('conflict', `job ${job.id} is ${job.status}, not running`);
    const [{ openTunnel, pipe }, { peerIdFromString }] = await Promise.all([import('../runtime/network/tunnel.js'), import('@libp2p/peer-id')]);
    const { stream, rest } = await openTunnel(this.opts.transport.node, peerIdFromString(job.node), { job_id: job.id, port: forward.port });
    if (socket.destroyed) return stream.abort(new Error('the local connection closed'));
    pipe(socket, stream, rest, idleMs);
    socket.resume();
  }
}

/** `ADDR:PORT`, `ADDR` or `PORT`: an IP literal (or localhost) and a port; default 127.0.0.1 and any free port. */
function parseLocal(local: string | undefined): { host: string; port: number } {
  if (!local) return { host: '127.0.0.1', port: 0 };
  if (/^\d{1,5}$/.test(local) && Number(local) <= 65535) return { host: '127.0.0.1', port: Number(local) };
  const m = /^(?:\[([^\]]{1,64})\]|([^:\[\]]{1,64}))(?::(\d{1,5}))?$/.exec(local);
  const host = m?.[1] ?? m?.[2] ?? '';
  const port = m?.[3] === undefined ? 0 : Number(m[3]);
  if (!m || (host !== 'localhost' && isIP(host) === 0) || port > 65535) throw invalid(`local: '${local.slice(0, 100)}' is not ADDR:PORT (an IP address and a port from 0 to 65535, e.g. 127.0.0.1:8080)`);
  return { host, port };
}

/** Hears from this node's orchestrator that a job with ports ended (actors/orchestrator/reports.ts). */
const ForwardsActor = defineActor({
  inbox: FORWARDS_INBOX,
  // One synchronous handler: nothing to interleave.
  concurrency: 1,
  create: ({ deps }: ActorContext<{ forwards: PortForwards }>) => ({
    behaviors: [
      defineBehavior({
        name: ForwardBehaviors.ended,
        payload: ForwardsEndedPayload,
        capability: FORWARDS_INTERNAL_CAPABILITY,
        handle: ({ payload }) => deps.forwards.ended(payload.job_id),
      }),
    ],
  }),
});

export interface Tunnels {
  forwards: PortForwards;
  server?: TunnelServer;
  stop(): Promise<void>;
}

export async function startTunnels(opts: TunnelsOptions): Promise<Tunnels> {
  const docker = opts.docker ?? new Docker();
  const t = opts.config.tunnel;
  const server = opts.transport
    ? await (await import('../runtime/network/tunnel.js')).TunnelServer.attach(opts.transport.node, {
        authorize: authorizer(opts.host, opts.storage, docker, opts.ensembles),
        maxPerPeer: t.max_streams_per_peer,
        maxTotal: t.max_streams,
        idleMs: t.idle_timeout_ms,
        log: opts.log,
      })
    : undefined;
  const forwards = new PortForwards({ ...opts, docker });
  const actor = await makeActor(opts.system, ForwardsActor, { forwards });
  await actor.start();
  return {
    forwards,
    server,
    stop: async () => {
      await actor.stop();
      forwards.stop();
    },
  };
}
