/**
 * The node's forwards to jobs' ports (inbox `forwards`, daemon/tunnels.ts; README "Ports and
 * tunnels"). A forward lasts as long as its job: this node's orchestrator tells the forwards
 * when a job that declares ports has ended, and they stop, rather than each asking after its job.
 */
import { z } from 'zod';
import { JobIdSchema } from './jobs.js';

export const FORWARDS_INBOX = 'forwards';

/**
 * What this node's orchestrator says to its forwards: outside `/dms/job` and every REST role
 * but admin's, so neither a peer nor a client can close another's forwards by claiming a job ended.
 */
export const FORWARDS_INTERNAL_CAPABILITY = '/dms/internal/forwards';

export const ForwardBehaviors = {
  /** A job that declares ports has ended, its end stored (local only). */
  ended: '/dms/forwards/ended',
} as const;

export const ForwardsEndedPayload = z.strictObject({ job_id: JobIdSchema });
