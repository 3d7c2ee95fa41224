/**
 * The ensemble network actor (inbox `ensemble-net`, README "Names between parts"): makes
 * `<part>.internal:<port>` reach that part from inside every other part, wherever each runs.
 *
 * Requesters tell it who hosts their ensembles' parts (`members`, kept in ./grants.ts, per
 * requester); this node's docker executor asks it, before creating a part's container, which
 * networks and names that container gets (`attach`), and says when the container is gone
 * (`detach`). For each ensemble with parts here it holds internal Docker networks
 * (./docker-networks.ts), every local part joined to them with `<other part>.internal` mapped
 * to a gateway address, and listens there on the other parts' ports (./listeners.ts). A
 * connection is carried to where the part runs at that moment, by the latest grant: this
 * node's container directly, another node's through a `/dms/tunnel/1.0.0` stream, which that
 * node lets in because the same requester's grant names this node as a host of the ensemble.
 */
import { connect, type Socket } from 'node:net';
import Docker from 'dockerode';
import type { Stream } from '@libp2p/interface';
import {
  ENSEMBLE_NET_INBOX,
  ENSEMBLE_NET_INTERNAL_CAPABILITY,
  EnsembleAttachSchema,
  type EnsembleAttach,
  type EnsembleAttachReply,
  EnsembleDetachSchema,
  EnsembleMembersSchema,
  EnsembleNetBehaviors,
  EnsembleRevokeSchema,
} from '../../behaviors/ensembles/schema.js';
import { DEPLOYMENT_CAPABILITY } from '../../behaviors/jobs/deployment.js';
import { defineBehavior, replyWhenDone } from '../../runtime/behavior.js';
import { ownKeys } from '../../runtime/capability/authority.js';
import { type ActorContext, defineActor } from '../../runtime/component.js';
import { DmsError, errorText } from '../../runtime/errors.js';
// Types only: the protocol's code (and libp2p's) is loaded when a part on another node is reached.
import type { TunnelRequest } from '../../runtime/network/tunnel.js';
import type { Envelope } from '../../runtime/wire/envelope.js';
import { ENSEMBLE_LABEL, JOB_LABEL, NODE_LABEL, PART_LABEL } from '../executors/container-spec.js';
import { answered, type Engine, ENGINE_ANSWER_MS, removeNetwork } from '../executors/engine.js';
import {
  answeredAbout,
  assignSlots,
  describeNetwork,
  ENSEMBLE_PARTS_LABEL,
  ENSEMBLE_REQUESTER_LABEL,
  type EnsembleNetwork,
  ensembleNetworkName,
  ensureNetwork,
  listEnsembleNetworks,
} from './docker-networks.js';
import { type Grant, type GrantLimits, GrantRegistry } from './grants.js';
import { type Listening, PartListeners } from './listeners.js';

export interface EnsembleNetDeps {
  /** Defaults to DOCKER_HOST, else /var/run/docker.sock. */
  docker?: Docker;
  /** Opens a tunnel to a part on another node (the node's libp2p); absent without a network. */
  tunnels?: { open(peer: string, req: TunnelRequest): Promise<{ stream: Stream; rest: Uint8Array }> };
  /** A carried connection with no byte either way for this long is closed (`tunnel.idle_timeout_ms`). */
  idleMs: number;
  /** Connections one name's listener carries at once (`tunnel.max_streams_per_peer`). */
  maxConnections: number;
  limits?: GrantLimits;
  /** How long an attach waits for the requester's grant naming the part (it is sent before the start; a late one is waited for). */
  attachWaitMs?: number;
  /** How long one answer of the Docker engine is waited for. */
  engineAnswerMs?: number;
}

export interface EnsembleNetApi {
  /** The grants held: what the tunnel check (daemon/tunnels.ts) consults. */
  grants: GrantRegistry;
  /** What listens now for the ensemble of `requester`, for tests and stats. */
  listening(requester: string, ensemble: string): Listening[];
}

