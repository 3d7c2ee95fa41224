/**
 * `dms ensemble deploy|list|status|describe|cancel|port-forward` (README "Ensembles"): the REST
 * routes of /api/v1/ensembles, and a forward to a part's port through the part's job.
 */
import { type Command, Option } from 'commander';
import type { Ensemble } from '../../behaviors/ensembles/schema.js';
import type { RestClient } from '../../client/rest.js';
import { CliError, output, outputPage } from '../context.js';
import { ENSEMBLE_PAGE, everyEnsemble, resolveEnsembleId, shortId } from '../ids.js';
import { forwardUntilInterrupted } from '../forward.js';
import { restFor } from '../rest.js';
import { grid } from '../table.js';
import { nullExecutorOf, printLogs, type LogsOptions, readSpec } from './jobs.js';

const ID_ARG = 'ensemble id, any unique prefix of it (as `ensemble list` prints), or its name when no other ensemble has it';
/** How often `deploy --wait` looks again. */
const WAIT_POLL_MS = 500;

export function registerEnsembleCommands(program: Command): void {
  const ensemble = program.command('ensemble').description('deploy ensembles: parts placed all or nothing, reaching each other as <part>.internal');

  ensemble
    .command('deploy')
    .description('deploy an ensemble from a JSON or YAML spec file (- reads stdin)')
    .argument('<spec>', 'spec file: name, parts: {<part>: job spec + ports, kind, restart, optional, near}')
    .option('--wait', 'wait until it ends, and exit 0 only if it completed')
    .action(async (file: string, opts: { wait?: boolean }, cmd: Command) => {
      const rest = restFor(cmd);
      const made = await rest.post<Ensemble>('/api/v1/ensembles', withNullExecutors(await readSpec(file)));
      if (!opts.wait) return output(cmd, made, `deployed ensemble ${made.id} (${made.name}): ${made.status}, parts ${made.parts.map((p) => p.part).join(', ')}`);
      let last = made;
      while (last.status !== 'completed' && last.status !== 'failed') {
        await new Promise((r) => setTimeout(r, WAIT_POLL_MS));
        last = await rest.get<Ensemble>(`/api/v1/ensembles/${made.id}`);
      }
      output(cmd, last, describe(last));
      if (last.status !== 'completed') process.exitCode = 1;
    });

  ensemble
    .command('list')
    .description('list ensembles, newest first')
    .option('--limit <n>', `at most this many (default and most ${ENSEMBLE_PAGE})`)
    .option('--offset <n>', 'skip this many first')
    .addOption(new Option('--all', 'every ensemble, however many (pages through them)').conflicts(['limit', 'offset']))
    .option('--wide', 'print whole ids')
    .action(async (opts: { limit?: string; offset?: string; all?: boolean; wide?: boolean }, cmd: Command) => {
      const rest = restFor(cmd);
      const query = new URLSearchParams();
      if (opts.limit) query.set('limit', opts.limit);
      if (opts.offset) query.set('offset', opts.offset);
      const { items: list, total } = opts.all ? await everyEnsemble<Ensemble>(rest) : await rest.page<Ensemble>(`/api/v1/ensembles${query.size ? `?${query}` : ''}`);
      const rows = list.map((e) => [opts.wide ? e.id : shortId(e.id), e.status, String(e.parts.length), e.parts.filter((p) => p.status === 'running').length.toString(), e.created_at, e.name]);
      outputPage(cmd, 'ensembles', { items: list, total, offset: opts.offset }, () => grid(['ID', 'STATUS', 'PARTS', 'RUNNING', 'CREATED', 'NAME'], rows));
    });

  ensemble
    .command('status')
    .description("an ensemble's status, one line")
    .argument('<id>', ID_ARG)
    .action(async (given: string, _opts, cmd: Command) => {
      const e = await get(restFor(cmd), given);
      output(cmd, e, `ensemble ${e.id} (${e.name}): ${e.status}${e.reason ? ` (${e.reason})` : ''}`);
    });

  ensemble
    .command('describe')
    .description('an ensemble and each part: its job, node, status and error')
    .argument('<id>', ID_ARG)
    .action(async (given: string, _opts, cmd: Command) => {
      const e = await get(restFor(cmd), given);
      output(cmd, e, describe(e));
    });

  ensemble
    .command('cancel')
    .description('stop every part; the ensemble ends failed with the reason "cancelled"')
    .argument('<id>', ID_ARG)
    .action(async (given: string, _opts, cmd: Command) => {
      const rest = restFor(cmd);
      const e = await rest.delete<Ensemble>(`/api/v1/ensembles/${encodeURIComponent(await resolveEnsembleId(rest, given))}`);
      output(cmd, e, `ensemble ${e.id}: ${e.status} (${e.reason ?? 'cancelled'})`);
    });

  ensemble
    .command('logs')
    .description("print a part's output (its job's: stdout to stdout, stderr to stderr)")
    .argument('<id>', ID_ARG)
    .argument('<part>', 'the part, as the spec names it')
    .option('-f, --follow', "keep printing until the part's job ends, and exit with its exit code (Ctrl-C stops following, not the job)")
    .option('-p, --previous', "the output of the part's run before its current one (kept when it was placed again)")
    .action(async (given: string, name: string, opts: LogsOptions, cmd: Command) => {
      const rest = restFor(cmd);
      const e = await get(rest, given);
      await printLogs(cmd, rest, partOf(e, name).job_id, opts);
    });

  ensemble
    .command('port-forward')
    .description("listen on a local port of the node, each connection tunnelled to a part's declared port wherever it runs; until interrupted")
    .argument('<id>', ID_ARG)
    .argument('<part:port>', 'a part and a port it declared (e.g. server:8080)')
    .option('--local <addr:port>', 'where the node listens (default 127.0.0.1 and a free port, printed)')
    .action(async (given: string, target: string, opts: { local?: string }, cmd: Command) => {
      const m = /^([a-z0-9-]{1,63}):(\d{1,5})$/.exec(target);
      if (!m) throw new CliError(`'${target}' is not <part>:<port> (e.g. server:8080)`);
      const rest = restFor(cmd);
      const e = await get(rest, given);
      const part = partOf(e, m[1]!);
      await forwardUntilInterrupted(cmd, rest, part.job_id, m[2]!, opts.local, `ensemble ${shortId(e.id)} part ${part.part}`);
    });
}

