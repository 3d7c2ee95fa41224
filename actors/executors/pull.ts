/**
 * One image pulled through the engine, its progress told as it comes. A pull rightly lasts
 * minutes; what is bounded is the engine's silence, which a registry slow to answer also makes
 * (the engine's first words come once the image is found). A `guard` may end the pull on what
 * its progress says (the image bound: ./image-cache.ts): the engine's stream is let go of, which
 * the engine takes as the pull's cancellation.
 */
import { Readable } from 'node:stream';
import type Docker from 'dockerode';
import type { PullProgress } from '../../behaviors/jobs/execution.js';
import { DmsError } from '../../runtime/errors.js';
import { answered, engineMessage, heard } from './engine.js';

/** One line of the engine's pull progress. */
export interface PullEvent {
  status?: string;
  id?: string;
  progressDetail?: { current?: number; total?: number };
  error?: string;
}

/**
 * How long a pull may go without a word from the engine. Longer than one answer's bound: the
 * engine says nothing until the registry named the image, and its own dial of a registry gives
 * up after 30 s, which is the engine's answer to give.
 */
export const PULL_QUIET_MS = 60_000;

export interface PullOptions {
  quietMs?: number;
  onProgress?: (event: PullProgress) => void;
  /** An error to end the pull with, on a line of its progress; none lets it go on. */
  guard?: (event: PullEvent) => DmsError | undefined;
}

export async function pullImage(docker: Docker, image: string, opts: PullOptions = {}): Promise<void> {
  const cannotPull = (reason: string) => new DmsError('unavailable', `image ${image} is not present and could not be pulled: ${reason}`);
  const what = `pulling image ${image}`;
  const quiet = { answerMs: opts.quietMs ?? PULL_QUIET_MS };
  let stream: NodeJS.ReadableStream;
  try {
    stream = await answered(quiet, what, (abortSignal) => docker.pull(image, { abortSignal }));
  } catch (e) {
    throw cannotPull(engineMessage(e));
  }
  const lines = heard(stream as AsyncIterable<Buffer>, quiet.answerMs, what);
  await new Promise<void>((resolve, reject) => {
    docker.modem.followProgress(
      Readable.from(lines),
      (err: unknown, events: PullEvent[]) => {
        // The engine reports a failed pull inside the stream with a 200 status.
        const failure = err ? engineMessage(err) : events.find((ev) => ev.error)?.error;
        if (failure) return reject(cannotPull(failure));
        resolve();
      },
      (ev: PullEvent) => {
        if (ev.error) return;
        const stop = opts.guard?.(ev);
        if (stop) {
          // Settled first: what the stream's end then reports is not the reason.
          reject(stop);
          lines.destroy();
          return;
        }
        opts.onProgress?.({ status: ev.status ?? '', id: ev.id, current: ev.progressDetail?.current, total: ev.progressDetail?.total });
      },
    );
  });
}
