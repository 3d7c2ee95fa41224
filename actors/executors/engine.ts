/**
 * Requests to the Docker engine with a bound on its silence. An engine that accepts connections
 * and never answers (a wedged dockerd) held whoever asked for good: a job's start stayed
 * pending with its share held, a cancel never ended, an ensemble part's attach queued behind
 * a look that never came back. Each request here is given up once the engine has said nothing
 * for its bound, with an error naming the engine and what was asked. A request whose answer
 * rightly takes as long as the container (its exit, its output followed) is bounded in its
 * first answer only, the head of the engine's reply; a stream the engine feeds as it works (a
 * pull, an archive) also in the silence between two of its pieces.
 */
import type Docker from 'dockerode';
import { settledWithin } from '../../runtime/deadline.js';
import { DmsError } from '../../runtime/errors.js';
import type { OutputSpec } from '../../behaviors/jobs/files.js';
import type { OutputContent } from '../../behaviors/jobs/execution.js';

/** What the engine's client takes for one request (docker-modem's, through dockerode's types). */
type DialOptions = Parameters<Docker['modem']['dial']>[0];

/** How long one answer of the engine is waited for, unless a caller says otherwise. */
export const ENGINE_ANSWER_MS = 10_000;

/** The HTTP status of the engine's answer a request failed with (dockerode puts it on the error); none when it did not answer. */
export const statusOf = (e: unknown): number | undefined => (e as { statusCode?: number }).statusCode;

/** The engine, and how long each of its answers is waited for. */
export interface Engine {
  docker: Docker;
  answerMs: number;
}

/** What an unanswered request fails with: the engine named, and what was asked. */
export class EngineSilent extends DmsError {
  constructor(message: string) {
    super('unavailable', message);
  }
}

/**
 * One request to the engine, given up after `bound.answerMs` without its answer. Aborted where
 * dockerode takes a signal (not all of its calls do), so no socket stays open for the late
 * answer; the signal is aborted only then, never once the answer came, so a stream answered
 * lives on.
 */
export function answered<T>(bound: Pick<Engine, 'answerMs'>, what: string, call: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const unanswered = new AbortController();
  return settledWithin(call(unanswered.signal), bound.answerMs, () => {
    unanswered.abort();
    throw new EngineSilent(`the Docker engine did not answer within ${bound.answerMs} ms (${what})`);
  });
}

/** A stream of the engine's that can be let go of before its end. */
export type Heard<T> = AsyncIterable<T> & { destroy(): void };

/**
 * The pieces of a stream the engine answered with, failing once it says nothing more for `ms`
 * before the stream's end. Only the wait for the engine counts: a slow reader of the pieces is
 * not the engine's silence. The stream is destroyed when the reading stops, however it stops,
 * or when `destroy` is called (a reader that never began).
 */
export function heard<T>(source: AsyncIterable<T>, ms: number, what: string): Heard<T> {
  // Destroyed rather than returned: an iterator's return waits for the piece it awaits, which may never come.
  const destroy = (): void => (source as { destroy?: () => void }).destroy?.();
  async function* pieces(): AsyncGenerator<T> {
    const next = source[Symbol.asyncIterator]();
    try {
      for (;;) {
        const piece = await settledWithin(next.next(), ms, () => {
          throw new EngineSilent(`the Docker engine said nothing more for ${ms} ms (${what})`);
        });
        if (piece.done) return;
        yield piece.value;
      }
    } finally {
      destroy();
    }
  }
  return { [Symbol.asyncIterator]: pieces, destroy };
}

/**
 * One request made with the engine's client directly, given up as `answered` does: for what
 * dockerode's own calls cannot be asked (an image's inspection takes no signal, so the socket
 * of an answer that never came stayed open), or cannot tell apart (see exitOf).
 */
export function dialed<T>(engine: Engine, what: string, options: Omit<DialOptions, 'abortSignal'>): Promise<T> {
  return answered(engine, what, (abortSignal) =>
    new Promise<T>((resolve, reject) => {
      engine.docker.modem.dial({ options: {}, ...options, abortSignal }, (err: unknown, data: unknown) => (err ? reject(err) : resolve(data as T)));
    }),
  );
}

