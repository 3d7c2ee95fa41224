/**
 * Starts a node's parts in dependency order and stops them in reverse. When a step fails,
 * every part already started is stopped, newest first, before the error goes on: a failed
 * start leaves no database open, no port bound, no timer running.
 */
import type { Component } from './component.js';
import { DmsError, errorText } from './errors.js';
import type { Logger } from './log.js';

interface Started {
  step: string;
  stop: () => Promise<void> | void;
}

export class StartOrder {
  private readonly started: Started[] = [];

  constructor(private readonly log: Logger) {}

  /**
   * Runs one start-up step; `stop` undoes it at shutdown. A DmsError from the step is already
   * worded for the user (it names the setting); any other fault is named by its step.
   */
  async step<T>(step: string, start: () => Promise<T> | T, stop?: (value: T) => Promise<void> | void): Promise<T> {
    let value: T;
    const t0 = performance.now();
    try {
      value = await start();
    } catch (e) {
      this.log.debug({ step, err: errorText(e) }, 'start-up step failed; stopping what started');
      await this.stop();
      if (e instanceof DmsError) throw Object.assign(e, { step });
      throw Object.assign(new DmsError('unavailable', `start-up failed at ${step}: ${errorText(e)}`, { cause: e }), { step });
    }
    // What `dms start` waits for, step by step: the figures behind bench:vitals' start times.
    this.log.debug({ step, ms: Math.round(performance.now() - t0) }, 'start-up step done');
    if (stop) this.started.push({ step, stop: () => stop(value) });
    return value;
  }

  /** Makes and starts a component actor as one step, named by its inbox. */
  component<Api extends object>(name: string, make: () => Promise<Component<Api>>): Promise<Component<Api>> {
    return this.step(
      `actor ${name}`,
      async () => {
        const made = await make();
        await made.start();
        return made;
      },
      (c) => c.stop(),
    );
  }

  /** Stops everything started, newest first; one part failing to stop does not keep the others running. */
  async stop(): Promise<void> {
    while (this.started.length > 0) {
      const { step, stop } = this.started.pop()!;
      try {
        await stop();
      } catch (e) {
        this.log.warn({ step, err: errorText(e) }, 'did not stop cleanly');
      }
    }
  }
}
