/**
 * The last line between a component's fault and the node's process. Executors talk to engines
 * through libraries that report some failures as 'error' events on streams and requests they
 * create internally (docker-modem following a redirect, a socket reset mid-stream), and plugins
 * run code the node did not write (a timer that throws, a rejection nobody handles). One such
 * fault nobody listens to is an uncaught exception, which would take every job of the node down
 * and, for a job still pending, do it again at every restart.
 *
 * Each executor actor and each plugin actor owns one guard, installed when the actor starts and
 * removed when it stops. The work it does for an owner (an executor's calls for a job, a
 * plugin's start and handlers) runs inside `within`, and everything that work starts (requests,
 * streams, timers) carries its owner in the guard's async context. An uncaught exception or
 * unhandled rejection that arises there is handed to that owner (the job fails, the plugin's
 * fault is logged), and the node goes on. One that arises outside every guard's owners is a
 * fault of the node itself and still ends the process.
 *
 * Nothing is kept at module level: two nodes (or two executors) in one process each have their
 * own guards. The process's listener list is what they share, as the process is: the guards
 * find each other there, so exactly one of them ends the process for a fault none of them owns.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { errorText } from './errors.js';
import type { Logger } from './log.js';

interface Scope {
  /** Whom the work is done for: a job id, a plugin's name. */
  owner: string;
  /** Takes the fault (fails the job, logs the plugin's); called at most once per fault with `<kind> fault: <error>`. */
  fail(reason: string): void;
}

/** Marks a process listener as a guard's, so guards can tell whether another one owns a fault. */
const GUARD = Symbol.for('dms.faultGuard');
type GuardListener = ((e: unknown) => void) & { [GUARD]: FaultGuard };

const guardsListening = (): FaultGuard[] =>
  process.listeners('uncaughtException').flatMap((l) => ((l as Partial<GuardListener>)[GUARD] ? [(l as GuardListener)[GUARD]] : []));

export class FaultGuard {
  private readonly scope = new AsyncLocalStorage<Scope>();
  private listener: GuardListener | null = null;

  /** `kind` names the component in the fault's reason and log line: `executor`, `plugin`. */
  constructor(
    private readonly log: Logger,
    private readonly kind: string,
  ) {}

  /** Runs `fn` (and everything it sets going) on behalf of `owner`. */
  within<T>(owner: string, fail: (reason: string) => void, fn: () => T): T {
    return this.scope.run({ owner, fail }, fn);
  }

  /** Whom the current async context works for under this guard, if anyone. */
  currentOwner(): string | undefined {
    return this.scope.getStore()?.owner;
  }

  /** Adds the process-wide handlers (once). Returns a function that removes them. */
  install(): () => void {
    if (!this.listener) {
      const listener = Object.assign((e: unknown) => this.onFault(e), { [GUARD]: this });
      this.listener = listener;
      process.on('uncaughtException', listener);
      process.on('unhandledRejection', listener);
    }
    return () => this.uninstall();
  }

  uninstall(): void {
    if (!this.listener) return;
    process.off('uncaughtException', this.listener);
    process.off('unhandledRejection', this.listener);
    this.listener = null;
  }

  private onFault(e: unknown): void {
    const scope = this.scope.getStore();
    if (scope) {
      this.log.error({ owner: scope.owner, err: errorText(e) }, `${this.kind} fault: taken by ${scope.owner}, not the node`);
      scope.fail(`${this.kind} fault: ${errorText(e)}`);
      return;
    }
    // Another guard's owner, or nobody's: only the first guard listening speaks for the node.
    const guards = guardsListening();
    if (guards.some((g) => g.currentOwner() !== undefined) || guards[0] !== this) return;
    // Not a guarded component's: keep Node's own behaviour for a fault of the node. Said as the
    // node's, whichever guard happens to be the one listening first.
    this.log.fatal({ err: errorText(e) }, 'uncaught exception outside any job or plugin: the node stops');
    process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  }
}
