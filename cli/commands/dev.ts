import type { Command } from 'commander';
import { DEV_EVENT_TYPES, type DevEvent, type DevStreamFilters } from '../../behaviors/dev.js';
import { resetStageTimings, stageTimings, watchDevStream } from '../../client/dev.js';
import { grid } from '../table.js';
import { globals } from '../context.js';
import { restFor } from '../rest.js';
import { terminalSafe } from '../terminal.js';

interface WatchOptions {
  actor?: string[];
  behavior?: string[];
  topic?: string[];
  type?: string[];
}

const collect = (value: string, previous: string[] = []): string[] => [...previous, ...value.split(',').filter(Boolean)];

/** `dms dev …`: watch a node in dev mode (`dms start --dev`). */
export function registerDevCommands(program: Command): void {
  const dev = program.command('dev').description('watch the actors of a node started with --dev, and time their stages');

  dev
    .command('watch')
    .description('print every envelope, state transition and mailbox depth of the node as it happens, until Ctrl-C')
    .option('--actor <inbox>', 'only events of this actor (repeat or comma-separate for several)', collect)
    .option('--behavior <name>', 'only envelopes of this behavior', collect)
    .option('--topic <topic>', 'only broadcasts on this topic', collect)
    .option('--type <type>', `only these event types: ${DEV_EVENT_TYPES.join(', ')}`, collect)
    .action(async (opts: WatchOptions, cmd: Command) => {
      const filters = { actor: opts.actor, behavior: opts.behavior, topic: opts.topic, type: opts.type } as DevStreamFilters;
      const json = Boolean(globals(cmd).json);
      const stop = new AbortController();
      process.once('SIGINT', () => stop.abort());
      for await (const e of watchDevStream(restFor(cmd), filters, stop.signal)) {
        process.stdout.write((json ? JSON.stringify(e) : terminalSafe(devLine(e))) + '\n');
      }
    });

  dev
    .command('stages')
    .description('where envelopes spent their time, stage by stage (a node started with DMS_STAGE_TIMINGS=1)')
    .option('--reset', 'start the timings afresh after printing them')
    .action(async (opts: { reset?: boolean }, cmd: Command) => {
      const rest = restFor(cmd);
      const figures = await stageTimings(rest);
      if (globals(cmd).json) process.stdout.write(JSON.stringify(figures) + '\n');
      else if (figures.length === 0) process.stdout.write('nothing timed yet\n');
      else {
        const ms = (n: number) => n.toFixed(3);
        const rows = figures.map((f) => [f.stage, String(f.count), ms(f.mean_ms), ms(f.p50_ms), ms(f.p99_ms)]);
        process.stdout.write(grid(['STAGE', 'COUNT', 'MEAN MS', 'P50 MS', 'P99 MS'], rows) + '\n');
      }
      if (opts.reset) await resetStageTimings(rest);
    });
}

/** One event as one line a person reads at a glance: time, actor, what happened. */
export function devLine(e: DevEvent): string {
  const time = e.at.slice(11, 23);
  switch (e.type) {
    case 'envelope': {
      const arrow = e.direction === 'in' ? '→' : '←';
      const peer = e.direction === 'in' ? `from ${e.from.inbox}${e.from.host ? `@${short(e.from.host)}` : ''}` : `to ${e.to.inbox}${e.to.host ? `@${short(e.to.host)}` : ''}`;
      const extra = [e.topic && `topic ${e.topic}`, `${e.size} B`, e.verified, e.reply_ms !== undefined && `reply ${e.reply_ms.toFixed(1)} ms`].filter(Boolean).join(', ');
      const payload = e.payload === undefined ? '' : ` ${JSON.stringify(e.payload)}`;
      return `${time} ${e.actor} ${arrow} ${e.behavior} ${peer} (${extra})${payload}`;
    }
    case 'transition':
      return `${time} ${e.actor} ${e.machine}${e.instance ? ` ${e.instance}` : ''}: ${e.from_path ?? e.from} → ${e.to_path ?? e.to} on ${e.event}`;
    case 'mailbox':
      return `${time} ${e.actor} mailbox ${e.depth}/${e.capacity}`;
    case 'dead-letter':
      return `${time} dead letter ${e.behavior} to ${e.to.inbox}: ${e.reason}`;
    case 'lifecycle':
      return `${time} ${e.actor} is ${e.state}`;
    case 'dropped':
      return `${time} (${e.count} events dropped: this watcher fell behind)`;
  }
}

/** Peer ids all begin 12D3KooW; their ends tell them apart. */
const short = (peer: string): string => (peer.length > 12 ? `…${peer.slice(-8)}` : peer);
