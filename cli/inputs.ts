/**
 * `dms run -i SOURCE:PATH` and `-v NAME:PATH`: what a job mounts, as written on the command
 * line. A local file or directory is uploaded first (its CID becomes the source); a CID,
 * `job:<id>/<output>` or `volume:<name>` is given to the node as it is.
 */
import { existsSync } from 'node:fs';
import type { RestClient } from '../client/rest.js';
import type { InputSpec } from '../behaviors/jobs/files.js';
import { CliError } from './context.js';
import { upload } from './files.js';

/** Splits at the last `:` followed by an absolute path: local paths may hold colons, container paths are absolute. */
export function splitInput(text: string): { source: string; path: string } {
  const at = text.lastIndexOf(':/');
  if (at <= 0) throw new CliError(`--input: '${text}' is not source:/path/in/the/container`);
  return { source: text.slice(0, at), path: text.slice(at + 1) };
}

/** `-i` flags, then `-v` flags; the volumes are read first, so a mistyped one costs no upload. */
export async function inputsOf(rest: RestClient, flags: readonly string[], volumeFlags: readonly string[] = []): Promise<InputSpec[]> {
  const volumes = volumeFlags.map(volumeInput);
  const inputs: InputSpec[] = [];
  for (const flag of flags) {
    const { source, path } = splitInput(flag);
    if (existsSync(source)) {
      const up = await upload(rest, source);
      process.stderr.write(`[dms] uploaded ${source} as ${up.cid} (${up.size} bytes)\n`);
      inputs.push({ source: up.cid, path });
    } else if (isPath(source)) {
      // A CID never holds a '/', nor does a volume's name: the node would call this "neither a CID nor job:…".
      throw new CliError(`--input: there is no file or directory ${source} to upload (or give a CID, job:<id>/<output> or volume:<name>)`);
    } else inputs.push({ source, path });
  }
  return [...inputs, ...volumes];
}

/**
 * `dms run -v NAME:/path[:ro]`: a volume of this node, mounted writable as docker's `-v` mounts
 * one unless `:ro` follows; read-only it is what `-i volume:NAME:/path` gives. A container path
 * holding a colon cannot be written here (docker's `-v` has the same limit): a spec file takes it.
 */
export function volumeInput(text: string): InputSpec {
  // `-v volume:data:/x` is what -i's form would lead one to write.
  const parts = /^(?:volume:)?([^:]*):(\/[^:]*)(?::(ro|rw))?$/.exec(text);
  if (!parts) throw new CliError(`--volume: '${text}' is not name:/path/in/the/container, with :ro after it for read-only`);
  const [, name, path, mode] = parts;
  if (isPath(name) || name === '.' || name === '..') {
    throw new CliError(`--volume: '${name}' is a local path, not a volume's name: -i ${name}:${path} uploads it and mounts it read-only, and \`dms volume create\` makes a volume`);
  }
  if (name === '') throw new CliError(`--volume: '${text}' names no volume (name:/path/in/the/container)`);
  return { source: `volume:${name}`, path, ...(mode === 'ro' ? {} : { writable: true }) };
}

/** A source written as a local path: a '/' outside `job:<id>/<output>`, or `~`. */
const isPath = (source: string): boolean => !/^(job|volume):/.test(source) && (source.includes('/') || source.startsWith('~'));
