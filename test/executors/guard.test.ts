// The executor guard: a fault that escapes an executor where nobody listens fails its job;
// the process, and every other job, go on.
import { EventEmitter } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { installExecutorGuard, withinJob } from '../../actors/executors/guard.js';
import { silentLogger } from '../../runtime/log.js';

let uninstall: (() => void) | undefined;
afterEach(() => uninstall?.());

describe('executor guard', () => {
  it('fails the job whose executor call emitted an unhandled error event or left a rejection unhandled', async () => {
    uninstall = installExecutorGuard(silentLogger());
    const failed: [string, string][] = [];
    const fault = new Promise<void>((resolve) => {
      withinJob('job-a', (reason) => (failed.push(['job-a', reason]), resolve()), () => {
        // As docker-modem's redirected request does: an emitter nobody listens to, erroring later.
        const request = new EventEmitter();
        setTimeout(() => request.emit('error', new Error('getaddrinfo ENOTFOUND containers')), 10);
      });
    });
    await fault;
    const rejected = new Promise<void>((resolve) => {
      withinJob('job-b', (reason) => (failed.push(['job-b', reason]), resolve()), () => {
        void Promise.reject(new Error('stream ended badly'));
      });
    });
    await rejected;
    expect(failed).toEqual([
      ['job-a', 'executor fault: getaddrinfo ENOTFOUND containers'],
      ['job-b', 'executor fault: stream ended badly'],
    ]);
  });
});
