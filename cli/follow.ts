/**
 * Following a job to its end over the node's server-sent events: its output as it comes, its
 * status changes, and the exit code to leave with. Shared by `jobs submit --follow|--wait`,
 * `jobs logs --follow` and `run`.
 */
import type { Job, JobStatus } from '../behaviors/jobs/schema.js';
import { CliError } from './context.js';
import type { RestClient } from '../client/rest.js';
import { terminalSafe } from './terminal.js';
import { shortId } from './ids.js';
import { formatBytes } from '../client/sizes.js';

export interface FollowOptions {
  /** Print the job's output (stdout to stdout, stderr to stderr); off for --wait. */
  output: boolean;
  /** Print status changes on stderr ("[dms] job … running"). */
  progress: boolean;
  /**
   * JSON lines on stdout: each chunk of output as `{"event":"log","stream","data"}` and the
   * end as `{"event":"end",…}`, so stdout is all JSON (the job's own output is never mixed in raw).
   */
  json: boolean;
  /** Say on stderr which node the job runs on, once it runs. */
  placement?: boolean;
}

/** Exit status of a shell whose command was interrupted by SIGINT (128 + 2). */
export const INTERRUPTED_EXIT = 130;

/**
 * Streams the job until it ends and returns the exit code to leave with: 0 when it completed,
 * its own exit code when it failed with one, else 1.
 *
 * Ctrl-C stops the following, not the job: a person pressing it may well mean either, so the
 * job is left alone and the way to stop it is said.
 */
export async function followJob(rest: RestClient, id: string, opts: FollowOptions): Promise<number> {
  const onInterrupt = () => {
    process.stderr.write(`\njob ${id} keeps running; \`dms jobs cancel ${id}\` stops it\n`);
    process.exit(INTERRUPTED_EXIT);
  };
  process.once('SIGINT', onInterrupt);
  try {
    return await stream(rest, id, opts);
  } finally {
    process.off('SIGINT', onInterrupt);
  }
}

async function stream(rest: RestClient, id: string, opts: FollowOptions): Promise<number> {
  let placed = !opts.placement;
  let last: unknown;
  for await (const ev of rest.events(`/api/v1/jobs/${encodeURIComponent(id)}/logs?follow=true`)) {
    const data = JSON.parse(ev.data) as Record<string, unknown>;
    if (ev.event === 'log') {
      if (!opts.output) continue;
      const chunk = data as { stream: string; data: string };
      if (opts.json) process.stdout.write(JSON.stringify({ event: 'log', stream: chunk.stream, data: chunk.data }) + '\n');
      else (chunk.stream === 'stderr' ? process.stderr : process.stdout).write(chunk.data);
    } else if (ev.event === 'status') {
      // Back to pending from running: its node was lost, or failed it with a placement left. The
      // output that follows is a new run's, from its start: said, and where that run goes.
      if (opts.placement && last === 'running' && data.status === 'pending') {
        placed = false;
        const left = await leftRun(rest, await jobRecord(rest, id));
        if (left) process.stderr.write(terminalSafe(`[dms] job ${id} ${left}; placing it again (its output starts over)\n`));
      }
      last = data.status;
      // Where it went, once it left pending, before what it did there.
      if (!placed && data.status !== 'pending') {
        placed = true;
        const where = await placedOn(rest, await jobRecord(rest, id));
        if (where) process.stderr.write(terminalSafe(`[dms] job ${id} ${data.status === 'running' ? 'runs' : 'ran'} on ${where}\n`));
      }
      if (opts.progress) {
        const reason = data.pending_reason ? ` (${data.pending_reason})` : '';
        process.stderr.write(terminalSafe(`[dms] job ${id}: ${data.status}${reason}\n`));
      }
    } else if (ev.event === 'end') {
      const end = data as { status: JobStatus; exit_code: number | null; error: string | null };
      // Its record, read once for where it ran and what it left (both said only with `placement`).
      const job = opts.placement ? await jobRecord(rest, id) : undefined;
      // A job that ended before its running was seen still ran somewhere (or never left pending).
      if (!placed) {
        const where = await placedOn(rest, job);
        if (where) process.stderr.write(terminalSafe(`[dms] job ${id} ran on ${where}\n`));
      }
      if (opts.json) process.stdout.write(JSON.stringify(opts.output ? { event: 'end', ...end } : end) + '\n');
      const code = end.exit_code === null ? '' : ` (exit code ${end.exit_code})`;
      process.stderr.write(terminalSafe(`[dms] job ${id} ${end.status}${code}${end.error ? `: ${end.error}` : ''}\n`));
      // Whoever ran it wants what it left: where each output is, and the command that fetches it.
      if (opts.placement) for (const line of outputsLeft(job)) process.stderr.write(terminalSafe(`[dms] ${line}\n`));
      return exitCodeOf(end);
    } else if (ev.event === 'error') {
      throw new CliError(`following job ${id} stopped: ${String(data.error)}`);
    }
  }
  throw new CliError(`following job ${id} stopped before it ended (did the node stop?)`);
}

/** The job's record, or undefined when it cannot be read: what follows from it is said, never failed for. */
const jobRecord = (rest: RestClient, id: string): Promise<Job | undefined> => rest.get<Job>(`/api/v1/jobs/${encodeURIComponent(id)}`).catch(() => undefined);

/**
 * The node a job was placed on, as a person tells nodes apart: `…<end of its peer id>
 * (<name>)`, or `this node`. Undefined when it is not known; saying where is never worth failing for.
 */
async function placedOn(rest: RestClient, job: Job | undefined): Promise<string | undefined> {
  if (!job || job.node === null) return undefined;
  return nodeName(rest, job.node);
}

/** How the run a job was taken back from ended, and where: `left …X (vm): lost track of its run: …`. */
async function leftRun(rest: RestClient, job: Job | undefined): Promise<string | undefined> {
  const run = job?.attempts.at(-1);
  if (!run?.ended_at) return undefined;
  return `left ${await nodeName(rest, run.node)}${run.reason ? `: ${run.reason}` : ''}`;
}

async function nodeName(rest: RestClient, node: string): Promise<string> {
  const peers = await rest.get<{ self?: string; nodes: { id: string; profile: { name: string } | null }[] }>('/api/v1/peers').catch(() => undefined);
  if (peers?.self === node) return `this node (…${node.slice(-8)})`;
  const name = peers?.nodes.find((n) => n.id === node)?.profile?.name;
  return `…${node.slice(-8)}${name ? ` (${name})` : ''}`;
}

/** One line per output the ended job declared: its CID and size, or why nothing was collected. Nothing when its record could not be read. */
function outputsLeft(job: Job | undefined): string[] {
  if (!job?.outputs.length) return [];
  const lines = job.outputs.map((o) =>
    o.error ? `output ${o.name} not collected: ${o.error}` : o.cid ? `output ${o.name}: ${o.cid} (${formatBytes(o.size ?? 0)})` : `output ${o.name}: nothing collected`,
  );
  if (job.outputs.some((o) => o.cid)) lines.push(`\`dms jobs get ${shortId(job.id)}\` writes them to ./${shortId(job.id)}/<name>, checked against the provider's signature`);
  return lines;
}

/** What a process following the job exits with: a failed job is never 0. */
export function exitCodeOf(end: { status: JobStatus; exit_code: number | null }): number {
  if (end.status === 'completed') return 0;
  return end.exit_code !== null && end.exit_code > 0 ? Math.min(end.exit_code, 255) : 1;
}
