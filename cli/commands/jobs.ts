import { extname } from 'node:path';
import { type Command, Option } from 'commander';
import type { Job } from '../../behaviors/jobs/schema.js';
import { isTerminal, JOB_STATUSES } from '../../behaviors/jobs/schema.js';
import { type JobEventsReply, type JobListReply, type LogsReply, MAX_LIST_LIMIT } from '../../behaviors/jobs/jobs.js';
import { formatBytes } from '../../client/sizes.js';
import { isDmsError } from '../../runtime/errors.js';
import { parseUntrustedJson } from '../../runtime/json.js';
import { readTextInput } from '../read-text.js';
import { CliError, globals, output, outputPage } from '../context.js';
import { followJob } from '../follow.js';
import { resolveJobId, shortId } from '../ids.js';
import { restFor } from '../rest.js';
import type { RestClient } from '../../client/rest.js';
import { type PlacementFlags, placementOptions, withPlacement } from '../placement.js';
import { submitJob } from '../submit.js';
import { forwardUntilInterrupted } from '../forward.js';
import { grid } from '../table.js';
import { coresText } from './onboard.js';

interface ListOptions {
  status?: string;
  limit?: string;
  offset?: string;
  all?: boolean;
  oldestFirst?: boolean;
  wide?: boolean;
}

interface SubmitOptions extends PlacementFlags {
  follow?: boolean;
  wait?: boolean;
  idOnly?: boolean;
}

const ID_ARG = 'job id, or any unique prefix of it (as `jobs list` prints)';

export function registerJobCommands(program: Command): void {
  const jobs = program.command('jobs').description('submit jobs to the node and follow them');

  jobs
    .command('list')
    .description('list jobs, newest first')
    .option('--status <statuses>', `only these statuses, comma-separated (${JOB_STATUSES.join(', ')})`)
    .option('--limit <n>', `at most this many (default 100, at most ${MAX_LIST_LIMIT})`)
    .option('--offset <n>', 'skip this many first')
    .addOption(new Option('--all', 'every job, however many (pages through them)').conflicts(['limit', 'offset']))
    .option('--oldest-first', 'oldest first instead')
    .option('--wide', 'print whole ids (default: their first 8 characters)')
    .action(async (opts: ListOptions, cmd: Command) => {
      const list = await listJobs(cmd, opts);
      outputPage(cmd, 'jobs', { items: list.jobs, total: list.total, offset: opts.offset }, () => table(list.jobs, opts.wide ?? false));
    });

  placementOptions(
    jobs
      .command('submit')
      .description('submit a job from a JSON or YAML spec file (- reads stdin)')
      .argument('<spec>', 'spec file: name, image, command, environment, resources, executor, timeout_s, placement'),
  )
    .option('-f, --follow', "show the job's progress and output until it ends, and exit with its exit code")
    .addOption(new Option('--wait', "wait for the job's end without printing its output, and exit with its exit code").conflicts('follow'))
    .option('-q, --id-only', "print only the job's id")
    .action(async (file: string, opts: SubmitOptions, cmd: Command) => {
      await submitJob(cmd, withPlacement(await readSpec(file), opts), opts);
    });

  jobs
    .command('status')
    .description("show a job's record")
    .argument('<id>', ID_ARG)
    .action(async (given: string, _opts, cmd: Command) => {
      const rest = restFor(cmd);
      const job = await rest.get<Job>(`/api/v1/jobs/${encodeURIComponent(await resolveJobId(rest, given))}`);
      output(cmd, job, summary(job));
    });

  jobs
    .command('describe')
    .description('show everything the node keeps about a job: what it runs, where, with what, and how it went')
    .argument('<id>', ID_ARG)
    .action(async (given: string, _opts, cmd: Command) => {
      const rest = restFor(cmd);
      const path = `/api/v1/jobs/${encodeURIComponent(await resolveJobId(rest, given))}`;
      const job = await rest.get<Job>(path);
      const { events } = await rest.get<JobEventsReply>(`${path}/events`);
      output(cmd, { ...job, events }, describe(job, events));
    });

  jobs
    .command('logs')
    .description("print a job's output (stdout to stdout, stderr to stderr)")
    .argument('<id>', ID_ARG)
    .option('-f, --follow', 'keep printing until the job ends, and exit with its exit code (Ctrl-C stops following, not the job)')
    .option('-p, --previous', "the output of the job's run before its current one (kept when it was placed again: its node lost, or a pinned node back)")
    .action(async (given: string, opts: LogsOptions, cmd: Command) => {
      const rest = restFor(cmd);
      await printLogs(cmd, rest, await resolveJobId(rest, given), opts);
    });

  jobs
    .command('port-forward')
    .description('listen on a local port of the node, each connection tunnelled to a port the job declared, wherever it runs; until interrupted')
    .argument('<id>', ID_ARG)
    .argument('<port>', 'a port the job declared in its spec (`ports`)')
    .option('--local <addr:port>', 'where the node listens (default 127.0.0.1 and a free port, printed)')
    .action(async (given: string, port: string, opts: { local?: string }, cmd: Command) => {
      const rest = restFor(cmd);
      if (!/^\d{1,5}$/.test(port)) throw new CliError(`port '${port}' is not a whole number from 1 to 65535`);
      const id = await resolveJobId(rest, given);
      await forwardUntilInterrupted(cmd, rest, id, port, opts.local, `job ${shortId(id)}`);
    });

  jobs
    .command('cancel')
    .description('stop a job; it ends failed with the reason "cancelled"')
    .argument('<id>', ID_ARG)
    .action(async (given: string, _opts, cmd: Command) => {
      const rest = restFor(cmd);
      const job = await rest.delete<Job>(`/api/v1/jobs/${encodeURIComponent(await resolveJobId(rest, given))}`);
      output(cmd, job, `job ${job.id}: ${job.status} (${job.error ?? 'cancelled'})`);
    });
}

