/**
 * The provider's side of one deployment, as an xstate machine (machine `deployment`, instance
 * the job id, on the node's event stream):
 *
 *   reserved ──start──▶ running ──ended──▶ released
 *      │  └──release──────────────────────▶ released
 *      └──lease ran out (after lease_ms)──▶ released
 *
 * The resources themselves are held by the resource manager, whose lease ends on its own
 * clock: this machine can never keep them reserved. The bid that came before holds nothing.
 */
import { setup } from 'xstate';

export interface ProviderInput {
  jobId: string;
  /** Peer id of the node that asked. */
  requester: string;
  leaseMs: number;
}

export type ProviderEvent = { type: 'start' } | { type: 'release' } | { type: 'ended' };

export const providerMachine = setup({
  types: { context: {} as ProviderInput, events: {} as ProviderEvent, input: {} as ProviderInput },
  delays: { lease: ({ context }) => context.leaseMs },
}).createMachine({
  id: 'deployment',
  context: ({ input }) => input,
  initial: 'reserved',
  states: {
    reserved: {
      after: { lease: 'released' },
      on: { start: 'running', release: 'released' },
    },
    running: { on: { ended: 'released' } },
    released: { type: 'final' },
  },
});
