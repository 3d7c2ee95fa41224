import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import type { Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import type { Job, JobStatus } from '../../behaviors/jobs/schema.js';
import { JOB_STATUSES } from '../../behaviors/jobs/schema.js';
import type { LogsReply } from '../../behaviors/jobs/jobs.js';
import { CliError, globals, output } from '../context.js';
import { type NodeRest, restFor } from '../rest.js';

interface ListOptions {
  status?: string;
  limit?: string;
  offset?: string;
}

export function registerJobCommands(program: Command): void {
  const jobs = program.command('jobs').description('submit jobs to the node and follow them');

  jobs
    .command('list')
    .description('list jobs, oldest first')
    .option('--status <statuses>', `only these statuses, comma-separated (${JOB_STATUSES.join(', ')})`)
    .option('--limit <n>', 'at most this many (default 100, at most 1000)')
    .option('--offset <n>', 'skip this many first')
    .action(async (opts: ListOptions, cmd: Command) => {
      const query = new URLSearchParams();
      if (opts.status) query.set('status', opts.status);
      if (opts.limit) query.set('limit', opts.limit);
      if (opts.offset) query.set('offset', opts.offset);
      const list = await restFor(cmd).get<Job[]>(`/api/v1/jobs${query.size ? `?${query}` : ''}`);
      output(cmd, list, list.length === 0 ? 'no jobs' : table(list));
    });

  jobs
    .command('submit')
    .description('submit a job from a JSON or YAML spec file (- reads stdin)')
    .argument('<spec>', 'spec file: name, image, command, environment, resources, executor, timeout_s')
    .option('-f, --follow', "show the job's progress and output until it ends, and exit with its exit code")
    .action(async (file: string, opts: { follow?: boolean }, cmd: Command) => {
      const rest = restFor(cmd);
      const job = await rest.post<Job>('/api/v1/jobs', readSpec(file));
      if (!opts.follow) {
        output(cmd, job, `submitted job ${job.id} (${job.name}): ${job.status}`);
        return;
      }
      process.stderr.write(`[dms] submitted job ${job.id} (${job.name})\n`);
      process.exitCode = await follow(rest, job.id, globals(cmd).json ?? false);
    });

  jobs
    .command('status')
    .description("show a job's record")
    .argument('<id>', 'job id')
    .action(async (id: string, _opts, cmd: Command) => {
      const job = await restFor(cmd).get<Job>(`/api/v1/jobs/${encodeURIComponent(id)}`);
      output(cmd, job, describe(job));
    });

  jobs
    .command('logs')
    .description("print a job's output (stdout to stdout, stderr to stderr)")
    .argument('<id>', 'job id')
    .option('-f, --follow', 'keep printing until the job ends, and exit with its exit code')
    .action(async (id: string, opts: { follow?: boolean }, cmd: Command) => {
      const rest = restFor(cmd);
      if (opts.follow) {
        process.exitCode = await follow(rest, id, globals(cmd).json ?? false, false);
        return;
      }
      // Page by page (each read is bounded by the node), until what is stored so far is shown.
      const json = globals(cmd).json;
      const pages: LogsReply[] = [];
      let from = 0;
      for (;;) {
        const page = await rest.get<LogsReply>(`/api/v1/jobs/${encodeURIComponent(id)}/logs?from=${from}`);
        if (json) pages.push(page);
        else for (const chunk of page.chunks) (chunk.stream === 'stderr' ? process.stderr : process.stdout).write(chunk.data);
        if (!page.more || page.next === from) {
          if (json) output(cmd, { ...page, chunks: pages.flatMap((p) => p.chunks) });
          return;
        }
        from = page.next;
      }
    });

  jobs
    .command('cancel')
    .description('stop a job; it ends failed with the reason "cancelled"')
    .argument('<id>', 'job id')
    .action(async (id: string, _opts, cmd: Command) => {
      const job = await restFor(cmd).delete<Job>(`/api/v1/jobs/${encodeURIComponent(id)}`);
      output(cmd, job, `job ${job.id}: ${job.status} (${job.error ?? 'cancelled'})`);
    });
}

/** A spec file as JSON or YAML (YAML also reads JSON, so an unknown extension is read as YAML). */
function readSpec(file: string): unknown {
  let text: string;
  try {
    text = readFileSync(file === '-' ? 0 : file, 'utf8');
  } catch (e) {
    throw new CliError(`cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  try {
    return extname(file).toLowerCase() === '.json' ? JSON.parse(text) : parseYaml(text);
  } catch (e) {
    throw new CliError(`${file} is not valid ${extname(file).toLowerCase() === '.json' ? 'JSON' : 'YAML'}: ${(e as Error).message.split('\n')[0]}`);
  }
}

/**
 * Streams the job's output (and, with `progress`, its status changes on stderr) until it ends.
 * Returns the exit code to leave with: the job's own, else 1 for a job that failed without one.
 */
async function follow(rest: NodeRest, id: string, json: boolean, progress = true): Promise<number> {
  // from=0: the whole output, not only what comes after the stream opens.
  for await (const ev of rest.events(`/api/v1/jobs/${encodeURIComponent(id)}/logs?follow=true&from=0`)) {
    const data = JSON.parse(ev.data) as Record<string, unknown>;
    if (ev.event === 'log') {
      const chunk = data as { stream: string; data: string };
      (chunk.stream === 'stderr' ? process.stderr : process.stdout).write(chunk.data);
    } else if (ev.event === 'status' && progress) {
      const reason = data.pending_reason ? ` (${data.pending_reason})` : '';
      process.stderr.write(`[dms] job ${id}: ${data.status}${reason}\n`);
    } else if (ev.event === 'end') {
      const end = data as { status: JobStatus; exit_code: number | null; error: string | null };
      if (json) process.stdout.write(JSON.stringify(end) + '\n');
      const code = end.exit_code === null ? '' : ` (exit code ${end.exit_code})`;
      process.stderr.write(`[dms] job ${id} ${end.status}${code}${end.error ? `: ${end.error}` : ''}\n`);
      if (end.status === 'completed') return 0;
      return end.exit_code !== null && end.exit_code > 0 ? Math.min(end.exit_code, 255) : 1;
    } else if (ev.event === 'error') {
      throw new CliError(`following job ${id} stopped: ${String(data.error)}`);
    }
  }
  throw new CliError(`following job ${id} stopped before it ended (did the node stop?)`);
}

function table(list: Job[]): string {
  const rows = list.map((j) => [j.id, j.status, j.executor, j.exit_code === null ? '-' : String(j.exit_code), j.created_at, j.name]);
  const head = ['ID', 'STATUS', 'EXECUTOR', 'EXIT', 'CREATED', 'NAME'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cols: string[]) => cols.map((c, i) => (i === cols.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  return [line(head), ...rows.map(line)].join('\n');
}

function describe(job: Job): string {
  const lines: [string, string | number | null][] = [
    ['id', job.id],
    ['name', job.name],
    ['status', job.status],
    ['waiting', job.pending_reason],
    ['exit code', job.exit_code],
    ['error', job.error],
    ['executor', job.executor],
    ['image', job.image],
    ['command', job.command.length ? job.command.join(' ') : null],
    ['node', job.node],
    ['created', job.created_at],
    ['updated', job.updated_at],
  ];
  return lines
    .filter(([, v]) => v !== null)
    .map(([k, v]) => `${k.padEnd(10)}${v}`)
    .join('\n');
}
