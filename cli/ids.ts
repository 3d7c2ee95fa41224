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
/** Ensembles a prefix or a name is looked up among: the newest, as many as one list may ask for. */
const NEWEST_ENSEMBLES = 100;

/** A whole job id is used as given (an unknown one is the node's 404); a prefix is looked up. */
export async function resolveJobId(rest: RestClient, given: string): Promise<string> {
  if (UUID.test(given.trim())) return given.trim();
  // Oldest first: a job submitted meanwhile lands after the pages already read, not in them.
  const { items } = await rest.everyPage<{ id: string }>(`/api/v1/jobs?limit=${PAGE}&order=asc`);
  return pickByPrefix('job', given, items.map((j) => j.id));
}

/**
 * A whole ensemble id is used as given; a prefix, or else the ensemble's name (what `ensemble
 * deploy` printed beside the id), is looked up among the newest 100 (the most one list answers).
 * A name several ensembles share is refused, naming them: cancelling one of them by a guess
 * would be worse than asking.
 */
export async function resolveEnsembleId(rest: RestClient, given: string): Promise<string> {
  if (UUID.test(given.trim())) return given.trim();
  const list: { id: string; name: string; status: string }[] = [];
  // A page may hold fewer than asked (at most 8 MiB of specs): read on to the newest 100.
  while (list.length < NEWEST_ENSEMBLES) {
    const page = await rest.get<{ id: string; name: string; status: string }[]>(`/api/v1/ensembles?limit=${NEWEST_ENSEMBLES - list.length}&offset=${list.length}`);
    if (page.length === 0) break;
    list.push(...page);
  }
  const ids = list.map((e) => e.id);
  const prefix = given.trim().toLowerCase();
  const matches = prefix ? ids.filter((id) => id.startsWith(prefix)) : [];
  if (matches.length === 1) return matches[0];
  const name = given.trim();
  const named = list.filter((e) => e.name === name);
  if (named.length === 1) return named[0].id;
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
