import { existsSync, readFileSync, unwatchFile, watchFile } from 'node:fs';
import { join } from 'node:path';
import { DmsError, errorText } from '../errors.js';
import { writeJsonAtomic } from '../files.js';
import { type Token, tokenFromText, tokenId, tokenToText } from './token.js';

/**
 * A node's trust anchors, kept in `<home>/anchors.json` (mode 0600):
 * - `root`: DIDs trusted fully; every token chain must start at one. `dms init` puts the
 *   home's operator here.
 * - `require`: tokens that authorize incoming calls by their audience without the caller
 *   attaching anything (what `dms cap grant` records).
 * - `provide`: tokens this home attaches to its outgoing calls (CLI, operator-signed REST).
 * - `revoke`: signed revocations.
 * The file is the single source: commands edit it, a running node re-reads it when it changes.
 */
export interface Anchors {
  root: string[];
  require: Token[];
  provide: Token[];
  revoke: Token[];
}

export type AnchorKind = Exclude<keyof Anchors, 'root'>;

export const ANCHORS_FILE = 'anchors.json';
export const anchorsPath = (home: string): string => join(home, ANCHORS_FILE);

const FILE_VERSION = 1;
const empty = (): Anchors => ({ root: [], require: [], provide: [], revoke: [] });

function list(value: unknown, name: string, path: string): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === 'string')) {
    throw new DmsError('invalid', `${path}: ${name} must be a list of strings`);
  }
  return value as string[];
}

/** Reads the anchors; a missing file is empty, a damaged one an error naming the file and entry. */
export function readAnchors(path: string): Anchors {
  if (!existsSync(path)) return empty();
  let data: Record<string, unknown>;
  try {
    data = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new DmsError('invalid', `${path}: not valid JSON (${(e as Error).message})`);
  }
  if (!data || typeof data !== 'object' || Array.isArray(data)) throw new DmsError('invalid', `${path}: must hold a JSON object`);
  const out = empty();
  out.root = list(data.root, 'root', path);
  for (const did of out.root) if (!/^did:key:z[1-9A-HJ-NP-Za-km-z]+$/.test(did)) throw new DmsError('invalid', `${path}: root '${did.slice(0, 80)}' is not a did:key`);
  for (const kind of ['require', 'provide', 'revoke'] as const) {
    out[kind] = list(data[kind], kind, path).map((text, i) => {
      try {
        return tokenFromText(text, `${kind}[${i}]`);
      } catch (e) {
        throw new DmsError('invalid', `${path}: ${errorText(e)}`);
      }
    });
  }
  return out;
}

/** Writes atomically (a reader never sees half a file), readable only by the owner. */
export function writeAnchors(path: string, a: Anchors): void {
  const body = {
    version: FILE_VERSION,
    root: a.root,
    require: a.require.map(tokenToText),
    provide: a.provide.map(tokenToText),
    revoke: a.revoke.map(tokenToText),
  };
  writeJsonAtomic(path, body, 0o600);
}

/** Read, change, write back. Returns what was written. */
export function updateAnchors(path: string, change: (a: Anchors) => void): Anchors {
  const a = readAnchors(path);
  change(a);
  writeAnchors(path, a);
  return a;
}

/** A home without anchors gets its operator as the one root (first `dms init` or start). */
export function ensureAnchors(path: string, operatorDid: string): Anchors {
  if (existsSync(path)) return readAnchors(path);
  const a = empty();
  a.root.push(operatorDid);
  writeAnchors(path, a);
  return a;
}

/** Adds a token to a list unless a token with the same id is there. Returns whether it was added. */
export function addToken(a: Anchors, kind: AnchorKind, t: Token): boolean {
  const id = tokenId(t);
  if (a[kind].some((x) => tokenId(x) === id)) return false;
  a[kind].push(t);
  return true;
}

/** Calls `onChange` with the new anchors whenever the file changes; a damaged file goes to `onError`. */
export function watchAnchors(path: string, onChange: (a: Anchors) => void, onError: (e: unknown) => void, intervalMs = 500): () => void {
  // watchFile polls stat: it survives the file being replaced by rename, which inotify-based
  // fs.watch does not, and costs one stat per interval.
  const listener = (cur: { mtimeMs: number; ino: number; size: number }, prev: { mtimeMs: number; ino: number; size: number }) => {
    if (cur.mtimeMs === prev.mtimeMs && cur.ino === prev.ino && cur.size === prev.size) return;
    try {
      onChange(readAnchors(path));
    } catch (e) {
      onError(e);
    }
  };
  watchFile(path, { interval: intervalMs, persistent: false }, listener);
  return () => unwatchFile(path, listener);
}
