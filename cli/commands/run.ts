import { type Command, Option } from 'commander';
import type { JobSpecInput } from '../../behaviors/jobs/schema.js';
import { CliError } from '../context.js';
import { sizeArg } from '../sizes.js';
import { parsePairs } from '../pairs.js';
import { type PlacementFlags, placementOptions, withPlacement } from '../placement.js';
import { submitJob } from '../submit.js';
import { restFor } from '../rest.js';
import { inputsOf } from '../inputs.js';

/** What a job gets when `run` is not told: enough for a small tool, and said in --help. */
const DEFAULT_CORES = 1;
const DEFAULT_MEMORY = '512MiB';

interface RunOptions extends PlacementFlags {
  cpu?: string;
  memory?: string;
  disk?: string;
  env?: string[];
  secret?: string[];
  timeout?: string;
  executor?: string;
  name?: string;
  detach?: boolean;
  idOnly?: boolean;
  wait?: boolean;
  input?: string[];
  volume?: string[];
  output?: string[];
}

// No default given to commander, which would print `(default: [])` in --help.
const collect = (v: string, prev: string[] | undefined) => [...(prev ?? []), v];

/**
 * `dms run IMAGE [CMD…]`: submit and follow a job in one line, as `docker run` does. The
 * command's own flags (`sh -c …`) are left to it: run's own options end where the command
 * begins (endRunOptions), and options `run` does not know before it are taken as part of the
 * command rather than refused.
 */
export function registerRunCommand(program: Command): void {
  const run = program
    .command('run')
    .description("run a job and follow its output until it ends, exiting with the job's exit code (Ctrl-C stops following, not the job)")
    .argument('<image>', 'container image, e.g. busybox:latest')
    .argument('[command...]', "the command and its arguments (default: the image's own); put it after -- if it has flags run also has")
    .option('--cpu <cores>', `cores, e.g. 0.5 (default ${DEFAULT_CORES})`)
    .option('--memory <size>', `memory, e.g. 256MiB or 2GB (default ${DEFAULT_MEMORY})`)
    .option('--disk <size>', "disk to reserve, e.g. 10GiB: what the job may write into its container, placed on a node with that much free (default: none reserved, and the node's jobs.default_resources.storage_bytes, 1 GiB, may be written)")
    .option('-e, --env <NAME=value>', 'environment variable for the job; goes to whichever node runs it (repeatable)', collect)
    .option('--secret <NAME=value>', 'environment variable sent only to nodes this node trusts (placement.trust) and shown redacted (repeatable)', collect)
    .option('--timeout <seconds>', 'stop the job, failed, after this many seconds (SIGTERM, then SIGKILL after jobs.stop_grace_s; default: no limit)')
    .option('--executor <name>', "executor to run it with: docker, null, or a plugin's (default: the node's, docker)")
    .option('--name <name>', 'a name for the job (default: the image)')
    .option('-i, --input <source:path>', 'mount read-only at path (in the container) a local file or directory (uploaded first), a CID, job:<id>/<output>, or volume:<name> (repeatable)', collect)
    .option('-v, --volume <name:path>', "mount this node's volume name (dms volume create) at path, writable; name:/path:ro mounts it read-only. The job then runs on this node (repeatable)", collect)
    .option('-o, --output <name:path>', 'collect path (in the container) as output name when the job ends; `dms jobs get` fetches it. A directory (made empty if the image has none) unless its last name has an extension, e.g. /out/model.bin (repeatable)', collect)
    .addOption(new Option('-d, --detach', 'submit, print the job id, and return').conflicts('wait'))
    .option('-q, --id-only', 'print only the job id (and return, unless --wait)')
    .option('--wait', "wait for the end without printing the job's output; exit 0 if it completed, non-zero if it failed")
    .allowUnknownOption();
  placementOptions(run)
    .action(async (image: string, command: string[], opts: RunOptions, cmd: Command) => {
      // An unknown option before the image lands here as the "image": a typo of one of run's.
      if (image.startsWith('-')) throw new CliError(`unknown option '${image}'; see \`dms run --help\``);
      const spec: JobSpecInput = {
        name: (opts.name ?? image).slice(0, 200),
        image,
        command,
        environment: parsePairs('--env', opts.env ?? [], 'NAME=value'),
        ...(opts.secret?.length ? { secrets: parsePairs('--secret', opts.secret, 'NAME=value') } : {}),
        resources: {
          cpu: { cores: cores(opts.cpu ?? String(DEFAULT_CORES)) },
          memory: { size: sizeArg('--memory', opts.memory ?? DEFAULT_MEMORY) },
          ...(opts.disk !== undefined ? { storage: { size: sizeArg('--disk', opts.disk) } } : {}),
        },
        ...(opts.executor ? { executor: opts.executor } : {}),
        ...(opts.timeout !== undefined ? { timeout_s: seconds(opts.timeout) } : {}),
        ...(opts.output?.length ? { outputs: opts.output.map(outputOf) } : {}),
        ...(opts.input?.length || opts.volume?.length ? { inputs: await inputsOf(restFor(cmd), opts.input ?? [], opts.volume ?? []) } : {}),
      };
      const detach = opts.detach || (opts.idOnly && !opts.wait);
      await submitJob(cmd, withPlacement(spec, opts), { idOnly: opts.idOnly, wait: opts.wait, follow: !detach && !opts.wait });
    });
}

function outputOf(text: string): { name: string; path: string } {
  const colon = text.indexOf(':');
  if (colon <= 0 || !text.slice(colon + 1).startsWith('/')) throw new CliError(`--output: '${text}' is not name:/path/in/the/container`);
  return { name: text.slice(0, colon), path: text.slice(colon + 1) };
}

function cores(text: string): number {
  if (!/^\d+(\.\d+)?$/.test(text.trim())) throw new CliError(`--cpu: '${text}' is not a number of cores`);
  return Number(text);
}

function seconds(text: string): number {
  if (!/^\d+$/.test(text.trim()) || Number(text) === 0) throw new CliError(`--timeout: '${text}' is not a whole number of seconds above 0`);
  return Number(text);
}

/**
 * `dms run IMAGE CMD --name x` means `--name x` for CMD, as docker reads it: run's options (and
 * the global ones) are read up to the command's first word, which is marked by inserting `--`
 * before it. Options may still come before or right after the image (`dms run none --executor
 * null`). Returns argv unchanged for any other command.
 */
export function endRunOptions(program: Command, argv: readonly string[]): string[] {
  const run = program.commands.find((c) => c.name() === 'run');
  const args = [...argv];
  if (!run) return args;
  const takesValue = new Map<string, boolean>();
  for (const o of [...program.options, ...run.options]) {
    for (const flag of [o.long, o.short]) if (flag) takesValue.set(flag, o.required || o.optional);
  }
  // argv[0] and argv[1] are node and the script, as process.argv has them.
  let i = 2;
  let positionals = 0;
  let inRun = false;
  for (; i < args.length; i++) {
    const a = args[i];
    if (a === '--') return args;
    if (a.startsWith('-') && a !== '-') {
      if (!a.includes('=') && takesValue.get(a)) i++;
      continue;
    }
    if (!inRun) {
      if (a !== 'run') return args;
      inRun = true;
      continue;
    }
    if (++positionals === 2) {
      args.splice(i, 0, '--');
      return args;
    }
  }
  return args;
}
