/**
 * The engine's `oom` events for this node's containers, followed live. The engine learns of a
 * cgroup OOM kill from a separate event, which can land after wait() has returned; when it lands
 * after the exit event the engine never sets State.OOMKilled at all (seen under load), but it
 * still publishes the container's `oom` event. One subscription per Docker executor (filtered to
 * container `oom` events labelled with this node) records the containers it names, so the OOM
 * verdict of a run waits on a record instead of polling the engine's history.
 *
 * The subscription opens when the executor starts and closes when it stops; an error while open
 * reconnects it, asking for the events since it broke, so a short gap loses nothing. Containers
 * that died where no subscription saw them (while the node was down, or in a gap) are looked up
 * in the engine's history with one bounded query.
 */
import type Docker from 'dockerode';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import { answered, ENGINE_ANSWER_MS, heard } from './engine.js';

/** Containers remembered as OOM-killed: enough for every run of a busy node between two verdicts. */
const RECORDS = 1024;
const RECONNECT_MIN_MS = 1_000;
const RECONNECT_MAX_MS = 30_000;

interface EngineEvent {
  id?: string;
  status?: string;
  Action?: string;
  Actor?: { ID?: string };
}

export class OomEvents {
  /** Container ids the engine named in `oom` events, oldest first. */
  private readonly records = new Set<string>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private stream: NodeJS.ReadableStream | null = null;
  private wanted = false;
  /** Since when (ms) the subscription has seen every event, gaps it replayed included; null before it first connects. */
  private coveredSince: number | null = null;
  /** Connected now: a gap not yet replayed is not covered. */
  private connected = false;
  /** Where a reconnect resumes (s): the second the last connection broke. */
  private resumeAt: number | undefined;
  private retry: NodeJS.Timeout | null = null;
  private retryMs = RECONNECT_MIN_MS;

  constructor(
    private readonly docker: Docker,
    /** `name=value` of the label this node's containers carry. */
    private readonly label: string,
    private readonly log?: Logger,
    /** How long the engine may take to answer a subscription (then it is asked again) or a look at its history. */
    private readonly answerMs: number = ENGINE_ANSWER_MS,
  ) {}

  /** Opens the subscription; an engine that does not answer is tried again later, never an error. */
  /** Subscribes; resolves once the engine answered or the first attempt failed (then it tries again). */
  open(): Promise<void> {
    if (this.wanted) return Promise.resolve();
    this.wanted = true;
    return this.connect();
  }

  close(): void {
    this.wanted = false;
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
    this.coveredSince = null;
    this.connected = false;
    this.resumeAt = undefined;
    const stream = this.stream;
    this.stream = null;
    (stream as { destroy?: () => void } | null)?.destroy?.();
  }

  /** Whether every `oom` event since `sinceMs` (a container's start) reached this subscription. */
  covers(sinceMs: number): boolean {
    return this.connected && this.coveredSince !== null && this.coveredSince <= sinceMs;
  }

  seen(id: string): boolean {
    return this.records.has(id);
  }

  /** True once an `oom` event names container `id`, false after `ms` without one. */
  waitFor(id: string, ms: number): Promise<boolean> {
    if (this.records.has(id)) return Promise.resolve(true);
    return new Promise((resolve) => {
      let set = this.waiters.get(id);
      if (!set) this.waiters.set(id, (set = new Set()));
      const done = (found: boolean) => {
        clearTimeout(timer);
        set.delete(wake);
        if (set.size === 0 && this.waiters.get(id) === set) this.waiters.delete(id);
        resolve(found);
      };
      const wake = () => done(true);
      const timer = setTimeout(() => done(false), ms);
      set.add(wake);
    });
  }

  /**
   * Whether the engine's history holds an `oom` event for container `id` since `since` (s).
   * `until` is the current second, never later: the engine holds a query open until its `until`.
   */
  async history(id: string, since: number | undefined): Promise<boolean> {
    const what = `looking up container ${id}'s oom events`;
    let text = '';
    try {
      const until = Math.floor(Date.now() / 1000);
      const stream = await answered({ answerMs: this.answerMs }, what, (abortSignal) => this.docker.getEvents({ since, until, filters: { container: [id], event: ['oom'] }, abortSignal } as Docker.GetEventsOptions));
      for await (const d of heard(stream as AsyncIterable<Buffer>, this.answerMs, what)) text += d.toString('utf8');
    } catch {
      // What came before the engine broke off or fell silent is all it said.
    }
    return text.includes('"oom"');
  }