/** YAML's bare `executor: null` in a part means the null executor, as in a job spec. */
function withNullExecutors(spec: unknown): unknown {
  if (typeof spec !== 'object' || spec === null || !('parts' in spec) || typeof spec.parts !== 'object' || spec.parts === null) return spec;
  return { ...spec, parts: Object.fromEntries(Object.entries(spec.parts).map(([name, part]) => [name, nullExecutorOf(part)])) };
}

/** The part named `name`, or a refusal naming the parts there are. */
function partOf(e: Ensemble, name: string): Ensemble['parts'][number] {
  const part = e.parts.find((p) => p.part === name);
  if (!part) throw new CliError(`ensemble ${shortId(e.id)} has no part '${name}' (parts: ${e.parts.map((p) => p.part).join(', ')})`);
  return part;
}

async function get(rest: RestClient, given: string): Promise<Ensemble> {
  return rest.get<Ensemble>(`/api/v1/ensembles/${encodeURIComponent(await resolveEnsembleId(rest, given))}`);
}

function describe(e: Ensemble): string {
  const node = (n: string | null) => (n === null ? '-' : `…${n.slice(-8)}`);
  const rows = e.parts.map((p) => [p.part, p.kind, p.status, node(p.node), shortId(p.job_id), p.ports.join(',') || '-', String(p.restarts), p.error ?? '']);
  return [
    `ensemble ${e.id} (${e.name}): ${e.status}${e.reason ? ` (${e.reason})` : ''}`,
    grid(['PART', 'KIND', 'STATUS', 'NODE', 'JOB', 'PORTS', 'RESTARTS', 'ERROR'], rows),
  ].join('\n');
}
