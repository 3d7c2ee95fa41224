// An executor plugin: jobs with `executor: "echo"` "run" by writing their command line to
// their stdout and exiting. The job's environment says how:
//
//   ECHO_EXIT_CODE   the exit code (default 0)
//   ECHO_DELAY_MS    how long the run lasts before it exits (default 0); a cancel ends it sooner
//
// Each run is a machine the node observes (ctx.newRun): its transitions are the executor-run
// events of the dev stream, under the actor executor/echo.
import { definePlugin, DmsError } from 'dms/plugin';

const CANCEL_EXIT = 143;

const whole = (env, key, fallback) => {
  const raw = env[key];
  if (raw === undefined) return fallback;
  if (!/^\d+$/.test(raw)) throw new DmsError('invalid', `${key} must be a whole number, got '${raw}'`);
  return Number(raw);
};

class EchoExecutor {
  name = 'echo';
  /** job id → { machine, timer, finish } */
  runs = new Map();

  constructor(ctx) {
    this.ctx = ctx;
  }

  async start(job) {
    const exitCode = whole(job.environment, 'ECHO_EXIT_CODE', 0);
    const delay = whole(job.environment, 'ECHO_DELAY_MS', 0);
    if (exitCode > 255) throw new DmsError('invalid', 'ECHO_EXIT_CODE must be at most 255');
    if (this.runs.has(job.id)) throw new DmsError('conflict', `job ${job.id} is already running`);
    const machine = this.ctx.newRun(job.id);
    const run = { machine, timer: undefined, finishing: undefined };
    this.runs.set(job.id, run);
    // A run before this one (the job placed again) stays readable as the previous run's.
    await this.ctx.logs.retire(job.id);
    const writer = await this.ctx.logs.create(job.id);
    writer.append('stdout', `${job.command.join(' ')}\n`);
    // Output is complete before anyone learns the run ended.
    run.finish = (result) =>
      (run.finishing ??= (async () => {
        clearTimeout(run.timer);
        await writer.close();
        machine.send({ type: 'exited', result });
      })());
    machine.send({ type: 'created', id: job.id });
    run.timer = setTimeout(() => void run.finish({ exit_code: exitCode, oom_killed: false }), delay);
    return { executor: this.name, job_id: job.id, id: job.id };
  }

  wait(handle) {
    const run = this.runs.get(handle.id);
    if (!run) return Promise.reject(new DmsError('not_found', `no echo run for job ${handle.job_id}`));
    return this.ctx.endOf(run.machine);
  }

  readLogs(handle, from, limit, log) {
    return this.ctx.logs.readPage(handle.job_id, from, limit, log);
  }

  readPreviousLogs(handle, from, limit) {
    return this.ctx.logs.readPreviousPage(handle.job_id, from, limit);
  }

  waitForLogs(handle, from, signal) {
    return this.ctx.logs.waitBeyond(handle.job_id, from, signal);
  }

  async cancel(handle, reason) {
    const run = this.runs.get(handle.id);
    if (!run) return;
    run.machine.send({ type: 'cancel', reason });
    await run.finish({ exit_code: CANCEL_EXIT, oom_killed: false, error: `cancelled: ${reason}` });
    run.machine.send({ type: 'stopped' });
  }

  async cleanup(handle) {
    const run = this.runs.get(handle.id);
    if (!run) return;
    if (run.machine.getSnapshot().status !== 'done') await this.cancel(handle, 'cleaned up while running');
    this.runs.delete(handle.id);
  }

  /** Nothing outlives the process: every job a previous one ran is reported missing. */
  async reconcile(jobIds) {
    return { reattached: [], missing: jobIds.filter((id) => !this.runs.has(id)).map((job_id) => ({ job_id, reason: 'echo keeps no run across a restart' })), orphans: [] };
  }
}

export default definePlugin({
  name: 'echo',
  executors: [{ name: 'echo', create: (ctx) => new EchoExecutor(ctx) }],
});
