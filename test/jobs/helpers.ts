import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Job, JobSpecInput } from '../../behaviors/jobs/schema.js';
import type { LocalNode } from '../helpers/local-node.js';
import { WAIT_MS, waitFor } from '../helpers/network.js';
import { type NodeProcess, removeHome, startNode, type StartOptions, type TestNode } from '../helpers/node.js';

export const MiB = 1024 * 1024;
export const GiB = 1024 * MiB;

type JobNodeOptions = StartOptions & { jobs?: Record<string, unknown> };

/** A node that runs jobs: network off (parallel test files), short stop grace. */
const jobNode = (opts: JobNodeOptions): StartOptions => ({
  ...opts,
  config: { ...(opts.config as Record<string, unknown> | undefined), network: { enabled: false }, general: { log_level: 'warn' }, jobs: { stop_grace_s: 1, ...opts.jobs } },
});

/** A real node process that runs jobs (for tests about the process: restarts after kill -9, its stderr). */
export function startJobNode(opts: JobNodeOptions = {}): Promise<NodeProcess> {
  return startNode(jobNode(opts));
}

/** The same node started in the test's process; loaded on demand, so process-only files skip the node's sources. */
export async function startLocalJobNode(opts: JobNodeOptions = {}): Promise<LocalNode> {
  const { startLocalNode } = await import('../helpers/local-node.js');
  return startLocalNode(jobNode(opts));
}

/** A node that runs jobs with its REST interface, for the tests of a file or block to share. */
export interface JobNodeScene<N extends TestNode> {
  node: N;
  rest: Rest;
  /** Stops the node and removes its home. */
  stop(): Promise<void>;
}

/** The node `start` gives (startJobNode, startLocalJobNode, or either with options) and its REST interface. */
export async function jobNodeScene<N extends TestNode>(start: () => Promise<N>): Promise<JobNodeScene<N>> {
  const node = await start();
  const stop = async () => {
    await node.stop();
    removeHome(node.home);
  };
  return { node, rest: new Rest(node.url), stop };
}

export interface Answer<T = any> {
  status: number;
  body: T;
}

/** The node's REST interface, answers as status and parsed body. */
export class Rest {
  constructor(readonly url: string) {}

  get<T = any>(path: string): Promise<Answer<T>> {
    return this.call('GET', path);
  }

  post<T = any>(path: string, body: unknown): Promise<Answer<T>> {
    return this.call('POST', path, typeof body === 'string' ? body : JSON.stringify(body));
  }

  put<T = any>(path: string, body: unknown): Promise<Answer<T>> {
    return this.call('PUT', path, JSON.stringify(body));
  }

  delete<T = any>(path: string): Promise<Answer<T>> {
    return this.call('DELETE', path);
  }

  /** A page of `GET /api/v1/jobs…` and its `X-Total-Count`: how many match over all pages. */
  async jobs(path = '/api/v1/jobs'): Promise<{ jobs: Job[]; total: number }> {
    const res = await fetch(this.url + path);
    const text = await res.text();
    if (res.status !== 200) throw new Error(`${path}: ${res.status} ${text}`);
    return { jobs: JSON.parse(text) as Job[], total: Number(res.headers.get('x-total-count')) };
  }

  async submit(spec: JobSpecInput): Promise<Job> {
    const { status, body } = await this.post<Job>('/api/v1/jobs', spec);
    if (status !== 201) throw new Error(`submit answered ${status}: ${JSON.stringify(body)}`);
    return body;
  }

  async job(id: string): Promise<Job> {
    const { status, body } = await this.get<Job>(`/api/v1/jobs/${id}`);
    if (status !== 200) throw new Error(`job ${id}: ${status} ${JSON.stringify(body)}`);
    return body;
  }

  /** Polls until the job is in one of `statuses` (default: ended). */
  async waitFor(id: string, statuses: Job['status'][] = ['completed', 'failed'], timeoutMs = WAIT_MS): Promise<Job> {
    return until(`job ${id} to be ${statuses.join(' or ')}`, async () => {
      const job = await this.job(id);
      return statuses.includes(job.status) ? job : undefined;
    }, timeoutMs, async () => {
      // Where it was instead, and how it got there: a wait that runs out says why.
      const job = await this.job(id);
      const { body } = await this.get(`/api/v1/jobs/${id}/events`);
      const events = ((body?.events ?? []) as { to: string; reason: string | null }[]).map((e) => `${e.to} (${e.reason ?? ''})`);
      return `the job is ${job.status}: error ${job.error ?? 'none'}, waiting ${job.pending_reason ?? 'for nothing'}; its history: ${events.join(' → ')}`;
    });
  }

  /** The whole server-sent event stream of `path`, read until the node ends it. */
  async events(path: string): Promise<{ event: string; data: any }[]> {
    const res = await fetch(this.url + path);
    if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    const text = await res.text();
    return text
      .split('\n\n')
      .filter((block) => block.includes('data:'))
      .map((block) => {
        const lines = block.split('\n');
        const event = lines.find((l) => l.startsWith('event:'))?.slice(6).trim() ?? 'message';
        const data = lines.filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
        return { event, data: JSON.parse(data) };
      });
  }

  private async call<T>(method: string, path: string, body?: string): Promise<Answer<T>> {
    const res = await fetch(this.url + path, { method, body, headers: body ? { 'content-type': 'application/json' } : {} });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  }
}

/** waitFor, polled every 50 ms (jobs move fast). */
export function until<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = WAIT_MS, explain?: () => Promise<string>): Promise<T> {
  return waitFor(what, probe, { timeoutMs, intervalMs: 50, ...(explain ? { explain } : {}) });
}

/** A job for the null executor, which plays back what it is told (actors/executors/null.ts). */
export function nullJob(opts: {
  name?: string;
  durationMs?: number;
  exitCode?: number;
  stdout?: string;
  stderr?: string;
  oom?: boolean;
  startError?: string;
  timeout_s?: number;
  cores?: number;
  memory?: number;
} = {}): JobSpecInput {
  const env: Record<string, string> = {};
  if (opts.durationMs !== undefined) env.DMS_NULL_DURATION_MS = String(opts.durationMs);
  if (opts.exitCode !== undefined) env.DMS_NULL_EXIT_CODE = String(opts.exitCode);
  if (opts.stdout !== undefined) env.DMS_NULL_STDOUT = opts.stdout;
  if (opts.stderr !== undefined) env.DMS_NULL_STDERR = opts.stderr;
  if (opts.oom) env.DMS_NULL_OOM = '1';
  if (opts.startError !== undefined) env.DMS_NULL_START_ERROR = opts.startError;
  return {
    name: opts.name ?? 'null-job',
    image: 'none',
    executor: 'null',
    environment: env,
    resources: { cpu: { cores: opts.cores ?? 0.1 }, memory: { size: opts.memory ?? 16 * MiB } },
    ...(opts.timeout_s ? { timeout_s: opts.timeout_s } : {}),
  };
}

/** Output text of one stream from a logs answer or an event list. */
export const textOf = (chunks: { stream: string; data: string }[], stream: 'stdout' | 'stderr' = 'stdout'): string =>
  chunks
    .filter((c) => c.stream === stream)
    .map((c) => c.data)
    .join('');

/** Writes a spec file into the node's home, as a user would before `dms jobs submit <file>`. */
export function specFile(node: Pick<NodeProcess, 'home'>, name: string, text: string): string {
  const path = join(node.home, name);
  writeFileSync(path, text);
  return path;
}
