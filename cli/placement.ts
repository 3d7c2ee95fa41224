/**
 * Where a job may run, as flags: `--node`, `--local`, `--label k=v`, `--region R`. Shared by
 * `jobs submit` (the flags override the spec file's `placement`) and `run`.
 */
import { type Command, Option } from 'commander';
import type { JobSpecInput } from '../behaviors/jobs/schema.js';
import { parsePairs } from './pairs.js';

export interface PlacementFlags {
  node?: string;
  local?: boolean;
  label?: string[];
  region?: string;
}

const collect = (value: string, previous: string[] = []) => [...previous, value];

export function placementOptions(cmd: Command): Command {
  return cmd
    .addOption(new Option('--node <peer id>', 'run exactly on this node (a peer id, as `dms peers list --wide` prints it)').conflicts('local'))
    .option('--local', 'never leave this node')
    .option('--label <key=value>', 'only on nodes whose device labels include this (repeatable)', collect)
    .option('--region <region>', 'only on nodes in this region (their device location)');
}

/** The spec with the flags' placement merged over its own; unchanged without flags. */
export function withPlacement(spec: unknown, flags: PlacementFlags): unknown {
  const given: Record<string, unknown> = {};
  if (flags.node) given.node = flags.node;
  if (flags.local) given.local = true;
  if (flags.label?.length) given.labels = parsePairs('--label', flags.label, 'key=value');
  if (flags.region) given.location = { region: flags.region };
  if (Object.keys(given).length === 0 || typeof spec !== 'object' || spec === null) return spec;
  const own = (spec as JobSpecInput).placement ?? {};
  return { ...spec, placement: { ...own, ...given } };
}
