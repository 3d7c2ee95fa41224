/**
 * Whether a container's first process will act on the signal that stops it gently. The first
 * process of a PID namespace is sent only the signals it has a handler for (pid_namespaces(7)):
 * a `sleep`, a shell or busybox's `httpd` run as a job never sees the SIGTERM a stop sends, so
 * the stop waited out the whole grace (`jobs.stop_grace_s`, 10 s by default) before the SIGKILL
 * that ended it, on every cancel and every ensemble's end. Such a container is killed at once:
 * the signal the grace was for was dropped by the kernel the moment it was sent.
 *
 * The answer is read from /proc, which shows the engine's processes only where the node runs
 * beside its engine, and is trusted only when the process there is a namespace's first and
 * sits in the container's own cgroup. Anywhere else (a remote engine, a node in a container of
 * its own, a signal named in a way not known here) it is `undefined`, and the grace is given.
 */
import { readFile } from 'node:fs/promises';
import { constants } from 'node:os';
import type Docker from 'dockerode';
import { answered, type Engine } from './engine.js';

const SIGNALS = constants.signals as Record<string, number | undefined>;

/** The number of a signal as an image or the engine names it ('SIGTERM', 'TERM', '15'); undefined when not known here. */
export function signalNumber(name: string): number | undefined {
  const text = name.trim().toUpperCase();
  if (/^\d{1,2}$/.test(text)) {
    const n = Number(text);
    return n >= 1 && n <= 64 ? n : undefined;
  }
  return SIGNALS[text.startsWith('SIG') ? text : `SIG${text}`];
}

/** Whether the hexadecimal signal mask of /proc/<pid>/status holds `signal`. */
function maskHolds(mask: string, signal: number): boolean {
  return ((BigInt(`0x${mask}`) >> BigInt(signal - 1)) & 1n) === 1n;
}

export interface StopTarget {
  /** The container's first process as the engine's host sees it (`State.Pid`). */
  pid: number;
  /** The container's full id. */
  containerId: string;
  /** The image's or the container's stop signal (`Config.StopSignal`); SIGTERM when unset. */
  stopSignal?: string;
}

/**
 * true when the container's first process has a handler for its stop signal, false when it has
 * none (the gentle stop would be dropped), undefined when this cannot be told from here.
 */
export async function catchesStopSignal(target: StopTarget, proc = '/proc'): Promise<boolean | undefined> {
  const signal = signalNumber(target.stopSignal || 'SIGTERM');
  if (signal === undefined || !Number.isSafeInteger(target.pid) || target.pid <= 0 || !/^[0-9a-f]{64}$/.test(target.containerId)) return undefined;
  let status: string;
  let cgroup: string;
  try {
    [status, cgroup] = await Promise.all([readFile(`${proc}/${target.pid}/status`, 'utf8'), readFile(`${proc}/${target.pid}/cgroup`, 'utf8')]);
  } catch {
    return undefined;
  }
  // Another process by that number (this node in a PID namespace of its own, the container gone
  // and its number reused) is not the container's: its masks say nothing of it.
  if (!cgroup.includes(target.containerId)) return undefined;
  const field = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, 'm').exec(status)?.[1]?.trim();
  const nspid = field('NSpid')?.split(/\s+/);
  // First of its namespace: the last number is the one it has there. A container sharing the
  // host's PID namespace is sent every signal, handled or not.
  if (!nspid || nspid.length < 2 || nspid[nspid.length - 1] !== '1') return undefined;
  const caught = field('SigCgt');
  if (!caught || !/^[0-9a-f]{1,32}$/i.test(caught)) return undefined;
  return maskHolds(caught, signal);
}

/** A stop's grace: `grace` seconds, or none for a running container whose first process would never see the gentle signal. */
export async function graceFor(engine: Engine, container: Docker.Container, grace: number): Promise<number> {
  if (grace === 0) return 0;
  const info = await answered(engine, 'inspecting the container', (abortSignal) => container.inspect({ abortSignal }));
  const stopSignal = (info.Config as { StopSignal?: string }).StopSignal;
  const caught = info.State.Running ? await catchesStopSignal({ pid: info.State.Pid, containerId: info.Id, stopSignal }) : undefined;
  return caught === false ? 0 : grace;
}