const ATTACH_WAIT_MS = 5_000;
/** Expired grants close their listeners within this. */
const SWEEP_MS = 5_000;
const CONNECT_TIMEOUT_MS = 5_000;
// One answer of the engine (a network listed, made, looked at, removed) is waited for
// ENGINE_ANSWER_MS: an attach waits for at most two (what an earlier run left, then its
// network) within the executor's 30 s for it.
/** A look at what an earlier run left that the engine did not answer is tried again after this. */
const RECOVER_RETRY_MS = 30_000;

/** One ensemble with parts on this node. */
interface Local {
  requester: string;
  ensemble: string;
  /** The slot each part's name points into; fixed once a container's hosts file says so. */
  slots: Map<string, number>;
  networks: Map<number, EnsembleNetwork>;
  /** The local parts' jobs, with their part names. */
  attached: Map<string, string>;
  listeners: PartListeners;
}

export const EnsembleNetActor = defineActor({
  inbox: ENSEMBLE_NET_INBOX,
  // Handlers wait on the engine and on grants to come (an attach may wait for the members
  // envelope behind it in the mailbox), so several run at once; what they share is changed
  // under a per-ensemble queue (`serial`).
  concurrency: 'node',
  create: (ctx: ActorContext<EnsembleNetDeps>) => {
    const net = new EnsembleNet(ctx);
    return { behaviors: net.behaviors(), api: net.api(), start: () => net.start(), stop: () => net.stop() };
  },
});

const keyOf = (requester: string, ensemble: string) => `${requester} ${ensemble}`;

class EnsembleNet {
  private readonly grants: GrantRegistry;
  private readonly engine: Engine;
  private readonly locals = new Map<string, Local>();
  /** Job id → its ensemble's key, for detach. */
  private readonly jobs = new Map<string, string>();
  private readonly queues = new Map<string, Promise<unknown>>();
  private readonly own: (id: string) => boolean;
  private sweeper: NodeJS.Timeout | undefined;
  /**
   * What an earlier run left has been looked at (recover): every change waits for that, so none
   * races its sweep of empty networks. Until then `recovering` is the look under way, if any.
   */
  private recovered = false;
  private recovering: Promise<void> | undefined;
  private failedLooks = 0;
  private retry: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(private readonly ctx: ActorContext<EnsembleNetDeps>) {
    this.grants = new GrantRegistry(ctx.deps.limits);
    this.engine = { docker: ctx.deps.docker ?? new Docker(), answerMs: ctx.deps.engineAnswerMs ?? ENGINE_ANSWER_MS };
    this.own = ownKeys(ctx.system);
    this.grants.onChange((_grant, requester, ensemble) => {
      const k = keyOf(requester, ensemble);
      // Looked at once recovery is over: it may have taken the ensemble's networks back. A
      // recovery the engine did not answer said so itself.
      void this.whenRecovered()
        .then(
          async () => {
            if (this.locals.has(k)) await this.serial(k, () => this.reconcile(k));
          },
          () => undefined,
        )
        .catch((e: unknown) => ctx.log.warn({ ensemble, err: errorText(e) }, 'ensemble listeners not updated'));
    });
  }

  private get host(): string {
    return this.ctx.system.host;
  }

  api(): EnsembleNetApi {
    return { grants: this.grants, listening: (requester, ensemble) => this.locals.get(keyOf(requester, ensemble))?.listeners.list() ?? [] };
  }