/** One page as asked, or with --all every page (newest first unless --oldest-first), and the total. */
async function listJobs(cmd: Command, opts: ListOptions): Promise<JobListReply> {
  const rest = restFor(cmd);
  const query = new URLSearchParams();
  if (opts.status) query.set('status', opts.status);
  if (opts.oldestFirst) query.set('order', 'asc');
  if (!opts.all) {
    if (opts.limit) query.set('limit', opts.limit);
    if (opts.offset) query.set('offset', opts.offset);
    const page = await rest.page<Job>(`/api/v1/jobs${query.size ? `?${query}` : ''}`);
    return { jobs: page.items, total: page.total };
  }
  query.set('limit', String(MAX_LIST_LIMIT));
  const { items, total } = await rest.everyPage<Job>(`/api/v1/jobs?${query}`);
  return { jobs: items, total };
}

export interface LogsOptions {
  follow?: boolean;
  previous?: boolean;
}

/**
 * A job's output as stored so far (stdout to stdout, stderr to stderr), or followed to its end
 * with its exit code to leave with: `jobs logs`, and `ensemble logs` for a part's job.
 */
export async function printLogs(cmd: Command, rest: RestClient, id: string, { follow, previous }: LogsOptions): Promise<void> {
  if (follow && previous) throw new CliError('--previous shows a run that has ended: it cannot be followed (drop --follow)');
  if (follow) {
    process.exitCode = await followJob(rest, id, { output: true, progress: false, json: globals(cmd).json ?? false });
    return;
  }
  // Page by page (each read is bounded by the node), until what is stored so far is shown.
  const json = globals(cmd).json;
  const pages: LogsReply[] = [];
  let from = 0;
  // Pages go on in the log the last one was in: a job placed again meanwhile gives the rest of it first.
  let log: string | null = null;
  for (;;) {
    const page: LogsReply = await rest.get<LogsReply>(`/api/v1/jobs/${encodeURIComponent(id)}/logs?from=${from}${previous ? '&previous=true' : ''}${log ? `&log=${log}` : ''}`);
    if (json) pages.push(page);
    else for (const chunk of page.chunks) (chunk.stream === 'stderr' ? process.stderr : process.stdout).write(chunk.data);
    // No progress (the same offset of the same log) ends it as surely as no more output.
    if (!page.more || (page.next === from && page.log === log)) {
      if (json) output(cmd, { ...page, chunks: pages.flatMap((p) => p.chunks) });
      return;
    }
    from = page.next;
    log = page.log;
  }
}

