/**
 * An executor that runs nothing: it plays back what the job's environment tells it to, so
 * every lifecycle path (output, exit codes, OOM, cancel, start failure) can be driven without
 * Docker, on any machine. The options travel in `environment` rather than a field of their
 * own, so a job spec needs no change to be replayed through REST or over the network:
 *
 *   DMS_NULL_DURATION_MS  how long the run lasts (default 0)
 *   DMS_NULL_EXIT_CODE    exit code at the end (default 0)
 *   DMS_NULL_STDOUT       text written to stdout, one chunk per line, spread over the run
 *   DMS_NULL_STDERR       the same for stderr, after the stdout lines
 *   DMS_NULL_OOM          "1": end as if killed for exceeding the memory limit
 *   DMS_NULL_START_ERROR  start() fails with this message (e.g. an image that cannot be had)
 *   DMS_NULL_FILES        files the run leaves, as JSON `{"/outputs/a.txt": "text", …}` (absolute
 *                         paths, at most MAX_NULL_FILES): what its declared outputs hand back
 *
 * Secrets are read like the environment (a secret DMS_NULL_STDOUT is written out), as a
 * container would see them.
 */
import { posix } from 'node:path';
import * as tar from 'tar-stream';
import { z } from 'zod';
import { ContainerPathSchema, namesAFile, type OutputSpec } from '../../behaviors/jobs/files.js';
import { runEnvironment, type Job } from '../../behaviors/jobs/schema.js';
import { parseWith } from '../../runtime/issues.js';
import { DmsError, notFound } from '../../runtime/errors.js';
import { StoredOutput } from './stored-output.js';
import type { LogWriter } from './logfile.js';
import { endOf, type MachineFactory, newRun, plainMachines, type RunMachine } from '../../behaviors/jobs/run-machine.js';
import type { ExecutionHandle, Executor, ExitResult, LogChunk, OutputContent, ReconcileReport } from '../../behaviors/jobs/execution.js';

/** Most files one null run may leave: it plays back tests, not workloads. */
export const MAX_NULL_FILES = 256;
const NullFiles = z
  .string()
  .transform((text, ctx) => {
    try {
      return JSON.parse(text) as unknown;
    } catch {
      ctx.addIssue({ code: 'custom', message: 'is not JSON: write {"/path": "content", …}' });
      return z.NEVER;
    }
  })
  .pipe(z.record(ContainerPathSchema, z.string()).refine((files) => Object.keys(files).length <= MAX_NULL_FILES, { error: `at most ${MAX_NULL_FILES} files` }));

const count = z.string().regex(/^\d+$/, 'must be a whole number').transform(Number);
/** The longest a timer waits (about 24.8 days); Node runs a longer delay after 1 ms. */
const MAX_DURATION_MS = 2_147_483_647;
const NullOptionsSchema = z.object({
  DMS_NULL_DURATION_MS: count.pipe(z.number().max(MAX_DURATION_MS, `at most ${MAX_DURATION_MS} ms (about 24.8 days)`)).default(0),
  DMS_NULL_EXIT_CODE: count.pipe(z.int().max(255)).default(0),
  DMS_NULL_STDOUT: z.string().optional(),
  DMS_NULL_STDERR: z.string().optional(),
  DMS_NULL_OOM: z.enum(['0', '1']).default('0'),
  DMS_NULL_START_ERROR: z.string().optional(),
  DMS_NULL_FILES: NullFiles.optional(),
});

// What a process killed by a signal reports: 128 + SIGKILL for OOM, 128 + SIGTERM for a stop.
const OOM_EXIT = 137;
const CANCEL_EXIT = 143;

interface NullRun {
  /** Where the run is and how it ended (./run-machine.ts). */
  machine: RunMachine;
  timers: NodeJS.Timeout[];
  /** Ends the run with `result`, its output complete first; a later call waits for the first one's end. */
  finish(result: ExitResult): Promise<void>;
  /** What the run leaves (DMS_NULL_FILES), by absolute path. */
  files: Record<string, string>;
}

export interface NullExecutorOptions {
  logsDir: string;
  maxLogBytes?: number;
  /** Makes each run's machine: the executor actor's `ctx.machine`, so the node sees its steps. Default: plain xstate. */
  machine?: MachineFactory;
}

export class NullExecutor extends StoredOutput implements Executor {
  readonly name = 'null';
  private readonly runs = new Map<string, NullRun>();
  private readonly machines: MachineFactory;

  constructor(opts: NullExecutorOptions) {
    super(opts.logsDir, opts.maxLogBytes);
    this.machines = opts.machine ?? plainMachines;
  }

