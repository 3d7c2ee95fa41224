/**
 * A job pinned to a node that is lost mid-run waits for that node (./pinned.test.ts) and runs
 * there again once it is back. The node, back, held the record of the job's first run under the
 * same id, and answered the requester's new start from it: the new run was refused ('job …
 * already exists') and the job failed its placements, though the node it was pinned to was up
 * and had room. Two node processes, the provider killed with kill -9 and started again on its
 * home: a null job, whose run ends with the process, and a container, which outlives it and is
 * picked up again, so the new run waits for the old one to be stopped.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dockerForTests, removeContainersOf, TEST_IMAGE } from '../helpers/docker.js';
import { freePort, listenAddr, stopCluster, waitFor } from '../helpers/network.js';
import { type NodeProcess, runCli, startNode } from '../helpers/node.js';
import { rest } from '../helpers/rest.js';

type Attempt = { node: string; outcome: string | null };
type Job = { id: string; status: string; node: string | null; error: string | null; pending_reason: string | null; attempts: Attempt[] };
type Usage = { allocated: { cpu: { cores: number } } };
type Logs = { chunks: { data: string }[] };

const { docker, problem } = await dockerForTests('a pinned container placed again on its node');

describe('a job pinned to a node that lost its run and came back', { timeout: 120_000 }, () => {
  let r: NodeProcess;
  let p: NodeProcess;
  let pListen: string;
  const lostAfterMs = 2_000;

  beforeAll(async () => {
    pListen = `/ip4/127.0.0.1/tcp/${await freePort()}`;
    r = await startNode({ config: { deployment: { lost_after_ms: lostAfterMs } }, timeoutMs: 45_000 });
    p = await startNode({ timeoutMs: 45_000, env: { DMS_NETWORK_LISTEN_ADDRESSES: pListen, DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(r) } });
    expect((await rest(p, 'PUT', '/api/v1/device/config', { onboarded: { cpu: 1, memory: '1GiB' } })).status).toBe(200);
  }, 120_000);

  afterAll(async () => {
    if (!problem) await removeContainersOf(docker, p);
    await stopCluster([r, p]);
  });

  const onRequester = async (id: string) => (await rest(r, 'GET', `/api/v1/jobs/${id}`)).json as Job;
  const onProvider = async (id: string) => ((await rest(p, 'GET', '/api/v1/jobs')).json as Job[]).find((j) => j.id === id);
  const explain = (id: string) => async () => {
    const j = await onRequester(id);
    const there = await onProvider(id).catch(() => undefined);
    return `on the requester: ${j.status} (${j.error ?? j.pending_reason ?? 'no reason'}), attempts ${JSON.stringify(j.attempts)}; on the provider: ${there ? `${there.status} (${there.error ?? 'no error'})` : 'none'}`;
  };

  /** Places `spec` pinned to p and waits until it runs there. */
  async function placeRunning(spec: object): Promise<string> {
    const made = await rest(r, 'POST', '/api/v1/jobs', { ...spec, placement: { node: p.peerId } });
    expect(made.status, JSON.stringify(made.json)).toBe(201);
    const id = (made.json as Job).id;
    await waitFor('the job running on the provider', async () => (await onRequester(id)).status === 'running' || undefined, { timeoutMs: 30_000, explain: explain(id) });
    return id;
  }

  /** Waits until r has given the job's run up and waits for p again. */
  const givenUp = (id: string) =>
    waitFor('the requester taking the job back, waiting for its node', async () => {
      const j = await onRequester(id);
      return j.status === 'pending' && j.attempts[0]?.outcome !== null ? j : undefined;
    }, { timeoutMs: lostAfterMs + 15_000, explain: explain(id) });

  /** The `run <uuid>` lines of the job's output on the requester, of its current run or (`previous`) the one before. */
  async function runLines(id: string, previous = false): Promise<string[]> {
    const logs = (await rest(r, 'GET', `/api/v1/jobs/${id}/logs${previous ? '?previous=true' : ''}`)).json as Logs;
    return logs.chunks.map((c) => c.data).join('').split('\n').filter((l) => l.startsWith('run '));
  }

  /**
   * Places `spec` pinned to p, kills p once it runs (and `before` resolved), waits until r takes
   * the job back, and starts p again.
   */
  async function runLoseRestart(spec: object, before?: (id: string) => Promise<unknown>): Promise<string> {
    const id = await placeRunning(spec);
    await before?.(id);
    await p.kill();
    await givenUp(id);
    p = await startNode({ home: p.home, timeoutMs: 45_000, env: { DMS_NETWORK_LISTEN_ADDRESSES: pListen, DMS_NETWORK_BOOTSTRAP_PEERS: listenAddr(r) } });
    return id;
  }

  /** Waits until the job runs on p again, its second attempt there. */
  async function runningAgain(id: string, timeoutMs: number): Promise<Job> {
    const again = await waitFor('the job running on its node again, on both nodes\' records', async () => {
      const j = await onRequester(id);
      return j.status === 'running' && j.attempts.length === 2 && (await onProvider(id))?.status === 'running' ? j : undefined;
    }, { timeoutMs, explain: explain(id) });
    expect(again.node).toBe(p.peerId);
    expect(again.attempts.map((a) => [a.node, a.outcome])).toEqual([[p.peerId, 'lost'], [p.peerId, null]]);
    return again;
  }

  /** Freezes p until r gives the job's run up, thaws it, and waits until the job runs there again. */
  async function frozenPastPatience(id: string): Promise<void> {
    // Not a restart: the provider's run goes on, unseen, while the requester gives it up.
    process.kill(p.pid, 'SIGSTOP');
    try {
      await givenUp(id);
    } finally {
      process.kill(p.pid, 'SIGCONT');
    }
    await runningAgain(id, 40_000);
  }

  it('runs there again, a second attempt on the same node, and can be cancelled there', async () => {
    const id = await runLoseRestart(
      { name: 'pinned-again', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' }, environment: { DMS_NULL_DURATION_MS: '600000', DMS_NULL_STDOUT: 'run 1' } },
      async (id) => {
        // No run before the first: nothing to show, and a finished run's output is not followed.
        const none = await rest(r, 'GET', `/api/v1/jobs/${id}/logs?previous=true`);
        expect([none.status, JSON.stringify(none.json)]).toEqual([404, expect.stringContaining(`job ${id} has no earlier run's output on this node`)]);
        const followed = await rest(r, 'GET', `/api/v1/jobs/${id}/logs?previous=true&follow=true`);
        expect([followed.status, JSON.stringify(followed.json)]).toEqual([400, expect.stringContaining('previous: a run before the current one has ended')]);
        const unclear = await rest(r, 'GET', `/api/v1/jobs/${id}/logs?previous=maybe`);
        expect([unclear.status, JSON.stringify(unclear.json)]).toEqual([400, expect.stringContaining("previous: 'maybe' is not true or false")]);
        return waitFor('the first run\'s output on the requester', async () => (await runLines(id)).length > 0 || undefined, { timeoutMs: 15_000 });
      },
    );
    await runningAgain(id, 30_000);
    // The lost run's output stays readable on the requester, through REST and the CLI.
    expect(await runLines(id, true)).toEqual(['run 1']);
    const described = await runCli(['--home', r.home, 'jobs', 'describe', id]);
    expect(described.stdout).toContain(`(the output of the run before: dms jobs logs ${id} --previous)`);
    const cli = await runCli(['--home', r.home, 'jobs', 'logs', id, '--previous']);
    expect([cli.code, cli.stdout, cli.stderr]).toEqual([0, 'run 1\n', '']);
    const both = await runCli(['--home', r.home, 'jobs', 'logs', id, '--previous', '--follow']);
    expect([both.code, both.stderr]).toEqual([1, expect.stringContaining('--previous shows a run that has ended: it cannot be followed')]);

    const cancelled = await rest(r, 'DELETE', `/api/v1/jobs/${id}`);
    expect(cancelled.status).toBe(200);
    await waitFor('the second run stopped on the provider and its share given back', async () => {
      const there = await onProvider(id);
      const usage = (await rest(p, 'GET', '/api/v1/resources/usage')).json as Usage;
      return there?.status === 'failed' && usage.allocated.cpu.cores === 0 || undefined;
    }, { timeoutMs: 20_000, explain: explain(id) });
  });

  it('a follower of the job\'s output, open across the loss, shows the new run\'s output from its start', async () => {
    const spec = { name: 'pinned-followed', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' }, environment: { DMS_NULL_DURATION_MS: '600000', DMS_NULL_STDOUT: 'same line' } };
    let following: ReturnType<typeof runCli> | undefined;
    const id = await runLoseRestart(spec, async (id) => {
      await waitFor('the first run\'s output on the requester', async () => (await rest(r, 'GET', `/api/v1/jobs/${id}/logs`)).json.chunks.length > 0 || undefined, { timeoutMs: 15_000 });
      // Followed from before the loss to the job's end, as `dms jobs logs -f` is left running.
      following = runCli(['--home', r.home, 'jobs', 'logs', id, '--follow'], {}, undefined, 90_000);
    });
    await runningAgain(id, 30_000);
    // Both runs write a line of the same length: an offset into the first run's output is the
    // end of the second's, where a follower that read on from it would see nothing of the new run.
    // It reads the second from its start: while the job waits, its output reads as none, at 0.
    await waitFor('the new run\'s line on the requester', async () => (await rest(r, 'GET', `/api/v1/jobs/${id}/logs`)).json.chunks.length > 0 || undefined, { timeoutMs: 15_000 });
    expect((await rest(r, 'DELETE', `/api/v1/jobs/${id}`)).status).toBe(200);
    const followed = await following!;
    // Cancelled: the null run ends as SIGTERM ends a process, and the follower leaves with its code.
    expect([followed.stdout, followed.code], followed.stderr).toEqual(['same line\nsame line\n', 143]);
  });

  it('a reader paging behind across the loss gets the rest of the lost run\'s output, then the new run\'s from its start', async () => {
    const lines = Array.from({ length: 1000 }, (_, i) => `line ${i}`).join('\n');
    const spec = { name: 'pinned-paged', image: 'none', executor: 'null', resources: { cpu: 0.5, memory: '64MiB' }, environment: { DMS_NULL_DURATION_MS: '600000', DMS_NULL_STDOUT: lines } };
    type Page = Logs & { next: number; more: boolean; log: string | null };
    const page = async (id: string, q: string) => (await rest(r, 'GET', `/api/v1/jobs/${id}/logs?${q}`)).json as Page;
    let behind: Page | undefined;
    const id = await runLoseRestart(spec, async (id) => {
      // A line every 0.6 s: three on the requester, of which the reader takes one.
      await waitFor('three lines of the first run on the requester', async () => (await page(id, 'limit=1000000')).chunks.length >= 3 || undefined, { timeoutMs: 15_000 });
      behind = await page(id, 'limit=1');
      expect(behind.chunks.map((c) => c.data)).toEqual(['line 0\n']);
    });
    await runningAgain(id, 30_000);
    await waitFor('two lines of the new run on the requester', async () => (await page(id, 'limit=1000000')).chunks.length >= 2 || undefined, { timeoutMs: 15_000 });
    const lost = (await page(id, 'previous=true&limit=1000000')).chunks.map((c) => c.data);
    const read: string[] = [];
    let at = { next: behind!.next, log: behind!.log };
    for (let i = 0; i < 200 && read.length < lost.length; i++) {
      const p = await page(id, `from=${at.next}&limit=1${at.log ? `&log=${at.log}` : ''}`);
      read.push(...p.chunks.map((c) => c.data));
      at = { next: p.next, log: p.log };
    }
    // Without the log it read, its offset fell inside the new run's output.
    expect(read).toEqual([...lost.slice(1), 'line 0\n']);
    expect((await rest(r, 'DELETE', `/api/v1/jobs/${id}`)).status).toBe(200);
  });

  it('a node frozen past the requester\'s patience and thawed: the run given up is stopped there first, then the job runs there again; dms run following it says why', async () => {
    const following = runCli(
      ['--home', r.home, 'run', '--node', p.peerId, '--executor', 'null', '--cpu', '0.5', '--memory', '64MiB', '--name', 'pinned-frozen', '-e', 'DMS_NULL_DURATION_MS=600000', '-e', 'DMS_NULL_STDOUT=same line', 'none'],
      {},
      undefined,
      90_000,
    );
    const id = await waitFor('the job dms run submitted running on the provider', async () => {
      const job = ((await rest(r, 'GET', '/api/v1/jobs')).json as (Job & { name: string })[]).find((j) => j.name === 'pinned-frozen');
      return job?.status === 'running' ? job.id : undefined;
    }, { timeoutMs: 30_000 });
    await frozenPastPatience(id);
    const { events } = (await rest(p, 'GET', `/api/v1/jobs/${id}/events`)).json as { events: { to: string; reason: string }[] };
    // The run given up ended there before the new one began.
    expect(events.map((e) => e.to), JSON.stringify(events)).toEqual(['pending', 'running', 'failed', 'pending', 'running']);
    await waitFor('the new run\'s line on the requester', async () => (await rest(r, 'GET', `/api/v1/jobs/${id}/logs`)).json.chunks.length > 0 || undefined, { timeoutMs: 15_000 });
    expect((await rest(r, 'DELETE', `/api/v1/jobs/${id}`)).status).toBe(200);
    const followed = await following;
    expect([followed.stdout, followed.code], followed.stderr).toEqual(['same line\nsame line\n', 143]);
    // Found following a job whose provider was killed: the second run's output followed the first's with no word between.
    const where = `…${p.peerId.slice(-8)}`;
    expect(followed.stderr).toMatch(new RegExp(`\\[dms\\] job ${id} left ${where}[^:]*: lost track of its run: .+; placing it again \\(its output starts over\\)\\n`));
    expect(followed.stderr.split(`[dms] job ${id} runs on ${where}`)).toHaveLength(3);
  });

  it.skipIf(problem !== null)('a container that outlived its node is stopped there first, and the new run shows its own output only', async () => {
    let firstLine: string | undefined;
    const id = await runLoseRestart({
      name: 'pinned-container', image: TEST_IMAGE, resources: { cpu: 0.5, memory: '32MiB' },
      command: ['sh', '-c', 'echo "run $(cat /proc/sys/kernel/random/uuid)"; exec sleep 600'],
    }, async (id) => {
      [firstLine] = await waitFor('the first run\'s line on the requester', async () => {
        const runs = await runLines(id);
        return runs.length > 0 ? runs : undefined;
      }, { timeoutMs: 15_000 });
    });
    const first = await docker.listContainers({ filters: { label: [`dms.job=${id}`] } });
    // Picked up again by the provider; the requester, which gave it up, has it stopped there.
    await runningAgain(id, 60_000);
    await waitFor('one container of the job, a new one', async () => {
      const now = await docker.listContainers({ filters: { label: [`dms.job=${id}`] } });
      return now.length === 1 && now[0].Id !== first[0]?.Id || undefined;
    }, { timeoutMs: 15_000 });
    const lines = await waitFor('the new run\'s line in the job\'s output', async () => {
      const runs = await runLines(id);
      return runs.length > 0 ? runs : undefined;
    }, { timeoutMs: 15_000 });
    expect(lines).toHaveLength(1);
    expect(lines[0]).not.toBe(firstLine);
    // The run before, which the restart cut off, is kept apart.
    expect(await runLines(id, true)).toEqual([firstLine]);
    expect((await rest(r, 'DELETE', `/api/v1/jobs/${id}`)).status).toBe(200);
  });
});
