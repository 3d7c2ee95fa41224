// Whether a container's first process would see its stop signal, read from a /proc laid out
// as Linux lays it out (a folder per process with `status` and `cgroup`).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { catchesStopSignal, signalNumber } from '../../actors/executors/stop-signal.js';

const proc = mkdtempSync(join(tmpdir(), 'dms-proc-'));
afterAll(() => rmSync(proc, { recursive: true, force: true }));

const ID = 'ab'.repeat(32);
/** SIGTERM (15) is bit 14 of a mask; SIGQUIT (3) bit 2; SIGUSR1 (10) bit 9. */
const TERM = (1n << 14n).toString(16).padStart(16, '0');
const QUIT_AND_USR1 = ((1n << 2n) | (1n << 9n)).toString(16).padStart(16, '0');

function processEntry(pid: number, opts: { caught: string; nspid?: string; cgroup?: string }): void {
  mkdirSync(join(proc, String(pid)), { recursive: true });
  writeFileSync(
    join(proc, String(pid), 'status'),
    `Name:\tsleep\nState:\tS (sleeping)\nPid:\t${pid}\nNSpid:\t${opts.nspid ?? `${pid}\t1`}\nSigPnd:\t0000000000000000\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t${opts.caught}\n`,
  );
  writeFileSync(join(proc, String(pid), 'cgroup'), opts.cgroup ?? `4:memory:/docker/${ID}\n1:cpu:/docker/${ID}\n0::/\n`);
}

describe('signalNumber', () => {
  it('reads a signal as images and the engine name it, and nothing else', () => {
    expect(signalNumber('SIGTERM')).toBe(15);
    expect(signalNumber('term')).toBe(15);
    expect(signalNumber('SIGQUIT')).toBe(3);
    expect(signalNumber('9')).toBe(9);
    expect(signalNumber('0')).toBeUndefined();
    expect(signalNumber('99')).toBeUndefined();
    expect(signalNumber('SIGRTMIN+3')).toBeUndefined();
    expect(signalNumber('NOPE')).toBeUndefined();
  });
});

describe('catchesStopSignal', () => {
  it('says false for a first process with no handler for SIGTERM, true for one with it', async () => {
    processEntry(100, { caught: '0000000000000000' });
    processEntry(101, { caught: TERM });
    expect(await catchesStopSignal({ pid: 100, containerId: ID }, proc)).toBe(false);
    expect(await catchesStopSignal({ pid: 101, containerId: ID }, proc)).toBe(true);
  });

  it("reads the image's own stop signal, not SIGTERM, when the container names one", async () => {
    processEntry(102, { caught: QUIT_AND_USR1 });
    expect(await catchesStopSignal({ pid: 102, containerId: ID, stopSignal: 'SIGQUIT' }, proc)).toBe(true);
    expect(await catchesStopSignal({ pid: 102, containerId: ID, stopSignal: '15' }, proc)).toBe(false);
    expect(await catchesStopSignal({ pid: 102, containerId: ID, stopSignal: 'SIGRTMIN+3' }, proc)).toBeUndefined();
  });

  it('cannot tell for a process of another cgroup, one not first of its namespace, or one not there', async () => {
    // Its number reused by a process that is not the container's.
    processEntry(103, { caught: '0000000000000000', cgroup: '4:memory:/user.slice\n0::/\n' });
    // A container sharing the host's PID namespace: it is sent every signal, handled or not.
    processEntry(104, { caught: '0000000000000000', nspid: '104' });
    processEntry(105, { caught: '0000000000000000', nspid: '105\t7' });
    expect(await catchesStopSignal({ pid: 103, containerId: ID }, proc)).toBeUndefined();
    expect(await catchesStopSignal({ pid: 104, containerId: ID }, proc)).toBeUndefined();
    expect(await catchesStopSignal({ pid: 105, containerId: ID }, proc)).toBeUndefined();
    expect(await catchesStopSignal({ pid: 999, containerId: ID }, proc)).toBeUndefined();
    // The engine's answer as it comes for a stopped container, and ids that are not ids.
    expect(await catchesStopSignal({ pid: 0, containerId: ID }, proc)).toBeUndefined();
    expect(await catchesStopSignal({ pid: 100, containerId: '../100' }, proc)).toBeUndefined();
  });
});