  async start(job: Job): Promise<ExecutionHandle> {
    const options = parseWith(NullOptionsSchema, runEnvironment(job), 'null executor options');
    if (options.DMS_NULL_START_ERROR !== undefined) {
      throw new DmsError('unavailable', options.DMS_NULL_START_ERROR);
    }
    if (this.runs.has(job.id)) throw new DmsError('conflict', `job ${job.id} is already running`);
    const handle: ExecutionHandle = { executor: this.name, job_id: job.id, id: job.id };
    const machine = newRun(this.machines, job.id, 'creating');
    const lines = [...chunks('stdout', options.DMS_NULL_STDOUT), ...chunks('stderr', options.DMS_NULL_STDERR)];
    const run: NullRun = { machine, timers: [], finish: async () => {}, files: options.DMS_NULL_FILES ?? {} };
    // Claimed before the first await: a second start of the job meanwhile is a conflict.
    this.runs.set(handle.id, run);
    // A run with no output leaves no file (reading it gives no chunks), which spares the
    // open/close per job that dominated the cost of a silent null job.
    let writer: LogWriter | undefined;
    try {
      // What a run of the job before left (placed here again) is kept as its previous run's.
      await this.logStore.retire(job.id);
      if (lines.length) writer = await this.logStore.create(job.id);
    } catch (e) {
      this.runs.delete(handle.id);
      machine.send({ type: 'failed', error: String(e) });
      throw e;
    }
    let finishing: Promise<void> | null = null;
    run.finish = (result) =>
      (finishing ??= (async () => {
        run.timers.forEach(clearTimeout);
        // Output is complete before anyone learns the run ended, as with a real container.
        await writer?.close();
        machine.send({ type: 'exited', result });
      })());
    machine.send({ type: 'created', id: handle.id });

    const duration = options.DMS_NULL_DURATION_MS;
    lines.forEach(([stream, data], i) => {
      run.timers.push(setTimeout(() => writer?.append(stream, data), (duration * i) / lines.length));
    });
    const oom = options.DMS_NULL_OOM === '1';
    run.timers.push(
      setTimeout(() => {
        void run.finish(
          oom
            ? { exit_code: OOM_EXIT, oom_killed: true, error: 'killed: out of memory' }
            : { exit_code: options.DMS_NULL_EXIT_CODE, oom_killed: false },
        );
      }, duration),
    );
    return handle;
  }

  /**
   * The files the run left at `output.path`, as a tar named from the path's last component (as
   * Docker's archive is): the file itself, or every file below the directory; an empty directory
   * when the run left nothing there and the path names one (actors/executors/output-dirs.ts).
   */
  async readOutput(handle: ExecutionHandle, output: OutputSpec): Promise<OutputContent> {
    const { files } = this.run(handle);
    const root = output.path.replace(/\/+$/, '');
    const base = posix.basename(root);
    const entries = Object.entries(files).flatMap(([path, content]): [string, string][] => {
      if (path === root) return [[base, content]];
      return path.startsWith(`${root}/`) ? [[`${base}/${path.slice(root.length + 1)}`, content]] : [];
    });
    // As in a container, where the Docker executor makes an output's directory before the job starts.
    if (entries.length === 0 && namesAFile(root)) throw notFound(`${output.path} does not exist in the run`);
    const pack = tar.pack();
    if (entries.length === 0) pack.entry({ name: `${base}/`, type: 'directory', mode: 0o777 });
    for (const [name, content] of entries) pack.entry({ name, mode: 0o644 }, content);
    pack.finalize();
    return { tar: pack as unknown as AsyncIterable<Uint8Array>, strip: 1 };
  }

  async wait(handle: ExecutionHandle): Promise<ExitResult> {
    return endOf(this.run(handle).machine);
  }

  async cancel(handle: ExecutionHandle, reason: string): Promise<void> {
    const run = this.runs.get(handle.id);
    // An unknown run is not running: there is nothing left to stop.
    if (!run) return;
    run.machine.send({ type: 'cancel', reason });
    await run.finish({ exit_code: CANCEL_EXIT, oom_killed: false, error: `cancelled: ${reason}` });
    // Nothing to remove: the stop is over once the run has ended.
    run.machine.send({ type: 'stopped' });
    await endOf(run.machine).catch(() => undefined);
  }

  async cleanup(handle: ExecutionHandle): Promise<void> {
    const run = this.runs.get(handle.id);
    if (!run) return;
    if (run.machine.getSnapshot().status !== 'done') await this.cancel(handle, 'cleaned up while running');
    this.runs.delete(handle.id);
  }

  /** Nothing survives the process that played a run, so every known job is reported missing. */
  async reconcile(knownJobIds: readonly string[]): Promise<ReconcileReport> {
    return {
      reattached: [],
      missing: knownJobIds
        .filter((id) => !this.runs.has(id))
        .map((job_id) => ({ job_id, reason: 'the null executor keeps no run across a restart' })),
      orphans: [],
    };
  }

  private run(handle: ExecutionHandle): NullRun {
    const run = this.runs.get(handle.id);
    if (!run) throw notFound(`no null run for job ${handle.job_id}`);
    return run;
  }
}

function chunks(stream: LogChunk['stream'], text: string | undefined): [LogChunk['stream'], string][] {
  if (text === undefined || text === '') return [];
  return text.replace(/\n$/, '').split('\n').map((line) => [stream, `${line}\n`]);
}
