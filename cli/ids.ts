/**
 * Short ids: wherever the CLI takes the id of a job, an allocation or an API key, any unique
 * prefix of it will do, as lists print only the first characters. The node has no prefix
 * look-up, so the ids are listed and matched here.
 */
import { CliError } from './context.js';
import type { RestClient } from '../client/rest.js';

/** How many characters of an id lists print (the whole id with --wide or --json). */
export const SHORT_ID_LENGTH = 8;

export const shortId = (id: string): string => id.slice(0, SHORT_ID_LENGTH);

/** The one id of `ids` that starts with `given`; refused when none or several do. */
export function pickByPrefix(kind: string, given: string, ids: readonly string[]): string {
  const prefix = given.trim().toLowerCase();
  if (!prefix) throw new CliError(`give a ${kind} id`);
  const exact = ids.find((id) => id === prefix);
  if (exact) return exact;
  const matches = [...new Set(ids.filter((id) => id.startsWith(prefix)))];
  if (matches.length === 1) return matches[0];
  if (matches.length === 0) throw new CliError(`no ${kind} id starts with '${prefix}'`);
  return ambiguous(prefix, `${kind}s`, matches);
}

function ambiguous(prefix: string, kinds: string, matches: string[]): never {
  throw new CliError(`'${prefix}' matches ${matches.length} ${kinds}: ${matches.join(', ')}; give more characters`);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** The node's list pages are at most this long (MAX_LIST_LIMIT of the jobs behaviors). */
const PAGE = 1000;
/** The node's ensemble list pages are at most this long (LIST_MAX of the ensembles actor). */
export const ENSEMBLE_PAGE = 100;

/** A whole job id is used as given (an unknown one is the node's 404); a prefix is looked up. */
export async function resolveJobId(rest: RestClient, given: string): Promise<string> {
  if (UUID.test(given.trim())) return given.trim();
  // Oldest first: a job submitted meanwhile lands after the pages already read, not in them.
  const { items } = await rest.everyPage<{ id: string }>(`/api/v1/jobs?limit=${PAGE}&order=asc`);
  return pickByPrefix('job', given, items.map((j) => j.id));
}

/**
 * Every ensemble on the node, newest first. One made while the pages are read shifts them by
 * one, so the ensemble at a page's edge comes twice: kept once.
 */
export async function everyEnsemble<T extends { id: string }>(rest: RestClient): Promise<{ items: T[]; total: number }> {
  const { items, total } = await rest.everyPage<T>(`/api/v1/ensembles?limit=${ENSEMBLE_PAGE}`);
  const seen = new Set<string>();
  return { items: items.filter((e) => !seen.has(e.id) && seen.add(e.id)), total };
}

/**
 * A whole ensemble id is used as given; a prefix, or else the ensemble's name (what `ensemble
 * deploy` printed beside the id), is looked up among every ensemble. A name several ensembles
 * share means the one of them not yet ended, when there is exactly one (the same file deployed
 * again after the last run ended); otherwise it is refused, naming them: cancelling one of
 * several live ones by a guess would be worse than asking.
 */
export async function resolveEnsembleId(rest: RestClient, given: string): Promise<string> {
  if (UUID.test(given.trim())) return given.trim();
  const { items: list } = await everyEnsemble<{ id: string; name: string; status: string }>(rest);
  const ids = list.map((e) => e.id);
  const prefix = given.trim().toLowerCase();
  const matches = prefix ? ids.filter((id) => id.startsWith(prefix)) : [];
  if (matches.length === 1) return matches[0];
  const name = given.trim();
  const named = list.filter((e) => e.name === name);
  if (named.length === 1) return named[0].id;
  const live = named.filter((e) => e.status !== 'completed' && e.status !== 'failed');
  if (named.length > 1 && live.length === 1) return live[0].id;
  if (named.length > 1) throw new CliError(`${named.length} ensembles are named '${name}': ${named.map((e) => `${shortId(e.id)} (${e.status})`).join(', ')}; give its id`);
  if (prefix && matches.length === 0) throw new CliError(`no ensemble id starts with '${prefix}', and none is named '${name}'`);
  // No id, or one several ids start with: the prefix's own refusal says which.
  return pickByPrefix('ensemble', given, ids);
}

/** Held and released allocations both count: releasing a released one is the node's to refuse. */
export async function resolveAllocationId(rest: RestClient, given: string): Promise<string> {
  if (UUID.test(given.trim())) return given.trim();
  const list = await rest.get<{ id: string }[]>('/api/v1/allocations?all=true');
  return pickByPrefix('allocation', given, list.map((a) => a.id));
}
