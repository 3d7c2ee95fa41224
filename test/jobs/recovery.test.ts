import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { ReconcileReport } from '../../behaviors/jobs/execution.js';
import { type ExecutorFindings, planRecovery } from '../../actors/orchestrator/recovery.js';
import type { Job, JobStatus } from '../../behaviors/jobs/schema.js';

function job(executor: string, status: JobStatus): Job {
  const now = new Date().toISOString();
  return {
    id: randomUUID(),
    name: 'j',
    image: 'img',
    command: [],
    environment: {},
    secrets: {},
    resources: { cpu: { cores: 1 }, memory: { size: 1 }, storage: { size: 0 } },
    executor,
    status,
    node: null,
    exit_code: null,
    error: null,
    pending_reason: null,
    timeout_s: null,
    container_id: status === 'running' ? 'c' : null,
    placement: null,
    requester: null,
    attempts: [],
    outputs: [],
    inputs: [],
    manifest: null,
    ports: [],
    ensemble: null,
    part: null,
    created_at: now,
    updated_at: now,
  };
}

const report = (r: Partial<ReconcileReport>): ExecutorFindings => ({ report: { reattached: [], missing: [], orphans: [], ...r } });
const handleOf = (j: Job) => ({ executor: j.executor, job_id: j.id, id: `c-${j.id}` });

describe('start-up recovery plan', () => {
  it('follows runs found again, fails running jobs whose run is gone, and queues jobs that never started', () => {
    const alive = job('docker', 'running');
    const gone = job('docker', 'running');
    const waiting = job('docker', 'pending');
    const startedUnrecorded = job('docker', 'pending');
    const findings = new Map([
      [
        'docker',
        report({
          reattached: [
            { handle: handleOf(alive), state: 'running' },
            { handle: handleOf(startedUnrecorded), state: 'exited' },
          ],
          missing: [
            { job_id: gone.id, reason: 'its container no longer exists' },
            { job_id: waiting.id, reason: 'its container no longer exists' },
          ],
        }),
      ],
    ]);
    const plan = planRecovery([alive, gone, waiting, startedUnrecorded], findings);
    expect(plan.reattach.map((r) => r.job.id)).toEqual([alive.id, startedUnrecorded.id]);
    expect(plan.reattach[0].handle).toEqual(handleOf(alive));
    expect(plan.lose).toEqual([{ job: gone, reason: 'its container no longer exists' }]);
    expect(plan.queue).toEqual([waiting]);
    expect(plan.untracked).toEqual([]);
  });

  it('fails the jobs of an executor this node no longer has', () => {
    const running = job('plugin-x', 'running');
    const pending = job('plugin-x', 'pending');
    const plan = planRecovery([running, pending], new Map([['plugin-x', { absent: true } as const]]));
    expect(plan.lose.map((l) => [l.job.id, l.reason])).toEqual([
      [running.id, 'executor "plugin-x" is not available on this node'],
      [pending.id, 'executor "plugin-x" is not available on this node'],
    ]);
  });

  it('leaves running jobs alone when their executor cannot be asked, but still queues pending ones', () => {
    const running = job('docker', 'running');
    const pending = job('docker', 'pending');
    const plan = planRecovery([running, pending], new Map([['docker', { error: 'no Docker engine answers' }]]));
    expect(plan.untracked).toEqual([running]);
    expect(plan.queue).toEqual([pending]);
    expect(plan.lose).toEqual([]);
  });

  it('fails a running job its executor does not mention, with a generic reason', () => {
    const running = job('null', 'running');
    const plan = planRecovery([running], new Map([['null', report({})]]));
    expect(plan.lose).toEqual([{ job: running, reason: 'its run was not found after the node restarted' }]);
  });
});
