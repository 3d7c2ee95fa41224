import { Worker } from 'node:worker_threads';
import { sodiumPath } from './sodium.js';

/*
 * libsodium's signature checks on a worker thread, for when the event loop is busy (./offload.ts
 * decides). A node serving signed requests ran its one thread at 97–98 % of a core, a third of it
 * in checks, while the machine's other core idled (bench:invoke's (c), bench/RESULTS.md). One
 * check costs ~50 µs and a message to a thread about as much, so checks travel in batches: every
 * check asked for in one turn of the event loop leaves in one message, packed into one buffer
 * that is handed over, not copied. One thread: it checks more envelopes a second than the event
 * loop can parse, and it answers in the order it was asked, which keeps one peer's envelopes in
 * order. A thread that fails answers nothing: every check it held runs inline, and so does every
 * later one; no check is lost or answered twice.
 */

/**
 * The check itself, on raw key bytes: ./ed25519.ts's one libsodium call. The thread runs the same
 * call; a check the thread cannot take runs this one inline.
 */
export type CheckBytes = (keyBytes: Uint8Array, data: Uint8Array, sig: Uint8Array) => boolean;

/** One check: the key's 32 bytes, the message, the 64-byte signature, and who waits. */
interface Check {
  key: Uint8Array;
  data: Uint8Array;
  sig: Uint8Array;
  done: (err: Error | null, ok: boolean) => void;
}

const KEY_BYTES = 32;
const SIG_BYTES = 64;
const HEAD_BYTES = 4 + KEY_BYTES + SIG_BYTES;
/** A batch leaves at once when it holds this many checks or bytes, without waiting for the turn's end. */
const MAX_BATCH = 128;
const MAX_BATCH_BYTES = 1 << 20;
/** A thread nobody asked for this long ends: an idle node holds none (~10 MB each). */
const IDLE_MS = 30_000;

// The thread's program, evaluated: the node is one bundled script, so a worker has no file of
// its own to run. Per check: the message's length (u32), the key, the signature, the message.
const PROGRAM = `
const { parentPort, workerData } = require('node:worker_threads');
const sodium = require(workerData.sodium);
parentPort.postMessage({ ready: true });
parentPort.on('message', ({ id, buf, count }) => {
  const view = new DataView(buf);
  const bytes = new Uint8Array(buf);
  const out = new Uint8Array(count);
  let at = 0;
  for (let i = 0; i < count; i++) {
    const length = view.getUint32(at, true);
    const keyBytes = bytes.subarray(at + 4, at + ${4 + KEY_BYTES});
    const sig = bytes.subarray(at + ${4 + KEY_BYTES}, at + ${HEAD_BYTES});
    at += ${HEAD_BYTES};
    const message = bytes.subarray(at, at + length);
    out[i] = sodium.crypto_sign_verify_detached(sig, message, keyBytes) ? 1 : 0;
    at += length;
  }
  parentPort.postMessage({ id, out }, [out.buffer]);
});
`;

export class VerifyThread {
  private worker: Worker | undefined;
  /** Whether the thread has loaded libsodium: until then checks run inline, not behind its start. */
  private started = false;
  private answeredHere = 0;
  /** Batches sent and not yet answered, by id, in the order sent. */
  private readonly waiting = new Map<number, Check[]>();
  private batch: Check[] = [];
  private batchBytes = 0;
  private nextId = 0;
  private failed = false;
  private idle: NodeJS.Timeout | undefined;
  private readonly flushSoon = () => this.flush();

  constructor(
    private readonly check: CheckBytes,
    private readonly path: string,
  ) {}

  /** Checks `sig` over `data` under `key`, off the event loop while the thread runs; `done` gets the verdict. */
  verify(key: Uint8Array, data: Uint8Array, sig: Uint8Array, done: Check['done']): void {
    const check = { key, data, sig, done };
    if (this.failed || sig.length !== SIG_BYTES || key.length !== KEY_BYTES) return this.inline(check);
    // A thread takes tens of milliseconds to start (hundreds on a loaded machine): until it has,
    // checks run inline rather than wait for it.
    if (!this.started) {
      if (!this.worker) this.start();
      return this.inline(check);
    }
    if (this.batch.length === 0) setImmediate(this.flushSoon);
    this.batch.push(check);
    this.batchBytes += HEAD_BYTES + data.length;
    if (this.batch.length >= MAX_BATCH || this.batchBytes >= MAX_BATCH_BYTES) this.flush();
  }

