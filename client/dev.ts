/**
 * The node's dev stream as an async iterator: every envelope in and out of its actors, every
 * state machine transition, mailbox depths (behaviors/dev.ts). Dev mode only: a node not in
 * dev mode answers 404.
 */
import * as z from 'zod';
import { DEV_STAGES_PATH, DEV_STREAM_PATH, DevEvent, type DevStreamFilters, StageFigures } from '../behaviors/dev.js';
import { ClientError } from './errors.js';
import type { RestClient } from './rest.js';

export type { DevEvent, DevStreamFilters } from '../behaviors/dev.js';

/** The query string of `filters` (lists joined by commas). */
export function devStreamPath(filters: DevStreamFilters = {}): string {
  const q = new URLSearchParams();
  for (const [key, values] of Object.entries(filters)) if (values && values.length > 0) q.set(key, values.join(','));
  const query = q.toString();
  return query ? `${DEV_STREAM_PATH}?${query}` : DEV_STREAM_PATH;
}

/** Yields the stream's events until the node ends it or `signal` aborts. */
export async function* watchDevStream(rest: RestClient, filters: DevStreamFilters = {}, signal?: AbortSignal): AsyncGenerator<DevEvent> {
  const path = devStreamPath(filters);
  try {
    for await (const ev of rest.events(path, { signal })) {
      if (ev.event !== 'dms') continue;
      let parsed: ReturnType<typeof DevEvent.safeParse>;
      try {
        parsed = DevEvent.safeParse(JSON.parse(ev.data));
      } catch {
        throw new ClientError({ kind: 'protocol', url: rest.url + path, message: 'the dev stream sent an event that is not JSON' });
      }
      // An event type this client does not know yet (a newer node) is skipped, not an error.
      if (parsed.success) yield parsed.data;
    }
  } catch (e) {
    if (signal?.aborted) return;
    throw e;
  }
}

/**
 * The node's stage timings (`general.stage_timings`): count, mean, p50 and p99 of each stage an
 * envelope passes, since start or the last reset. A node without them answers 404.
 */
export async function stageTimings(rest: RestClient): Promise<z.output<typeof StageFigures>> {
  const answer = StageFigures.safeParse(await rest.get<unknown>(DEV_STAGES_PATH));
  if (!answer.success) throw new ClientError({ kind: 'protocol', url: rest.url + DEV_STAGES_PATH, message: 'the node answered stage timings in a shape this client does not know' });
  return answer.data;
}

/** Starts the node's stage timings afresh. */
export async function resetStageTimings(rest: RestClient): Promise<void> {
  await rest.text('DELETE', DEV_STAGES_PATH);
}