/** A spec file as JSON or YAML (YAML also reads JSON, so an unknown extension is read as YAML). */
export async function readSpec(file: string): Promise<unknown> {
  let text: string;
  try {
    text = readTextInput(file);
  } catch (e) {
    if (e instanceof CliError) throw e;
    throw new CliError(`cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const json = extname(file).toLowerCase() === '.json';
  // Loaded here: every other command, `dms start` included, runs without the YAML parser (a
  // sixth of the CLI's entry point, compiled on every start).
  const parseYaml = json ? undefined : yamlParse(await import('yaml'));
  let spec: unknown;
  try {
    // YAML refuses a key twice itself (its uniqueKeys); JSON.parse would keep the last, which the node would never see.
    spec = parseYaml ? nullExecutorOf(parseYaml(text)) : parseUntrustedJson(text);
  } catch (e) {
    if (isDmsError(e)) throw new CliError(`${file}: ${e.message}`);
    const message = (e as Error).message.split('\n')[0];
    const twice = /^Map keys must be unique (at line \d+, column \d+)/.exec(message);
    if (twice) throw new CliError(`${file}: duplicate key ${twice[1]}`);
    // The library's advice is for its programmers, not for whoever wrote the file.
    if (/multiple documents/i.test(message)) throw new CliError(`${file} holds more than one YAML document (--- between them): a spec file is one`);
    throw new CliError(`${file} is not valid ${json ? 'JSON' : 'YAML'}: ${message}`);
  }
  // YAML reads an empty file (or one of comments only) as null: sent, the node refused "null".
  if (spec === null || spec === undefined) throw new CliError(`${file} is empty: a spec is a JSON or YAML object of fields`);
  if (typeof spec !== 'object' || Array.isArray(spec)) throw new CliError(`${file} holds ${Array.isArray(spec) ? 'a list' : `a ${typeof spec}`}, not a spec: a spec is a JSON or YAML object of fields`);
  const odd = nonFinite(spec, '');
  // JSON has no NaN or infinity: sent, .nan became null, and the node said "received null".
  if (odd !== null) throw new CliError(`${file}: ${odd || 'the spec'} is .nan, .inf or -.inf, which no field of a spec takes`);
  return spec;
}

/** The path of the first NaN or infinite number in `value`, or null. */
function nonFinite(value: unknown, path: string): string | null {
  if (typeof value === 'number') return Number.isFinite(value) ? null : path;
  if (typeof value !== 'object' || value === null) return null;
  for (const [key, v] of Object.entries(value)) {
    const found = nonFinite(v, path ? `${path}.${key}` : key);
    if (found !== null) return found;
  }
  return null;
}

/**
 * `yaml` is CommonJS: a dynamic import of it has its exports as `default` in the bundle's chunk
 * (esbuild), and as both `default` and named exports under Node.
 */
function yamlParse(yaml: typeof import('yaml')): (typeof import('yaml'))['parse'] {
  return ((yaml as { default?: typeof import('yaml') }).default ?? yaml).parse;
}

/**
 * YAML reads a bare `executor: null` as null, not the name of the null executor, which is what
 * whoever wrote it in that field meant (and what the README's spec example shows).
 */
export function nullExecutorOf(spec: unknown): unknown {
  if (typeof spec === 'object' && spec !== null && 'executor' in spec && spec.executor === null) return { ...spec, executor: 'null' };
  return spec;
}

function table(list: Job[], wide: boolean): string {
  const node = (j: Job) => (j.node === null ? '-' : wide ? j.node : `…${j.node.slice(-8)}`);
  const rows = list.map((j) => [wide ? j.id : shortId(j.id), j.status, j.executor, node(j), j.exit_code === null ? '-' : String(j.exit_code), j.created_at, j.name]);
  return grid(['ID', 'STATUS', 'EXECUTOR', 'NODE', 'EXIT', 'CREATED', 'NAME'], rows);
}

/** `label  value` lines, leaving out what the job does not have. */
function fields(lines: [string, string | number | null][], width: number): string {
  return lines
    .filter(([, v]) => v !== null)
    .map(([k, v]) => `${k.padEnd(width)}${v}`)
    .join('\n');
}

/** The short record of `jobs status`. */
function summary(job: Job): string {
  return fields(
    [
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
      ['requester', job.requester],
      ['created', job.created_at],
      ['updated', job.updated_at],
    ],
    10,
  );
}

/**
 * Everything of the job record, in the order a person asks about it: what, where, how it
 * went, with what, when; then its history, every stored transition with its reason.
 */
function describe(job: Job, events: JobEventsReply['events']): string {
  const r = job.resources;
  const resources = [coresText(r.cpu.cores), `${formatBytes(r.memory.size)} memory`, `${formatBytes(r.storage.size)} storage`];
  if (r.gpu) resources.push(`${r.gpu.count} GPU${r.gpu.model ? ` ${r.gpu.model}` : ''}${r.gpu.vram ? ` with ${formatBytes(r.gpu.vram)} each` : ''}`);
  const env = Object.entries(job.environment).map(([k, v]) => `${k}=${v}`);
  const width = 13;
  const lines = (items: string[]) => (items.length ? items.join(`\n${' '.repeat(width)}`) : null);
  return fields(
    [
      ['id', job.id],
      ['name', job.name],
      ['image', job.image],
      ['command', job.command.length ? job.command.map(shellWord).join(' ') : '(the image\'s default)'],
      ['executor', job.executor],
      ['status', job.status],
      ['waiting', job.pending_reason],
      ['node', job.node ?? '(not placed yet)'],
      ['requester', job.requester],
      ['placement', job.placement ? JSON.stringify(job.placement) : null],
      ['attempts', lines([...job.attempts.map(attempt), ...(ranAgain(job) ? [`(the output of the run before: dms jobs logs ${job.id} --previous)`] : [])])],
      ['exit code', job.exit_code],
      ['error', job.error],
      ['resources', resources.join(', ')],
      ['environment', lines(env)],
      // Their values are the workload's alone: only the names are shown, whoever asks.
      ['secrets', lines(Object.keys(job.secrets).map((name) => `${name} (value not shown)`))],
      ['timeout', job.timeout_s === null ? 'none' : `${job.timeout_s} s`],
      ['ensemble', job.ensemble ? `${job.ensemble}, part ${job.part}` : null],
      ['ports', job.ports.length ? job.ports.join(', ') : null],
      ['inputs', lines(job.inputs.map(inputLine))],
      ['outputs', lines(job.outputs.map((o) => outputLine(o, job.status)))],
      ['manifest', job.manifest ? 'signed by the node that ran it (`dms jobs get` checks it)' : null],
      ['container', containerOf(job)],
      ['submitted', job.created_at],
      ['last change', job.updated_at],
    ],
    width,
  ) + `\n\nhistory\n${timeline(events)}`;
}

/**
 * The container id, when it is one: a job placed on another node keeps that node's peer id as
 * its handle here (to follow it again after a restart), which is no container of this machine.
 */
function containerOf(job: Job): string | null {
  if (job.container_id === null || job.container_id !== job.node || job.requester !== null) return job.container_id;
  // Once ended, that node has removed it too.
  if (isTerminal(job.status)) return `none here: it ran on …${job.node.slice(-8)}`;
  return `none here: it runs on …${job.node.slice(-8)} (\`dms jobs describe\` on that node shows its container)`;
}

/** `<source> → <path>`: where an input comes from (and the CID it resolved to), where the job reads it, and how. */
function inputLine(i: Job['inputs'][number]): string {
  const resolved = i.cid && i.cid !== i.source ? ` (${i.cid})` : '';
  return `${i.source}${resolved} → ${i.path}${i.writable ? ', writable' : ''}`;
}

/** `<name> ← <path>`, then what the run left there once it ended: its CID and size, or why nothing was collected. */
function outputLine(o: Job['outputs'][number], status: Job['status']): string {
  const head = `${o.name} ← ${o.path}`;
  if (o.error) return `${head}: not collected: ${o.error}`;
  if (o.cid) return `${head}: ${o.cid}, ${formatBytes(o.size ?? 0)}`;
  return status === 'pending' || status === 'running' ? `${head} (collected when the job ends)` : head;
}

/** Placed again after a run began: the node keeps the run before's output (`logs --previous`). */
const ranAgain = (job: Job): boolean => job.attempts.filter((a) => a.outcome !== 'refused').length >= 2;

/** One placement: where, when, and how it ended. */
function attempt(a: Job['attempts'][number]): string {
  const end = a.ended_at ? `${a.outcome}${a.reason ? ` (${a.reason})` : ''} at ${a.ended_at}` : 'running';
  return `${a.node}  from ${a.started_at}: ${end}`;
}

/**
 * `  <time>  <status change>  <reason>`, one line per stored event, the change column as wide
 * as its widest entry. A change that kept the status (a pending reason, an image pull step)
 * shows the status alone, as does the job's creation.
 */
function timeline(events: JobEventsReply['events']): string {
  const changes = events.map((e) => (e.from === null || e.from === e.to ? e.to : `${e.from} → ${e.to}`));
  const width = Math.max(0, ...changes.map((c) => c.length));
  return events.map((e, i) => `  ${e.at}  ${changes[i].padEnd(width)}  ${e.reason}`).join('\n');
}

/** An argument as a shell would need it, so the command line can be read (and pasted) as one. */
const shellWord = (arg: string): string => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'\\''`)}'`);
