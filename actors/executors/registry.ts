import { DmsError, notFound } from '../../runtime/errors.js';
import type { Executor } from '../../behaviors/jobs/execution.js';

/**
 * Executors by name. The orchestrator keeps one of the executor actors it may use (each as
 * the client that asks it by envelopes); anything with a name can be listed.
 */
export class ExecutorRegistry<E extends { readonly name: string } = Executor> {
  private readonly executors = new Map<string, E>();

  register(executor: E): void {
    if (this.executors.has(executor.name)) {
      throw new DmsError('conflict', `an executor named "${executor.name}" is already registered`);
    }
    this.executors.set(executor.name, executor);
  }

  has(name: string): boolean {
    return this.executors.has(name);
  }

  get(name: string): E {
    const executor = this.executors.get(name);
    if (!executor) throw notFound(`no executor named "${name}" (available: ${this.names().join(', ') || 'none'})`);
    return executor;
  }

  names(): string[] {
    return [...this.executors.keys()];
  }

  all(): E[] {
    return [...this.executors.values()];
  }
}
