/**
 * Whether a job run here for another node is still wanted there: the provider asks the job's
 * requester (behavior /dms/deployment/wanted), and the requester answers about its own jobs.
 *
 * The requester tells a provider that missed a cancel again and again (its cancel outbox,
 * actors/executors/cancel-outbox.ts), but only the newest 1,024 for a day, and only while its
 * home lasts: past that, a provider back from a restart picked the container up again and ran it
 * on for good, holding its share, with nobody following it (test/multinode/still-wanted.test.ts).
 * So the provider asks too: about every job it picks up again at start-up, and about every job
 * whose requester has not polled it for `deployment.unfollowed_ask_ms` (a followed job is polled
 * every few seconds: its follower holds each poll for `follow_poll_ms` and counts the run lost
 * after `lost_after_ms` without an answer, so a job unpolled for minutes is one nobody follows).
 * A requester that answers the job ended there, runs it elsewhere, or does not know it, has it
 * stopped here and its share freed; one that does not answer is asked again a round later, and
 * the job runs on meanwhile, as it did before (the requester may come back).
 *
 * Who counts: the provider asks only the requester its own record names, and a reply is bound
 * to the node asked (runtime/actor.ts), so no other peer can have a job stopped by answering in
 * its place. The requester answers a node about a job only when the job was placed there (its
 * `node` or one of its attempts); to anyone else every job is `unknown`, the answer for a job
 * that never was, so a peer asking about ids learns nothing of other nodes' jobs, and what it
 * hears about its own jobs changes nothing anywhere else.
 */
