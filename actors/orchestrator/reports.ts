/**
 * What the orchestrator tells this node's actors that follow its jobs, once a change is stored:
 * the ensemble actor how a part stands, and the forwards (inbox `forwards`) that a job with
 * ports has ended. They are told, so none of them polls the job table; each envelope is sent
 * only to an actor that can have something to do with the job.
 */
import { ENSEMBLE_INBOX, PartBehaviors } from '../../behaviors/ensembles/schema.js';
import { ForwardBehaviors, FORWARDS_INBOX } from '../../behaviors/jobs/forwards.js';
import { isTerminal, type Job } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';

export class JobReports {
  constructor(
    private readonly actor: Actor,
    private readonly log: Logger,
  ) {}

  /** A job's stored status or node changed; `exclude` is read only for a part, which names it. */
  changed(job: Job, exclude: () => readonly string[]): void {
    this.part(job, exclude);
    this.ended(job);
  }

  /** Its forwards stop: a job without ports can have none, and costs no envelope. */
  ended(job: Job): void {
    if (!isTerminal(job.status) || job.ports.length === 0) return;
    void this.actor
      .tell(this.actor.local(FORWARDS_INBOX), ForwardBehaviors.ended, { job_id: job.id })
      .catch((e: unknown) => this.log.warn({ job: job.id, err: errorText(e) }, 'forwards not told of the end of their job'));
  }

  private part(job: Job, exclude: () => readonly string[]): void {
    if (!job.ensemble || !job.part || job.requester !== null) return;
    // A part back to pending says why (its node lost it or refused its start): its ensemble names it.
    const error = job.error ?? (job.status === 'pending' ? job.pending_reason : null);
    const payload = { job_id: job.id, ensemble: job.ensemble, part: job.part, status: job.status, node: job.node, error, exclude: exclude().slice(-64) };
    void this.actor.tell(this.actor.local(ENSEMBLE_INBOX), PartBehaviors.changed, payload).catch((e: unknown) => this.log.warn({ job: job.id, err: errorText(e) }, 'ensemble not told of its part'));
  }
}