/** The engine's record of an image; a 404 when it has none. */
export function inspectImage(engine: Engine, image: string): Promise<Docker.ImageInspectInfo> {
  // The client's own image by that name, as its other image calls have it (its types call the name `id`).
  const { name } = engine.docker.getImage(image) as unknown as { name: string };
  return dialed(engine, `inspecting image ${image}`, { path: `/images/${name}/json`, method: 'GET', statusCodes: { 200: true, 404: 'no such image', 500: 'server error' } });
}

/** A tar of `output.path` in the container; not_found when the container has nothing there. */
export async function archiveOf(engine: Engine, container: Docker.Container, output: OutputSpec): Promise<OutputContent> {
  const what = `reading ${output.path} from the container`;
  try {
    const tar = await answered(engine, what, (abortSignal) => container.getArchive({ path: output.path, abortSignal }));
    // The engine names the archived path's last component first: that is the output's root.
    return { tar: heard(tar as unknown as AsyncIterable<Uint8Array>, engine.answerMs, what), strip: 1 };
  } catch (e) {
    if (statusOf(e) === 404) throw new DmsError('not_found', `${output.path} does not exist in the container`);
    throw new DmsError('unavailable', engineMessage(e).slice(0, 500), { cause: e });
  }
}

/**
 * A container's exit, as the engine's wait answers it, bounded in its first answer only: the
 * engine sends the head of its reply at once and the body when the container exits, which may
 * be days later. dockerode's own wait resolves with the body only, so the head cannot be told
 * apart from the end there; this asks the same thing as a stream.
 */
export async function exitOf(engine: Engine, container: Docker.Container): Promise<{ StatusCode: number }> {
  const body = await dialed<AsyncIterable<Buffer | string>>(engine, 'waiting for the container to exit', {
    path: `/containers/${container.id}/wait?`,
    method: 'POST',
    isStream: true,
    statusCodes: { 200: true, 400: 'bad parameter', 404: 'no such container', 500: 'server error' },
  });
  let text = '';
  for await (const piece of body) text += piece.toString();
  try {
    return JSON.parse(text) as { StatusCode: number };
  } catch {
    throw new DmsError('unavailable', `the Docker engine's answer to a wait is not JSON: ${text.slice(0, 200)}`);
  }
}

/** Removes a network; gone already is as good. One that still has containers stays (409/403), and false says so. */
export async function removeNetwork(engine: Engine, name: string): Promise<boolean> {
  try {
    await answered(engine, `removing network ${name}`, (abortSignal) => engine.docker.getNetwork(name).remove({ abortSignal }));
    return true;
  } catch (e) {
    const s = statusOf(e);
    if (s === 404) return true;
    if (s === 409 || s === 403) return false;
    throw e;
  }
}

/**
 * Removes one name of an image (the engine deletes the image once nothing names it); gone
 * already is as good. One a container uses, even a stopped one, stays (409), and false says so.
 */
export async function removeImage(engine: Engine, ref: string): Promise<boolean> {
  try {
    await answered(engine, `removing image ${ref}`, (abortSignal) => engine.docker.getImage(ref).remove({ abortSignal } as object));
    return true;
  } catch (e) {
    const s = statusOf(e);
    if (s === 404) return true;
    if (s === 409) return false;
    throw e;
  }
}

/** An error from the engine: dockerode puts the engine's message on it (and the HTTP status: statusOf). */
interface EngineError {
  json?: { message?: string } | null;
  message: string;
}
/** The engine's own words; on streamed requests docker-modem only has them inside its "(HTTP code …) … - " text. */
export const engineMessage = (e: unknown): string =>
  ((e as EngineError).json?.message ?? String((e as EngineError).message ?? e).replace(/^\(HTTP code \d+\) [^-]*- /, '')).trim();

/** Whether an engine answers, and if not why: for start-up decisions and for tests to skip. */
export async function probeDocker(docker: Docker): Promise<{ ok: true; version: string } | { ok: false; reason: string }> {
  try {
    const version = await docker.version();
    return { ok: true, version: version.Version };
  } catch (e) {
    return { ok: false, reason: `no Docker engine answers (${engineMessage(e)})` };
  }
}
