import { invalid } from '../errors.js';

/**
 * Capabilities and broadcast topics are `/`-separated paths. Holding a path grants everything
 * under it: `/dms/job` covers `/dms/job/submit`, and `/` covers every path. Matching is by
 * whole segments, so `/dms/jo` covers neither `/dms/job` nor `/dms/jobs`.
 */

const PATH = /^\/(?:[^/\s]+(?:\/[^/\s]+)*)?$/;
export const MAX_PATH_LENGTH = 256;

/** Whether `text` is a well-formed capability path: leading `/`, no empty segments, no whitespace. */
export function isPath(text: string): boolean {
  return text.length <= MAX_PATH_LENGTH && PATH.test(text);
}

/** Checks and returns a capability path; a trailing `/` (other than `/` itself) is dropped. */
export function parsePath(text: string, what = 'capability'): string {
  const t = text.length > 1 && text.endsWith('/') ? text.slice(0, -1) : text;
  if (!isPath(t)) throw invalid(`${what} '${text.slice(0, 80)}' is not a path like /dms/job (leading /, no empty segments, at most ${MAX_PATH_LENGTH} characters)`);
  return t;
}

/** Whether holding `granted` grants `needed`. */
export function implies(granted: string, needed: string): boolean {
  if (granted === '/' || granted === needed) return true;
  return needed.length > granted.length && needed.charCodeAt(granted.length) === 47 /* '/' */ && needed.startsWith(granted);
}

/** Whether some path of `granted` grants `needed`. */
export const anyImplies = (granted: readonly string[], needed: string): boolean => granted.some((g) => implies(g, needed));

/** Whether every path of `narrower` is granted by some path of `broader` (a delegation may only narrow). */
export const covers = (broader: readonly string[], narrower: readonly string[]): boolean => narrower.every((n) => anyImplies(broader, n));
