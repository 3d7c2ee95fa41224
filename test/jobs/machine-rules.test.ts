import { expect, it } from 'vitest';
import { createActor } from 'xstate';
import type { ExecutionHandle } from '../../behaviors/jobs/execution.js';
import { type JobMachineEvent, jobMachine, statusOf } from '../../actors/orchestrator/machine.js';
import { canBecome } from '../../behaviors/jobs/transitions.js';

const handle: ExecutionHandle = { executor: 'null', job_id: 'j', id: 'c-1' };
const EVENTS: JobMachineEvent[] = [
  { type: 'reserved' },
  { type: 'started', handle },
  { type: 'fault', reason: 'no such image' },
  { type: 'reattached', handle },
  { type: 'exited', result: { exit_code: 0, oom_killed: false } },
  { type: 'exited', result: { exit_code: 3, oom_killed: false } },
  { type: 'timed_out', after_s: 1 },
  { type: 'cancel', reason: 'cancelled' },
  { type: 'refused', reason: 'too big', peers: 0 },
  { type: 'resources_freed' },
];

// The machine's own stand-ins for start and stop do nothing.
const noEffects = jobMachine.provide({ actions: { persistRunning: () => {}, watch: () => {}, finish: () => {} } });

/** Replays `events` on a fresh machine; the stored status before and after the last one, and where it ended. */
function replay(events: JobMachineEvent[]) {
  const actor = createActor(noEffects, { input: { jobId: 'j' } }).start();
  let before = statusOf(actor.getSnapshot());
  for (const e of events) {
    before = statusOf(actor.getSnapshot());
    // A final machine ignores every event; sending it one would only warn.
    if (actor.getSnapshot().status === 'active') actor.send(e);
  }
  const snap = actor.getSnapshot();
  const after = statusOf(snap);
  const key = `${JSON.stringify(snap.value)}:${snap.context.stopReason !== null}`;
  actor.stop();
  return { before, after, key };
}

it('moves between stored statuses only as the job model (behaviors/jobs/transitions.ts) allows', () => {
  const seen = new Set<string>([replay([]).key]);
  const moves = new Set<string>();
  let frontier: JobMachineEvent[][] = [[]];
  while (frontier.length > 0) {
    const next: JobMachineEvent[][] = [];
    for (const path of frontier) {
      for (const e of EVENTS) {
        const r = replay([...path, e]);
        // Staying put writes nothing (a final machine ignores every event).
        if (r.before !== r.after) {
          expect(canBecome(r.before, r.after), `${[...path, e].map((x) => x.type).join(' → ')}: ${r.before} → ${r.after}`).toBe(true);
          moves.add(`${r.before}→${r.after}`);
        }
        if (!seen.has(r.key)) {
          seen.add(r.key);
          next.push([...path, e]);
        }
      }
    }
    frontier = next;
  }
  // And every change of status the table allows is one the machine makes.
  expect([...moves].sort()).toEqual(['pending→failed', 'pending→running', 'running→completed', 'running→failed']);
});
