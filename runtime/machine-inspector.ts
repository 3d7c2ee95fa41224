import { type AnyActorLogic, createActor, type Actor as MachineActor, type ActorOptions as MachineOptions, type InspectionEvent, type Subscription } from 'xstate';

/** A machine of this node moved from one state to another (dev mode's `transition` event). */
export interface Transition {
  type: 'transition';
  actor: string;
  machine: string;
  instance?: string;
  from: string;
  to: string;
  from_path?: string;
  to_path?: string;
  event: string;
}

type AnyMachine = MachineActor<AnyActorLogic>;

/** Machines made before ended ones are first looked for. */
const MIN_SWEEP = 64;

/**
 * The node's one inspector of the xstate machines its actors make: each change of a machine's
 * state (and of the machines it invokes) becomes a `transition` event, while anyone watches.
 *
 * xstate builds an inspection event for every event, microstep, action and snapshot of a machine
 * that has an inspector (several per job step), so the inspector is attached only while
 * `watched()` says someone listens: to each running machine when watching starts, to each new
 * one while it goes on, and taken off every machine when watching ends. Unwatched, a null job
 * spent 3–6 % of its CPU on inspection nobody read (bench/RESULTS.md, bench:vitals, fourteenth session).
 * A machine that was running before watching started reports from the state it was in then.
 */
export class MachineInspector {
  /** Root machines made here and not yet ended, with the inspector's subscription while attached. */
  private readonly running = new Map<AnyMachine, Subscription | null>();
  /** Owner (an inbox) of each machine, by the xstate system's root session. */
  private readonly owners = new Map<string, string>();
  /** The name its owner gave a machine (`id`: a job id, a peer id), by session id. */
  private readonly names = new Map<string, string>();
  /** Each inspected machine's last state, by session id: the `from` of its next transition. */
  private readonly states = new Map<string, string>();
  private attached = false;
  /** How many running machines make the next sweep. */
  private sweepAt = MIN_SWEEP;

  constructor(
    private readonly watched: () => boolean,
    private readonly emit: (t: Transition) => void,
  ) {}

  /** Creates (does not start) an xstate actor owned by the actor at inbox `owner`. */
  machine<L extends AnyActorLogic>(owner: string, logic: L, options: MachineOptions<L> = {} as MachineOptions<L>): MachineActor<L> {
    this.sync();
    const ref = createActor(logic, options);
    const root = ref as AnyMachine;
    this.owners.set(ref.sessionId, owner);
    if (options.id) this.names.set(ref.sessionId, options.id);
    // Attached before it starts, so its first state is seen as it is entered.
    this.running.set(root, this.attached ? ref.system.inspect(this.inspect) : null);
    if (this.running.size >= this.sweepAt) this.sweep();
    return ref;
  }

  /** Machines made here that have not ended. */
  count(): number {
    this.sweep();
    return this.running.size;
  }

  /** Attaches to every running machine when watching started, detaches when it stopped. */
  sync(): void {
    const watched = this.watched();
    if (watched === this.attached) return;
    this.attached = watched;
    this.sweep();
    for (const [ref, sub] of this.running) {
      sub?.unsubscribe();
      if (watched) {
        this.seed(ref);
        this.running.set(ref, ref.system.inspect(this.inspect));
      } else this.running.set(ref, null);
    }
    if (!watched) this.states.clear();
  }

  /** The states a running machine and the machines it invoked are in, as the `from` of their next transitions. */
  private seed(ref: { sessionId: string; getSnapshot(): unknown }): void {
    const snapshot = ref.getSnapshot() as { value?: unknown; status?: string; children?: Record<string, unknown> };
    if (snapshot.value === undefined || snapshot.status !== 'active') return;
    this.states.set(ref.sessionId, statePath(snapshot.value));
    for (const child of Object.values(snapshot.children ?? {})) {
      if (child && typeof (child as { getSnapshot?: unknown }).getSnapshot === 'function') this.seed(child as { sessionId: string; getSnapshot(): unknown });
    }
  }

  /**
   * Drops the machines that ended (a final state, stopped, or failed), each time as many more
   * were made as were running after the last sweep: a constant cost per machine. Found by their
   * status rather than told by a subscription: an observer of a machine's end must also observe
   * its error, and one that did would change how xstate reports a failure nobody else handles.
   */
  private sweep(): void {
    const ended: string[] = [];
    for (const ref of this.running.keys()) {
      if (ref.getSnapshot().status === 'active') continue;
      this.running.delete(ref);
      ended.push(ref.sessionId);
    }
    this.sweepAt = Math.max(MIN_SWEEP, 2 * this.running.size);
    if (ended.length === 0) return;
    // A machine is 'done' before xstate reports its final state to the inspector, which may be
    // still to come in this turn (a sweep from inside an observer of its end): its names stay
    // until that report is made. An inspector left on an ended machine is never called again.
    queueMicrotask(() => {
      for (const id of ended) {
        this.owners.delete(id);
        this.names.delete(id);
        this.states.delete(id);
      }
    });
  }

  /** Arrow: xstate calls it unbound. */
  private readonly inspect = (ev: InspectionEvent): void => {
    if (ev.type !== '@xstate.snapshot') return;
    // The last watcher left since: nothing more to build, and nothing attached any more.
    if (!this.watched()) return this.sync();
    const snapshot = ev.snapshot as { value?: unknown; status?: string; machine?: { id: string } };
    // Only machines have a state value; promise and callback actors do not.
    if (snapshot.value === undefined) return;
    const id = ev.actorRef.sessionId;
    // A nested state is its dotted path (`pending.offering`); `from`/`to` name the top-level
    // states, so readers of the top level (the job's lane, its stored status) see one step
    // where the machine moves within a state, and the paths say where inside.
    const path = statePath(snapshot.value);
    const fromPath = this.states.get(id);
    if (snapshot.status === 'active') this.states.set(id, path);
    else this.states.delete(id);
    if (fromPath === path) return;
    // A machine its owner named, or a child a machine spawned under an id of its own (an ensemble's parts).
    const instance = this.names.get(id) ?? (ev.rootId !== id ? childName(ev.actorRef) : undefined);
    const to = topState(path);
    const from = fromPath === undefined ? '(start)' : topState(fromPath);
    this.emit({
      type: 'transition',
      actor: this.owners.get(ev.rootId) ?? 'unknown',
      machine: snapshot.machine?.id ?? (ev.actorRef as { id?: string }).id ?? 'machine',
      ...(instance === undefined ? {} : { instance }),
      from,
      to,
      ...(fromPath !== undefined && fromPath !== from ? { from_path: fromPath } : {}),
      ...(path !== to ? { to_path: path } : {}),
      event: ev.event.type,
    });
  };
}

/** A machine's state value as a dotted path (`pending.offering`); parallel regions joined by `,`. */
function statePath(value: unknown): string {
  if (typeof value === 'string') return value;
  if (value === null || typeof value !== 'object') return String(value);
  return Object.entries(value)
    .map(([key, child]) => (child && (typeof child === 'string' || Object.keys(child).length > 0) ? `${key}.${statePath(child)}` : key))
    .join(',');
}

/** The top-level state of a dotted path. */
const topState = (path: string): string => path.split(/[.,]/, 1)[0]!;

/** The id a machine gave a child it spawned, when it gave one (xstate names the others `x:<n>`). */
function childName(ref: unknown): string | undefined {
  const id = (ref as { id?: unknown }).id;
  return typeof id === 'string' && !/^x:\d+$/.test(id) ? id : undefined;
}
