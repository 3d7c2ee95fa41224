import { DmsError, notFound } from '../../runtime/errors.js';
import type { Executor } from './types.js';

/** Executors by name: the node registers docker and null, plugins add their own. */
export class ExecutorRegistry {
  private readonly executors = new Map<string, Executor>();

  register(executor: Executor): void {
    if (this.executors.has(executor.name)) {
      throw new DmsError('conflict', `an executor named "${executor.name}" is already registered`);
    }
    this.executors.set(executor.name, executor);
  }

  has(name: string): boolean {
    return this.executors.has(name);
  }

  get(name: string): Executor {
    const executor = this.executors.get(name);
    if (!executor) throw notFound(`no executor named "${name}" (available: ${this.names().join(', ') || 'none'})`);
    return executor;
  }

  names(): string[] {
    return [...this.executors.keys()];
  }

  all(): Executor[] {
    return [...this.executors.values()];
  }
}