  /** Whether the thread runs now (an idle node has none). */
  get running(): boolean {
    return this.worker !== undefined;
  }

  /** Checks the thread answered since this object was made (the rest ran inline). */
  get answered(): number {
    return this.answeredHere;
  }

  /** Whether the thread has started and takes checks (before, they run inline). */
  get ready(): boolean {
    return this.started;
  }

  /** Ends the thread as if it had failed: what it held, and every later check, runs inline. */
  async close(): Promise<void> {
    this.flush();
    const worker = this.worker;
    this.stopped();
    this.failed = true;
    await worker?.terminate();
  }

  private flush(): void {
    const checks = this.batch;
    if (checks.length === 0) return;
    this.batch = [];
    const size = this.batchBytes;
    this.batchBytes = 0;
    const worker = this.worker;
    // Stopped since they were asked for.
    if (!worker || !this.started) return checks.forEach((c) => this.inline(c));
    const buf = new ArrayBuffer(size);
    const view = new DataView(buf);
    const bytes = new Uint8Array(buf);
    let at = 0;
    for (const c of checks) {
      view.setUint32(at, c.data.length, true);
      bytes.set(c.key, at + 4);
      bytes.set(c.sig, at + 4 + KEY_BYTES);
      bytes.set(c.data, at + HEAD_BYTES);
      at += HEAD_BYTES + c.data.length;
    }
    const id = this.nextId++;
    this.waiting.set(id, checks);
    worker.postMessage({ id, buf, count: checks.length }, [buf]);
    this.idle?.refresh();
  }

  private start(): Worker | undefined {
    let worker: Worker;
    try {
      worker = new Worker(PROGRAM, { eval: true, workerData: { sodium: this.path } });
    } catch {
      this.failed = true;
      return undefined;
    }
    worker.unref();
    worker.on('message', ({ id, out, ready }: { id: number; out: Uint8Array; ready?: true }) => {
      if (ready) {
        this.started = this.worker === worker;
        return;
      }
      const checks = this.waiting.get(id);
      if (!checks) return;
      this.waiting.delete(id);
      this.answeredHere += checks.length;
      for (let i = 0; i < checks.length; i++) checks[i]!.done(null, out[i] === 1);
    });
    // A thread that cannot load libsodium or dies is not started again.
    const fail = () => {
      if (this.worker !== worker) return;
      this.failed = true;
      this.stopped();
    };
    worker.on('error', fail);
    worker.on('exit', fail);
    this.worker = worker;
    this.idle = setTimeout(() => this.endIfIdle(), IDLE_MS);
    this.idle.unref();
    return worker;
  }

  /** Ends the thread once it held nothing for IDLE_MS; the next busy turn starts another. */
  private endIfIdle(): void {
    if (this.waiting.size > 0 || this.batch.length > 0) return void this.idle?.refresh();
    const worker = this.worker;
    this.stopped();
    void worker?.terminate();
  }

  /** Forgets the thread; what it still held is checked inline. */
  private stopped(): void {
    this.worker = undefined;
    this.started = false;
    clearTimeout(this.idle);
    this.idle = undefined;
    const held = [...this.waiting.values()].flat();
    this.waiting.clear();
    for (const c of held) this.inline(c);
  }

  private inline(c: Check): void {
    let ok = false;
    try {
      ok = this.check(c.key, c.data, c.sig);
    } catch {
      ok = false;
    }
    c.done(null, ok);
  }
}

let shared: VerifyThread | null | undefined;

/** The process's verify thread, checking inline with `check`, or null where sodium-native's file cannot be found. */
export function verifyThread(check: CheckBytes): VerifyThread | null {
  if (shared === undefined) {
    const path = sodiumPath();
    shared = path ? new VerifyThread(check, path) : null;
  }
  return shared;
}

/** Checks the process's verify thread answered so far (0 where it never ran). */
export const checksOnThread = (): number => shared?.answered ?? 0;