  behaviors() {
    return [
      defineBehavior({
        name: EnsembleNetBehaviors.members,
        payload: EnsembleMembersSchema,
        capability: DEPLOYMENT_CAPABILITY,
        handle: ({ env, payload }) => {
          const requester = this.requesterOf(env);
          const { grant, accepted } = this.grants.put(requester, payload);
          this.ctx.log.debug({ requester, ensemble: payload.ensemble, version: grant.version, accepted }, 'ensemble members');
          return { ensemble: grant.ensemble, version: grant.version, expires_at: grant.expires_at, accepted };
        },
      }),
      defineBehavior({
        name: EnsembleNetBehaviors.revoke,
        payload: EnsembleRevokeSchema,
        capability: DEPLOYMENT_CAPABILITY,
        handle: ({ env, payload }) => ({ ensemble: payload.ensemble, revoked: this.grants.revoke(this.requesterOf(env), payload.ensemble) }),
      }),
      defineBehavior({
        name: EnsembleNetBehaviors.attach,
        payload: EnsembleAttachSchema,
        capability: ENSEMBLE_NET_INTERNAL_CAPABILITY,
        noReply: true,
        handle: (c) => replyWhenDone(c, () => this.attach(c.payload)),
      }),
      defineBehavior({
        name: EnsembleNetBehaviors.detach,
        payload: EnsembleDetachSchema,
        capability: ENSEMBLE_NET_INTERNAL_CAPABILITY,
        noReply: true,
        handle: (c) => replyWhenDone(c, async () => ({ detached: await this.detach(c.payload.job_id) })),
      }),
    ];
  }

  async start(): Promise<void> {
    this.sweeper = setInterval(() => this.grants.sweep(), SWEEP_MS);
    this.sweeper.unref();
    // Not waited for: the node serves while the engine answers, and every change waits for it
    // (whenRecovered). Waited for, an engine that never answered held start-up for ever, and one
    // that did cost every start ~30 ms. A node without an engine still starts: its parts would
    // fail at their own start, saying why.
    void this.whenRecovered().catch(() => undefined);
  }