import { DeploymentBehaviors, DEPLOYMENT_INBOX, WantedReply } from '../../behaviors/jobs/deployment.js';
import { JobBehaviors, JobListReply, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { isTerminal, type Job, JobSchema } from '../../behaviors/jobs/schema.js';
import type { Actor } from '../../runtime/actor.js';
import { rememberNewest } from '../../runtime/bounded-map.js';
import { DmsError, errorText } from '../../runtime/errors.js';
import type { Logger } from '../../runtime/log.js';
import { withRetries } from '../../runtime/retry.js';
import { at, type Envelope, isBroadcast } from '../../runtime/wire/envelope.js';

/** How long a requester has to answer; also a local hop's bound. */
const CALL_TTL_MS = 5_000;
/** A stop takes the engine's grace period and more. */
const STOP_TTL_MS = 600_000;
/**
 * At start-up a requester is asked before this node has reached its peers: a question that
 * could not be delivered is asked again over these pauses (15 s in all), then left to the rounds.
 */
const PICK_UP_PAUSES_MS = [1_000, 2_000, 4_000, 8_000];
/** Jobs run here for other nodes that are remembered; past it the oldest go unasked. */
const MAX_RUNS = 16_384;
/** Requesters asked at once in a round: a provider running jobs for many that went away dials them a few at a time. */
const REQUESTERS_AT_ONCE = 16;
/** Jobs one list answers (JobBehaviors.list's bound). */
const PAGE = 1_000;

// --- the requester's side ------------------------------------------------------------------

/** The requester's answer to `env`'s sender about `jobId`, read from this node's job record. */
export async function answerWanted(actor: Actor, env: Envelope, jobId: string): Promise<WantedReply> {
  if (isBroadcast(env)) throw new DmsError('forbidden', `${env.be} is taken only as a direct message to one node, never from a topic`);
  const asker = env.from.addr.host;
  // This node never asks itself; an envelope naming it comes through REST, whose callers read jobs with /dms/job/status.
  if (!asker || actor.system.isHere(asker)) throw new DmsError('forbidden', `${env.be} is asked by the nodes this node's jobs were placed on only`);
  const job = await actor.call(actor.local(ORCHESTRATOR_INBOX), JobBehaviors.status, { id: jobId }, JobSchema, { ttlMs: CALL_TTL_MS }).catch((e: unknown) => {
    if (e instanceof DmsError && e.kind === 'not_found') return null;
    throw e;
  });
  // Not this node's own job (one it runs for another), or never placed on the asker: to that node it does not exist.
  if (!job || job.requester !== null || !placedOn(job, asker)) return { job_id: jobId, answer: 'unknown' };
  if (isTerminal(job.status)) return { job_id: jobId, answer: 'ended', status: job.status };
  return { job_id: jobId, answer: job.node === asker ? 'following' : 'elsewhere' };
}

const placedOn = (job: Job, node: string) => job.node === node || job.attempts.some((a) => a.node === node);

// --- the provider's side -------------------------------------------------------------------

interface Run {
  requester: string;
  /** When its requester was last heard about it (a poll, an answer); 0: never by this process. */
  heardAt: number;
}

/** What the provider's side does through envelopes (stillWantedOver); a test gives its own. */
export interface StillWantedIo {
  /** The requester's answer about the job; throws as the call does. */
  ask(requester: string, jobId: string): Promise<WantedReply>;
  /** Stops the job here, the share freed with its end. */
  stop(jobId: string, reason: string): void;
  /** The jobs not ended here that other nodes placed. */
  placedHere(): Promise<{ id: string; requester: string }[]>;
}

export interface StillWantedOptions {
  io: StillWantedIo;
  log: Pick<Logger, 'info' | 'warn'>;
  /** A job its requester has not polled this long is asked about (`deployment.unfollowed_ask_ms`); also the rounds' period. */
  unfollowedMs: number;
  /** Pauses before asking again a requester that could not be reached at start-up (default PICK_UP_PAUSES_MS). */
  pickUpPauses?: readonly number[];
}

export class StillWanted {
  private readonly runs = new Map<string, Run>();
  private readonly stopping = new AbortController();
  private readonly timer: NodeJS.Timeout;
  private asking = false;

  constructor(private readonly o: StillWantedOptions) {
    this.timer = setInterval(() => void this.round(), o.unfollowedMs).unref();
  }

  close(): void {
    clearInterval(this.timer);
    this.stopping.abort();
  }

  /** Started here for `requester` (another node), which follows it from now on. */
  started(jobId: string, requester: string): void {
    rememberNewest(this.runs, jobId, { requester, heardAt: Date.now() }, MAX_RUNS);
  }

  /** Its requester polled it, or is holding a poll of it open. */
  heard(jobId: string): void {
    const run = this.runs.get(jobId);
    if (run) run.heardAt = Date.now();
  }

  ended(jobId: string): void {
    this.runs.delete(jobId);
  }

  /**
   * At start-up, once the orchestrator has picked up what the previous process left: every job
   * not ended here that another node placed is asked about at once.
   */
  async pickUp(): Promise<void> {
    let picked = 0;
    for (const { id, requester } of await this.o.io.placedHere()) {
      if (this.runs.has(id)) continue;
      rememberNewest(this.runs, id, { requester, heardAt: 0 }, MAX_RUNS);
      picked++;
    }
    if (picked === 0) return;
    this.o.log.info({ jobs: picked }, 'jobs run for other nodes picked up again: asking their requesters whether they are still wanted');
    await this.round(this.o.pickUpPauses ?? PICK_UP_PAUSES_MS);
  }

  /** Asks about every job unheard for `unfollowedMs`, each requester's in turn, REQUESTERS_AT_ONCE requesters at once. */
  private async round(pauses: readonly number[] = []): Promise<void> {
    if (this.asking) return;
    this.asking = true;
    try {
      const due = new Map<string, string[]>();
      const now = Date.now();
      for (const [jobId, run] of this.runs) {
        if (now - run.heardAt < this.o.unfollowedMs) continue;
        const ids = due.get(run.requester);
        if (ids) ids.push(jobId);
        else due.set(run.requester, [jobId]);
      }
      const queue = [...due];
      const next = async (): Promise<void> => {
        for (let item = queue.shift(); item; item = queue.shift()) await this.askAbout(item[0], item[1], pauses);
      };
      await Promise.all(Array.from({ length: Math.min(REQUESTERS_AT_ONCE, queue.length) }, next));
    } finally {
      this.asking = false;
    }
  }

  /** Asks `requester` about its jobs here one by one; one unanswered leaves the rest for the next round. */
  private async askAbout(requester: string, ids: string[], pauses: readonly number[]): Promise<void> {
    for (const jobId of ids) {
      if (this.stopping.signal.aborted) return;
      let reply: WantedReply;
      try {
        reply = await withRetries(() => this.ask(requester, jobId), {
          pauses,
          retryable: (e) => e instanceof DmsError && e.kind === 'unroutable',
          signal: this.stopping.signal,
        });
      } catch (e) {
        this.o.log.info({ job: jobId, requester, err: errorText(e) }, 'requester did not answer whether the job is still wanted: it runs on');
        return;
      }
      // Reached: its other jobs are asked without waiting for a connection.
      pauses = [];
      const run = this.runs.get(jobId);
      if (!run) continue;
      if (reply.answer === 'following') {
        run.heardAt = Date.now();
        continue;
      }
      this.runs.delete(jobId);
      const reason = `its requester ${requester} answers that ${answerText(reply)}`;
      this.o.log.warn({ job: jobId, reason }, 'job no longer wanted by its requester: stopping it');
      this.o.io.stop(jobId, reason);
    }
  }

  private async ask(requester: string, jobId: string): Promise<WantedReply> {
    const reply = await this.o.io.ask(requester, jobId);
    // An answer about another job says nothing about this one.
    if (reply.job_id !== jobId) throw new DmsError('invalid', `answered about job ${reply.job_id}, not job ${jobId}`);
    return reply;
  }
}

/** What the requester's answer says, for the stop's reason. */
const answerText = (reply: WantedReply): string =>
  ({
    following: 'it follows the job here',
    ended: `the job has ended there (${reply.status ?? 'its status not given'})`,
    elsewhere: 'it no longer follows the job here (placed on another node, or being placed again)',
    unknown: 'it does not know the job',
  })[reply.answer];

/** The provider's side over this node's actors: requesters asked through their deployment actors, jobs read and stopped through the orchestrator. */
export function stillWantedOver(actor: Actor, log: Logger, unfollowedMs: number): StillWanted {
  const orchestrator = actor.local(ORCHESTRATOR_INBOX);
  const io: StillWantedIo = {
    ask: (requester, jobId) => actor.call(at(DEPLOYMENT_INBOX, requester), DeploymentBehaviors.wanted, { job_id: jobId }, WantedReply, { ttlMs: CALL_TTL_MS }),
    stop: (jobId, reason) => {
      actor.call(orchestrator, JobBehaviors.cancel, { id: jobId, reason }, JobSchema, { ttlMs: STOP_TTL_MS }).catch((e: unknown) => {
        // Ended meanwhile: nothing left to stop.
        if (!(e instanceof DmsError && e.kind === 'conflict')) log.warn({ job: jobId, err: errorText(e) }, 'a job no longer wanted could not be stopped');
      });
    },
    placedHere: async () => {
      const found: { id: string; requester: string }[] = [];
      for (let offset = 0; ; ) {
        const page = await actor.call(orchestrator, JobBehaviors.list, { status: ['pending', 'running'], order: 'asc', limit: PAGE, offset }, JobListReply, { ttlMs: CALL_TTL_MS });
        for (const job of page.jobs) if (job.requester !== null && !actor.system.isHere(job.requester)) found.push({ id: job.id, requester: job.requester });
        offset += page.jobs.length;
        if (page.jobs.length === 0 || offset >= page.total) return found;
      }
    },
  };
  return new StillWanted({ io, log, unfollowedMs });
}