  private async connect(): Promise<void> {
    const since = this.resumeAt;
    let stream: NodeJS.ReadableStream;
    try {
      const filters = { type: ['container'], event: ['oom'], label: [this.label] };
      // Bounded in its first answer only: the stream it answers with lasts.
      stream = await answered({ answerMs: this.answerMs }, 'following oom events', (abortSignal) =>
        this.docker.getEvents({ ...(since !== undefined ? { since } : {}), filters, abortSignal } as Docker.GetEventsOptions),
      );
    } catch (e) {
      this.log?.debug({ err: errorText(e) }, 'engine events not followed; trying again');
      this.again();
      return;
    }
    if (!this.wanted) {
      (stream as { destroy?: () => void }).destroy?.();
      return;
    }
    this.stream = stream;
    this.connected = true;
    this.retryMs = RECONNECT_MIN_MS;
    // A resumed subscription replays the gap, so coverage goes on from where it began.
    if (this.coveredSince === null || since === undefined) this.coveredSince = Date.now();
    let pending = '';
    stream.on('data', (d: Buffer) => {
      pending += d.toString('utf8');
      let nl: number;
      while ((nl = pending.indexOf('\n')) >= 0) {
        this.take(pending.slice(0, nl));
        pending = pending.slice(nl + 1);
      }
    });
    const broken = () => {
      if (this.stream !== stream) return;
      this.stream = null;
      this.connected = false;
      if (!this.wanted) return;
      this.resumeAt = Math.floor(Date.now() / 1000) - 1;
      this.again();
    };
    stream.on('error', (e: unknown) => {
      this.log?.debug({ err: errorText(e) }, 'engine events broke off; reconnecting');
      broken();
    });
    stream.on('end', broken);
    stream.on('close', broken);
  }

  private again(): void {
    // Until it is back, runs that die are judged by the engine's history instead (see covers()).
    if (!this.wanted || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      void this.connect();
    }, this.retryMs);
    this.retry.unref();
    this.retryMs = Math.min(this.retryMs * 2, RECONNECT_MAX_MS);
  }

  private take(line: string): void {
    if (!line.trim()) return;
    let ev: EngineEvent;
    try {
      ev = JSON.parse(line) as EngineEvent;
    } catch {
      return;
    }
    if ((ev.Action ?? ev.status) !== 'oom') return;
    const id = ev.Actor?.ID ?? ev.id;
    if (!id) return;
    this.records.delete(id);
    this.records.add(id);
    if (this.records.size > RECORDS) this.records.delete(this.records.values().next().value!);
    for (const wake of [...(this.waiters.get(id) ?? [])]) wake();
  }
}

// The engine learns of a cgroup OOM kill from a separate event, which can land after wait()
// has returned (see above). So a memory-limited container that died by SIGKILL (137)
// without being cancelled is checked, for up to 10 s by the clock, for either sign (the `oom`
// event's record, State.OOMKilled) before concluding that it was not the OOM killer. Only such
// deaths wait; they are rare, and naming an OOM as such is worth the delay.
const OOM_SETTLE_MS = 10_000;
const OOM_INSPECT_MS = 250;

/** What the engine says of the exited container, OOMKilled set when its `oom` event was seen. */
export async function oomVerdict(
  container: Docker.Container,
  statusCode: number,
  events: OomEvents,
  settleMs: number = OOM_SETTLE_MS,
  answerMs: number = ENGINE_ANSWER_MS,
): Promise<Docker.ContainerInspectInfo> {
  const inspect = () => answered({ answerMs }, `inspecting container ${container.id}`, (abortSignal) => container.inspect({ abortSignal }));
  let info = await inspect();
  if (statusCode !== 137 || !info.HostConfig.Memory || info.State.OOMKilled) return info;
  const oom = () => ({ ...info, State: { ...info.State, OOMKilled: true } });
  const startedAt = Date.parse(info.State.StartedAt);
  const since = Math.floor(startedAt / 1000) || undefined;
  // Died where no subscription saw all of its life (before this process, in a gap): its event,
  // if any, is in the engine's history.
  const unwatched = () => !events.covers(startedAt);
  if (events.seen(container.id) || (unwatched() && (await events.history(container.id, since)))) return oom();
  // A deadline on the clock, not a count of tries: under load each try takes longer.
  const deadline = Date.now() + settleMs;
  for (let left = settleMs; left > 0; left = deadline - Date.now()) {
    if (await events.waitFor(container.id, Math.min(OOM_INSPECT_MS, left))) return oom();
    info = await inspect();
    if (info.State.OOMKilled) return info;
  }
  // The history up to the current second now reaches past the exit.
  if (unwatched() && (await events.history(container.id, since))) return oom();
  return info;
}
