/**
 * Cancels of jobs placed elsewhere that their providers have not confirmed
 * (actors/executors/cancel-outbox.ts), one per job. A cancel is stored before it is answered:
 * kept in memory only, a restart of the requester forgot it, and the provider, back, ran on a
 * job its requester had answered cancelled.
 */
import type { MikroORM } from '@mikro-orm/sqlite';
import { dateColumn, withConnection } from './connection.js';

export interface WaitingCancel {
  job_id: string;
  /** The provider the cancel is for. */
  node: string;
  reason: string;
  /** When the run was given up (ms since the epoch). */
  since: number;
}

export interface StoredCancel extends WaitingCancel {
  /**
   * The job is unfinished on that same node again (placed anew there, pinned): the run there is
   * its requester's own now, not one to cancel. A start there forgets the cancel (the outbox's
   * `forget`), but one begun by its placement's reserve may have been made before the node died.
   */
  placed_again: boolean;
}

export class WaitingCancelRepository {
  constructor(private readonly orm: MikroORM) {}

  /** Every stored cancel, oldest first. */
  async list(): Promise<StoredCancel[]> {
    return withConnection(this.orm, async (conn) => {
      const rows = await conn.all(
        'select c.`job_id`, c.`node`, c.`reason`, c.`since`, ' +
          "(j.`node` = c.`node` and j.`status` not in ('completed', 'failed')) as `placed_again` " +
          'from `waiting_cancel` c left join `job` j on j.`id` = c.`job_id` order by c.`since`, c.`job_id`',
        [],
      );
      return rows.map((r) => ({ job_id: String(r.job_id), node: String(r.node), reason: String(r.reason), since: dateColumn(r.since).getTime(), placed_again: Number(r.placed_again) === 1 }));
    });
  }

  /** Stores `cancel` in place of the job's earlier one, keeping the newest `keep` of all. */
  async put(cancel: WaitingCancel, keep: number): Promise<void> {
    await withConnection(this.orm, (conn) =>
      conn.commit([
        conn.format('insert or replace into `waiting_cancel` (`job_id`, `node`, `reason`, `since`) values (?, ?, ?, ?)', [cancel.job_id, cancel.node, cancel.reason, cancel.since]),
        conn.format('delete from `waiting_cancel` where `job_id` not in (select `job_id` from `waiting_cancel` order by `since` desc, `job_id` desc limit ?)', [keep]),
      ]),
    );
  }

  /** Removes the job's cancel; with `since`, only that one (a newer one stored meanwhile stays). */
  async remove(jobId: string, since?: number): Promise<void> {
    const [where, params] = since === undefined ? ['`job_id` = ?', [jobId]] : ['`job_id` = ? and `since` = ?', [jobId, since]];
    await withConnection(this.orm, (conn) => conn.commit([conn.format(`delete from \`waiting_cancel\` where ${where}`, params)]));
  }
}
