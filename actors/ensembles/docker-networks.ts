/**
 * An ensemble's Docker networks on this node (README "Names between parts"): internal bridges
 * (no route out) that the ensemble's local parts join and on whose gateway address the node
 * listens for the other parts' ports. One per ensemble, and another only when two parts declare
 * the same port (one gateway address can listen on a port once): parts are spread over "slots"
 * so that no port is declared twice within one. The engine picks the subnets from its own
 * address pools, which it keeps clear of the host's routes; a subnet chosen here could collide
 * with a LAN or VPN the engine knows about and this node does not.
 */
import { createHash } from 'node:crypto';
import type Docker from 'dockerode';
import { DmsError } from '../../runtime/errors.js';
import { ENSEMBLE_LABEL, NODE_LABEL } from '../executors/container-spec.js';
import { answered, type Engine, statusOf } from '../executors/engine.js';

export const ENSEMBLE_REQUESTER_LABEL = 'dms.ensemble.requester';
/** The parts whose names point at this network's gateway, comma-separated: a restarted node reads its slots back from them. */
export const ENSEMBLE_PARTS_LABEL = 'dms.ensemble.parts';

/**
 * `dms-ens-<ensemble>-<hash>[-<slot>]`, the hash of this node and the requester: two requesters
 * naming the same ensemble id (one of them hostile) get networks apart, so neither's parts share
 * a bridge with the other's; so do two nodes sharing one engine.
 */
export function ensembleNetworkName(nodeId: string, requester: string, ensemble: string, slot: number): string {
  const who = createHash('sha256').update(`${nodeId} ${requester}`).digest('hex').slice(0, 8);
  return `dms-ens-${ensemble}-${who}${slot === 0 ? '' : `-${slot}`}`;
}

/**
 * Which slot each part's name points into: the first whose ports none of the part's clash with.
 * `held` keeps the slots parts already have (their containers' hosts files say so); new parts
 * are added around them.
 */
export function assignSlots(parts: readonly { part: string; ports: readonly number[] }[], held: ReadonlyMap<string, number> = new Map()): Map<string, number> {
  const slots = new Map(held);
  const taken: Set<number>[] = [];
  const take = (slot: number, ports: readonly number[]) => {
    while (taken.length <= slot) taken.push(new Set());
    for (const p of ports) taken[slot]!.add(p);
  };
  for (const p of parts) if (slots.has(p.part)) take(slots.get(p.part)!, p.ports);
  for (const p of [...parts].sort((a, b) => a.part.localeCompare(b.part))) {
    if (slots.has(p.part)) continue;
    let slot = 0;
    while (taken[slot] && p.ports.some((port) => taken[slot]!.has(port))) slot++;
    slots.set(p.part, slot);
    take(slot, p.ports);
  }
  return slots;
}

export interface EnsembleNetwork {
  name: string;
  slot: number;
  /** The host's address on the bridge, where the node listens for this slot's parts. */
  gateway: string;
  /** The bridge's subnet: only containers on it may use the listeners. */
  subnet: string;
}

/**
 * Whether a failed request had an answer from the engine about the thing asked for (a status
 * code, a network without IPv4), rather than none (not reached, not answered in time).
 */
export const answeredAbout = (e: unknown): boolean => statusOf(e) !== undefined || (e instanceof DmsError && e.kind === 'invalid');

/** Creates the slot's network, or takes the one already there (an earlier attach, a restarted node). */
export async function ensureNetwork(engine: Engine, nodeId: string, requester: string, ensemble: string, slot: number, parts: readonly string[]): Promise<EnsembleNetwork> {
  const name = ensembleNetworkName(nodeId, requester, ensemble, slot);
  // The engine takes a second network of the same name without a word (and then calls both
  // ambiguous): one already there is looked up first.
  try {
    return await describeNetwork(engine, name, slot);
  } catch (e) {
    if (statusOf(e) !== 404) throw e;
  }
  try {
    await answered(engine, `making network ${name}`, (abortSignal) =>
      engine.docker.createNetwork({
        Name: name,
        // No route out: a stranger's part reaches its ensemble and nothing beyond.
        Internal: true,
        Labels: { [NODE_LABEL]: nodeId, [ENSEMBLE_LABEL]: ensemble, [ENSEMBLE_REQUESTER_LABEL]: requester, [ENSEMBLE_PARTS_LABEL]: parts.join(',') },
        abortSignal,
      } as Docker.NetworkCreateOptions),
    );
  } catch (e) {
    if (statusOf(e) !== 409) throw e;
  }
  return describeNetwork(engine, name, slot);
}

export async function describeNetwork(engine: Engine, name: string, slot: number): Promise<EnsembleNetwork> {
  const info = (await answered(engine, `inspecting network ${name}`, () => engine.docker.getNetwork(name).inspect())) as { IPAM?: { Config?: { Subnet?: string; Gateway?: string }[] } };
  const v4 = (info.IPAM?.Config ?? []).find((c) => c.Subnet && !c.Subnet.includes(':'));
  if (!v4?.Subnet || !v4.Gateway) throw new DmsError('invalid', `network ${name} has no IPv4 subnet and gateway`);
  return { name, slot, gateway: v4.Gateway, subnet: v4.Subnet };
}

/** This node's ensemble networks the engine holds, with the containers on each: what a restarted node finds. */
export async function listEnsembleNetworks(engine: Engine, nodeId: string): Promise<{ name: string; labels: Record<string, string>; containers: string[] }[]> {
  const nets = await answered(engine, 'listing ensemble networks', (abortSignal) =>
    engine.docker.listNetworks({ filters: { label: [`${NODE_LABEL}=${nodeId}`, ENSEMBLE_LABEL] }, abortSignal } as Docker.NetworkListOptions),
  );
  const out = [];
  for (const n of nets) {
    // The list leaves containers out; the inspection has them.
    const info = (await answered(engine, `inspecting network ${n.Name}`, () => engine.docker.getNetwork(n.Id).inspect())) as { Containers?: Record<string, unknown> };
    out.push({ name: n.Name, labels: n.Labels ?? {}, containers: Object.keys(info.Containers ?? {}) });
  }
  return out;
}

/** Whether an IPv4 address lies in `cidr`. */
export function inSubnet(address: string, cidr: string): boolean {
  const [base, bitsText] = cidr.split('/');
  const bits = Number(bitsText);
  const a = ipv4(address.replace(/^::ffff:/, ''));
  const b = ipv4(base ?? '');
  if (a === undefined || b === undefined || !(bits >= 0 && bits <= 32)) return false;
  const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
  return ((a & mask) >>> 0) === ((b & mask) >>> 0);
}

function ipv4(text: string): number | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  let n = 0;
  for (const p of parts) {
    if (!/^\d{1,3}$/.test(p) || Number(p) > 255) return undefined;
    n = n * 256 + Number(p);
  }
  return n;
}
