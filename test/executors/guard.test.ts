// The executor guard: a fault that escapes an executor where nobody listens fails its job;
// the process, and every other job, go on.
import { EventEmitter } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { FaultGuard } from '../../runtime/fault-guard.js';
import { silentLogger } from '../../runtime/log.js';

let uninstall: (() => void) | undefined;
let uninstallOther: (() => void) | undefined;
afterEach(() => {
  uninstall?.();
  uninstallOther?.();
});

describe('executor guard', () => {
  it('fails the job whose executor call emitted an unhandled error event or left a rejection unhandled', async () => {
    const guard = new FaultGuard(silentLogger(), 'executor');
    uninstall = guard.install();
    const failed: [string, string][] = [];
    const fault = new Promise<void>((resolve) => {
      guard.within('job-a', (reason) => (failed.push(['job-a', reason]), resolve()), () => {
        // As docker-modem's redirected request does: an emitter nobody listens to, erroring later.
        const request = new EventEmitter();
        setTimeout(() => request.emit('error', new Error('getaddrinfo ENOTFOUND containers')), 10);
      });
    });
    await fault;
    const rejected = new Promise<void>((resolve) => {
      guard.within('job-b', (reason) => (failed.push(['job-b', reason]), resolve()), () => {
        void Promise.reject(new Error('stream ended badly'));
      });
    });
    await rejected;
    expect(failed).toEqual([
      ['job-a', 'executor fault: getaddrinfo ENOTFOUND containers'],
      ['job-b', 'executor fault: stream ended badly'],
    ]);
  });

  it("is one per executor: each fails only its own jobs, and no other guard takes them for the node's own faults", async () => {
    const docker = new FaultGuard(silentLogger(), 'executor');
    const other = new FaultGuard(silentLogger(), 'executor');
    uninstall = docker.install();
    uninstallOther = other.install();
    const failed: string[] = [];
    await new Promise<void>((resolve) => {
      other.within('job-c', (reason) => (failed.push(`job-c: ${reason}`), resolve()), () => {
        void Promise.reject(new Error('plugin engine gone'));
      });
    });
    // Had the first guard taken it for a fault of the node, the process would have ended here.
    expect(failed).toEqual(['job-c: executor fault: plugin engine gone']);
    expect(docker.currentOwner()).toBeUndefined();
    uninstallOther();
    uninstallOther = undefined;
    expect(process.listeners('unhandledRejection').filter((l) => Object.getOwnPropertySymbols(l).length > 0)).toHaveLength(1);
  });
});
