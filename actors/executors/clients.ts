import { DmsError, notFound } from '../../runtime/errors.js';

/**
 * The executors jobs may name, by name, as the orchestrator reaches them: each the client that
 * asks an executor actor by envelopes, never the executor itself.
 */
export class ExecutorClients<E extends { readonly name: string }> {
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