  /**
   * Settles once what an earlier run left has been looked at; rejects, naming the engine, when
   * this look at it was not answered. Each call after such a look tries again (one at a time),
   * and so does a timer, so a node whose parts kept running gets their networks back once the
   * engine answers, attach or not.
   */
  private whenRecovered(): Promise<void> {
    if (this.recovered) return Promise.resolve();
    this.recovering ??= this.recover().then(
      () => {
        this.recovered = true;
        clearTimeout(this.retry);
        if (this.failedLooks > 0) this.ctx.log.info({ tries: this.failedLooks + 1 }, 'ensemble networks left by an earlier run looked at: the Docker engine answers');
      },
      (e: unknown) => {
        this.recovering = undefined;
        // Said once: a node without an engine at all would say it every try.
        const level = this.failedLooks++ === 0 ? 'warn' : 'debug';
        this.ctx.log[level]({ err: errorText(e) }, 'ensemble networks left by an earlier run not looked at: no ensemble part starts here until the Docker engine answers');
        clearTimeout(this.retry);
        if (!this.stopped) this.retry = setTimeout(() => void this.whenRecovered().catch(() => undefined), RECOVER_RETRY_MS).unref();
        const why = e instanceof DmsError ? e.message : `the Docker engine failed: ${errorText(e)}`;
        throw new DmsError('unavailable', `the ensemble networks an earlier run of this node left are not looked at yet: ${why}`, { cause: e });
      },
    );
    return this.recovering;
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retry);
    clearInterval(this.sweeper);
    // The networks stay: running parts keep them across a restart, and recover() finds them.
    for (const l of this.locals.values()) l.listeners.closeAll();
  }

  /**
   * The node that speaks for the ensemble: the sending peer (the kernel checked it), or this
   * node for its own actors. Anyone else naming this node (a REST caller with a key of its own)
   * would otherwise speak for the node's own ensembles.
   */
  private requesterOf(env: Envelope): string {
    const host = env.from.addr.host || this.host;
    if (this.ctx.system.isHere(host) && !this.own(env.from.id)) throw new DmsError('forbidden', 'ensemble grants naming this node come from its own actors only');
    return this.ctx.system.isHere(host) ? this.host : host;
  }

  private async attach(a: EnsembleAttach): Promise<EnsembleAttachReply> {
    const requester = a.requester ?? this.host;
    const grant = await this.grantNaming(requester, a);
    const unmade = (e: unknown) => new DmsError('unavailable', `ensemble ${a.ensemble}'s network cannot be made on this node: ${errorText(e)}`, { cause: e });
    await this.whenRecovered().catch((e: unknown) => {
      throw unmade(e);
    });
    const k = keyOf(requester, a.ensemble);
    return this.serial(k, async () => {
      let local = this.locals.get(k);
      if (!local) {
        local = { requester, ensemble: a.ensemble, slots: new Map(), networks: new Map(), attached: new Map(), listeners: this.listenersFor(k) };
        this.locals.set(k, local);
      }
      local.attached.set(a.job_id, a.part);
      this.jobs.set(a.job_id, k);
      try {
        local.slots = assignSlots(grant.parts, local.slots);
        for (const slot of new Set(local.slots.values())) {
          if (local.networks.has(slot)) continue;
          const parts = [...local.slots].filter(([, s]) => s === slot).map(([p]) => p);
          local.networks.set(slot, await ensureNetwork(this.engine, this.host, requester, a.ensemble, slot, parts));
        }
        await this.reconcile(k);
      } catch (e) {
        await this.forget(k, a.job_id);
        throw unmade(e);
      }
      const networks = [...local.networks.values()].sort((x, y) => x.slot - y.slot);
      const extra_hosts = grant.parts.filter((p) => p.part !== a.part).map((p) => `${p.part}.internal:${local.networks.get(local.slots.get(p.part)!)!.gateway}`);
      this.ctx.log.info({ ensemble: a.ensemble, part: a.part, job_id: a.job_id, networks: networks.map((n) => n.name) }, 'ensemble part attached');
      return { networks: networks.map((n) => n.name), extra_hosts };
    });
  }

  /** The requester's grant, once it lists this job as this part: sent before the start, and waited for a little when late. */
  private grantNaming(requester: string, a: EnsembleAttach): Promise<Grant> {
    const names = (g: Grant | undefined) => g?.parts.some((p) => p.job_id === a.job_id && p.part === a.part) ?? false;
    const now = this.grants.get(requester, a.ensemble);
    if (names(now)) return Promise.resolve(now!);
    return new Promise((resolve, reject) => {
      const waitMs = this.ctx.deps.attachWaitMs ?? ATTACH_WAIT_MS;
      const timer = setTimeout(() => {
        stop();
        reject(new DmsError('conflict', `no grant from ${requester === this.host ? 'this node' : `requester ${requester}`} lists job ${a.job_id} as part ${a.part} of ensemble ${a.ensemble} (waited ${waitMs} ms): its requester sends one before starting a part`));
      }, waitMs);
      const stop = this.grants.onChange((g, r, e) => {
        if (r !== requester || e !== a.ensemble || !names(g)) return;
        clearTimeout(timer);
        stop();
        resolve(g!);
      });
    });
  }

  private async detach(jobId: string): Promise<boolean> {
    // A part that kept running is known once recovery took its network back.
    await this.whenRecovered();
    const k = this.jobs.get(jobId);
    if (!k) return false;
    await this.serial(k, () => this.forget(k, jobId));
    return true;
  }

  /** Drops the job; the ensemble's last local part takes its listeners and networks with it. */
  private async forget(k: string, jobId: string): Promise<void> {
    const local = this.locals.get(k);
    this.jobs.delete(jobId);
    if (!local) return;
    local.attached.delete(jobId);
    if (local.attached.size > 0) return;
    local.listeners.closeAll();
    this.locals.delete(k);
    for (const n of local.networks.values()) {
      const removed = await removeNetwork(this.engine, n.name).catch(() => false);
      if (!removed) this.ctx.log.warn({ network: n.name }, 'ensemble network still in use: left for the next start to remove');
    }
    this.ctx.log.info({ ensemble: local.ensemble }, 'ensemble has no part here any more: its networks are removed');
  }

  /** Listens for every part of the grant with ports, at its slot's gateway; no grant (expired, revoked): for none. */
  private async reconcile(k: string): Promise<void> {
    const local = this.locals.get(k);
    if (!local) return;
    const grant = this.grants.get(local.requester, local.ensemble);
    const wanted: Listening[] = [];
    for (const p of grant?.parts ?? []) {
      const net = local.networks.get(local.slots.get(p.part) ?? -1);
      // A part the first grant did not have has no name in the containers' hosts files.
      if (!net) continue;
      for (const port of p.ports) wanted.push({ part: p.part, port, gateway: net.gateway, subnet: net.subnet });
    }
    await local.listeners.reconcile(wanted);
  }

  private listenersFor(k: string): PartListeners {
    return new PartListeners((part, port, socket) => this.carry(k, part, port, socket), this.ctx.log, this.ctx.deps.maxConnections);
  }

  /** Carries one connection to `part`'s `port` wherever the latest grant says it runs. */
  private async carry(k: string, part: string, port: number, socket: Socket): Promise<void> {
    const local = this.locals.get(k);
    if (!local) throw new DmsError('not_found', 'the ensemble has no part here any more');
    const grant = this.grants.get(local.requester, local.ensemble);
    if (!grant) throw new DmsError('forbidden', `no unexpired grant for ensemble ${local.ensemble}`);
    const p = grant.parts.find((x) => x.part === part);
    if (!p?.ports.includes(port)) throw new DmsError('not_found', `part ${part} does not declare port ${port}`);
    if (!p.node) throw new DmsError('unavailable', `part ${part} has no node now`);
    if (this.ctx.system.isHere(p.node)) {
      // Only a job attached as a part of this very ensemble: a grant cannot point a name at another requester's container.
      if (local.attached.get(p.job_id) !== part) throw new DmsError('not_found', `job ${p.job_id} is not part ${part} of this ensemble on this node`);
      const host = await this.containerAddress(local, p.job_id);
      return splice(socket, host, port, this.ctx.deps.idleMs);
    }
    if (!this.ctx.deps.tunnels) throw new DmsError('unavailable', `part ${part} runs on ${p.node}, and this node has no network`);
    const { stream, rest } = await this.ctx.deps.tunnels.open(p.node, { job_id: p.job_id, port });
    const { pipe } = await import('../../runtime/network/tunnel.js');
    if (socket.destroyed) return stream.abort(new Error('the local connection closed'));
    pipe(socket, stream, rest, this.ctx.deps.idleMs);
    socket.resume();
  }

  /** The part's container's address on one of the ensemble's networks (the host reaches it there). */
  private async containerAddress(local: Local, jobId: string): Promise<string> {
    const [info] = await answered(this.engine, `listing job ${jobId}'s container`, (abortSignal) =>
      this.engine.docker.listContainers({ filters: { label: [`${JOB_LABEL}=${jobId}`, `${NODE_LABEL}=${this.host}`] }, abortSignal }),
    );
    const names = new Set([...local.networks.values()].map((n) => n.name));
    for (const [name, n] of Object.entries(info?.NetworkSettings?.Networks ?? {})) if (names.has(name) && n.IPAddress) return n.IPAddress;
    throw new DmsError('unavailable', `job ${jobId} has no running container on the ensemble's network`);
  }

  /**
   * What an earlier run of this node left: networks without containers are removed; those
   * with (parts that kept running) are taken back, their listeners opened when the requester's
   * next grant comes. Taken back all at once at the end: a look the engine stopped answering
   * halfway leaves nothing behind for the next look to find stale.
   */
  private async recover(): Promise<void> {
    const found = new Map<string, Local>();
    const jobs = new Map<string, string>();
    for (const n of await listEnsembleNetworks(this.engine, this.host)) {
      try {
        await this.takeBack(n, found, jobs);
      } catch (e) {
        // The engine answered, about this network alone: the others are taken back, this one
        // is left for the next start. One it did not answer leaves the whole look to be tried again.
        if (!answeredAbout(e)) throw e;
        this.ctx.log.warn({ network: n.name, err: errorText(e) }, 'ensemble network left by an earlier run not taken back');
      }
    }
    for (const [k, local] of found) this.locals.set(k, local);
    for (const [job, k] of jobs) this.jobs.set(job, k);
  }

  private async takeBack(n: { name: string; labels: Record<string, string>; containers: string[] }, found: Map<string, Local>, jobs: Map<string, string>): Promise<void> {
    if (n.containers.length === 0) {
      await removeNetwork(this.engine, n.name);
      return;
    }
    const requester = n.labels[ENSEMBLE_REQUESTER_LABEL];
    const ensemble = n.labels[ENSEMBLE_LABEL];
    if (!requester || !ensemble) return;
    const slot = Number(/-(\d+)$/.exec(n.name.slice(ensembleNetworkName(this.host, requester, ensemble, 0).length))?.[1] ?? 0);
    const k = keyOf(requester, ensemble);
    const network = await describeNetwork(this.engine, n.name, slot);
    let local = found.get(k);
    if (!local) {
      local = { requester, ensemble, slots: new Map(), networks: new Map(), attached: new Map(), listeners: this.listenersFor(k) };
      found.set(k, local);
    }
    local.networks.set(slot, network);
    for (const part of (n.labels[ENSEMBLE_PARTS_LABEL] ?? '').split(',').filter(Boolean)) local.slots.set(part, slot);
    for (const id of n.containers) {
      const info = await answered(this.engine, `inspecting container ${id}`, (abortSignal) => this.engine.docker.getContainer(id).inspect({ abortSignal })).catch((e: unknown) => {
        // Gone since the network was looked at, or not readable: nothing of it to take back.
        if (answeredAbout(e)) return undefined;
        throw e;
      });
      const labels = info?.Config.Labels ?? {};
      const job = labels[JOB_LABEL];
      if (job && labels[PART_LABEL]) {
        local.attached.set(job, labels[PART_LABEL]);
        jobs.set(job, k);
      }
    }
  }

  /** Runs `fn` after everything queued before it for the same ensemble. */
  private serial<T>(k: string, fn: () => Promise<T>): Promise<T> {
    const before = this.queues.get(k) ?? Promise.resolve();
    const run = before.then(fn, fn);
    const settled = run.catch(() => undefined);
    this.queues.set(k, settled);
    void settled.then(() => {
      if (this.queues.get(k) === settled) this.queues.delete(k);
    });
    return run;
  }
}

/** Connects `socket` to a container's port on this node, both ways. */
function splice(socket: Socket, host: string, port: number, idleMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const upstream = connect({ host, port });
    const timer = setTimeout(() => {
      upstream.destroy();
      reject(new DmsError('unavailable', `${host}:${port} did not accept within ${CONNECT_TIMEOUT_MS} ms`));
    }, CONNECT_TIMEOUT_MS);
    upstream.once('error', (e) => {
      clearTimeout(timer);
      socket.destroy();
      reject(new DmsError('unavailable', `${host}:${port} refused: ${errorText(e)}`));
    });
    upstream.once('connect', () => {
      clearTimeout(timer);
      upstream.removeAllListeners('error');
      upstream.on('error', () => socket.destroy());
      upstream.setTimeout(idleMs, () => upstream.destroy());
      upstream.on('close', () => socket.destroy());
      socket.on('close', () => upstream.destroy());
      socket.pipe(upstream).pipe(socket);
      socket.resume();
      resolve();
    });
  });
}
