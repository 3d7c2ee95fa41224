import type { Command } from 'commander';
import type * as z from 'zod';
import { ConnectReply, DiscoveryBehaviors, type PeerDescription, PeersDescribeReply, PeerSelfReply, PingReply } from '../../behaviors/discovery.js';
import type { ResourceSpec } from '../../behaviors/jobs/schema.js';
import { formatBytes } from '../../client/sizes.js';
import { homePaths } from '../../runtime/home.js';
import { CliError, homeOf, output } from '../context.js';
import { unlockKeys } from '../passphrase.js';
import { grid } from '../table.js';
import { labelsText, locationText } from './onboard.js';
import { clientFor } from './actor.js';

const DEFAULT_TIMEOUT_S = 30;
const MAX_TIMEOUT_S = 3_600;

interface TimeoutOption {
  timeout?: number;
}

interface ListOptions extends TimeoutOption {
  wide?: boolean;
}

// Peer ids all begin 12D3KooW; their ends tell them apart.
const SHORT_PEER_CHARS = 8;

/** `dms peers …`: the discovery actor's behaviors on this home's node, signed by the operator key. */
export function registerPeersCommands(program: Command): void {
  const peers = program.command('peers').description("the node's view of the network: its peers, its own addresses, ping and connect");
  // A sealed operator key is unlocked before any action runs: asked at a terminal, else DMS_PASSPHRASE.
  peers.hook('preAction', (_peers, action) => unlockKeys([homePaths(homeOf(action)).operatorKey]));

  peers
    .command('list')
    .description('list the peers connected now: name, address, the share each offers (— for nothing) and its free part, labels, location, executors, last seen')
    .option('--wide', 'print whole peer ids, DIDs and addresses')
    .option('--timeout <seconds>', `seconds to wait for the node (default ${DEFAULT_TIMEOUT_S})`, parseSeconds)
    .action(async (opts: ListOptions, cmd: Command) => {
      const list = await ask(cmd, DiscoveryBehaviors.peersDescribe, {}, PeersDescribeReply, opts);
      output(cmd, list, list.nodes.length ? peerTable(list.nodes, Boolean(opts.wide)) : 'no peers connected');
    });

  peers
    .command('self')
    .description("print this node's peer id, DID and listen addresses")
    .option('--timeout <seconds>', `seconds to wait for the node (default ${DEFAULT_TIMEOUT_S})`, parseSeconds)
    .action(async (opts: TimeoutOption, cmd: Command) => {
      const self = await ask(cmd, DiscoveryBehaviors.peersSelf, {}, PeerSelfReply, opts);
      const addrs = self.addrs.length ? self.addrs.map((a) => `  ${a}`).join('\n') : '  (none: the network is off)';
      output(cmd, self, `peer id: ${self.id}\ndid:     ${self.did}\naddrs:\n${addrs}`);
    });

  peers
    .command('ping')
    .description('measure the round trip to a peer (dialling it if needed)')
    .argument('<peer-id>', 'libp2p peer id of the peer, 12D3KooW…')
    .option('--timeout <seconds>', `seconds to wait for the answer (default ${DEFAULT_TIMEOUT_S})`, parseSeconds)
    .action(async (peer: string, opts: TimeoutOption, cmd: Command) => {
      const { rtt_ms } = await ask(cmd, DiscoveryBehaviors.peersPing, { host: peer }, PingReply, opts);
      output(cmd, { peer, rtt_ms }, `${peer}: ${rtt_ms} ms`);
    });

  peers
    .command('connect')
    .description('dial a peer by multiaddr')
    .argument('<multiaddr>', 'address of the peer, e.g. /ip4/10.0.0.2/tcp/9000/p2p/12D3KooW…')
    .option('--timeout <seconds>', `seconds to wait for the answer (default ${DEFAULT_TIMEOUT_S})`, parseSeconds)
    .action(async (address: string, opts: TimeoutOption, cmd: Command) => {
      const { peer } = await ask(cmd, DiscoveryBehaviors.peersConnect, { address }, ConnectReply, opts);
      output(cmd, { peer }, `connected to ${peer}`);
    });
}

/** Invokes a discovery behavior on the node's root actor and checks the reply's shape. */
async function ask<S extends z.ZodType>(cmd: Command, be: string, payload: unknown, schema: S, opts: TimeoutOption): Promise<z.infer<S>> {
  // Signed as the operator, with the home's REST credentials and provide tokens, like `dms actor`.
  // Its failures (unreachable, error replies) are worded where every command's are (cli/run.ts).
  const client = clientFor(cmd);
  const payloadOut = (await client.invoke<unknown>('root', be, payload, { ttlMs: (opts.timeout ?? DEFAULT_TIMEOUT_S) * 1000 })).payload;
  const parsed = schema.safeParse(payloadOut);
  if (!parsed.success) throw new CliError(`the node's answer to ${be} is not what this dms expects: ${parsed.error.message}`);
  return parsed.data;
}

function parseSeconds(text: string): number {
  const s = Number(text);
  if (!/^\d+(\.\d+)?$/.test(text.trim()) || !(s > 0) || s > MAX_TIMEOUT_S) {
    throw new CliError(`--timeout: '${text}' is not a number of seconds (above 0, at most ${MAX_TIMEOUT_S})`);
  }
  return s;
}

/**
 * One row per peer; a peer that has not described itself yet shows `-` in what it did not say,
 * and one whose operator onboarded nothing shows `—` as its offer (its machine is its own).
 */
function peerTable(nodes: PeerDescription[], wide: boolean): string {
  const now = Date.now();
  const head = ['PEER', ...(wide ? ['DID'] : []), 'NAME', 'ADDRESS', 'OFFERED', 'FREE', 'LABELS', 'LOCATION', 'EXECUTORS', 'LAST SEEN'];
  const rows = nodes.map((n) => {
    const p = n.profile;
    return [
      wide ? n.id : `…${n.id.slice(-SHORT_PEER_CHARS)}`,
      ...(wide ? [n.did ?? '(no hello answer yet)'] : []),
      p?.name || '-',
      address(p?.addrs ?? [], n.id, wide),
      p ? (p.onboarded ? figures(p.onboarded) : NOTHING_OFFERED) : '-',
      p ? (p.onboarded && p.free ? figures(p.free) : NOTHING_OFFERED) : '-',
      p ? labelsText(p.labels) : '-',
      p ? locationText(p.location) : '-',
      p?.executors.length ? p.executors.join(',') : '-',
      n.last_seen ? ago(now - Date.parse(n.last_seen)) : 'never',
    ];
  });
  return grid(head, rows);
}

/** What a peer offering nothing to the network shows as its offer. */
const NOTHING_OFFERED = '—';

/** The address to show: one reachable from elsewhere when the peer has one, else its first. */
function address(addrs: string[], id: string, wide: boolean): string {
  const pick = addrs.find((a) => !/^\/ip[46]\/(127\.|::1\/)/.test(a)) ?? addrs[0];
  if (!pick) return '-';
  return wide ? pick : pick.replace(`/p2p/${id}`, '');
}

function figures(r: ResourceSpec): string {
  const parts = [`${r.cpu.cores} cpu`, formatBytes(r.memory.size)];
  // A job asking for storage, or mounting a volume, is placed by it as by cores and memory.
  if (r.storage.size > 0) parts.push(`${formatBytes(r.storage.size)} disk`);
  if (r.gpu) parts.push(`${r.gpu.count} gpu`);
  return parts.join(', ');
}

function ago(ms: number): string {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  return `${Math.round(s / 3600)}h ago`;
}
