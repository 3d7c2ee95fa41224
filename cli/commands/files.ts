/**
 * `dms put <path>` and `dms jobs get <id>`: content up to the node, a job's outputs down from
 * it, every written file checked against the CID its provider signed (README "Job outputs").
 */
import { resolve, join } from 'node:path';
import type { Command } from 'commander';
import type { Job } from '../../behaviors/jobs/schema.js';
import { type Manifest, openManifest } from '../../behaviors/jobs/manifest.js';
import { CliError, output } from '../context.js';
import { checkOutputDir, existingOutput, upload, writeOutput } from '../files.js';
import { resolveJobId, shortId } from '../ids.js';
import { restFor } from '../rest.js';
import { sizeArg } from '../sizes.js';
import { formatBytes } from '../../client/sizes.js';
import { grantIdOf, providerTold, type Revoked } from '../read-rights.js';
import { terminalSafe } from '../terminal.js';

interface GetOptions {
  outputDir?: string;
  name?: string;
  from?: string;
  grant?: string;
  force?: boolean;
}

const UNIT_S: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** `--expiry 7d` as seconds. */
function seconds(text: string): number {
  const m = /^(\d{1,7})([smhd])$/.exec(text.trim());
  if (!m || Number(m[1]) === 0) throw new CliError(`--expiry: '${text}' is not a duration (30s, 15m, 24h, 7d)`);
  return Number(m[1]) * UNIT_S[m[2]];
}

export function registerFileCommands(program: Command): void {
  program
    .command('put')
    .description('store a file or a directory on the node as content and print its CID (a job input may name it)')
    .argument('<path>', 'a file, or a directory (sent as a tar)')
    .action(async (path: string, _opts, cmd: Command) => {
      const up = await upload(restFor(cmd), path);
      output(cmd, up, up.cid);
    });

  program
    .command('pin')
    .description('keep the blocks of a CID held on the node whatever blocks.max_blocks_bytes says')
    .argument('<cid>', 'a CID (as dms put or dms jobs get --json print)')
    .action(async (cid: string, _opts, cmd: Command) => {
      const reply = await restFor(cmd).post<{ pins: string[] }>('/api/v1/pins', { cid });
      output(cmd, reply, `pinned ${cid}`);
    });
  program
    .command('unpin')
    .description('let the blocks of a CID be collected once nothing else keeps them')
    .argument('<cid>', 'a pinned CID')
    .action(async (cid: string, _opts, cmd: Command) => {
      const reply = await restFor(cmd).delete<{ pins: string[] }>(`/api/v1/pins/${encodeURIComponent(cid)}`);
      output(cmd, reply, `unpinned ${cid}`);
    });

  const volume = program.command('volume').description('named directories jobs on this node mount (inputs: volume:<name>)');
  volume
    .command('create')
    .argument('<name>', 'letters, digits and . _ -')
    .requiredOption('--size <size>', 'what it may hold, e.g. 10GiB, taken from the storage share (refused when not free)')
    .description('make a volume')
    .action(async (name: string, opts: { size: string }, cmd: Command) => {
      const v = await restFor(cmd).post<{ name: string }>('/api/v1/volumes', { name, size: sizeArg('--size', opts.size) });
      output(cmd, v, `created volume ${v.name}`);
    });
  volume
    .command('list')
    .description("this node's volumes")
    .action(async (_opts, cmd: Command) => {
      const list = await restFor(cmd).get<{ name: string; size: number; created_at: string }[]>('/api/v1/volumes');
      output(cmd, list, list.length ? list.map((v) => `${v.name}\t${formatBytes(v.size)}\t${v.created_at}`).join('\n') : 'no volumes');
    });
  volume
    .command('rm')
    .argument('<name>', 'a volume')
    .description('delete a volume and what it holds')
    .action(async (name: string, _opts, cmd: Command) => {
      output(cmd, await restFor(cmd).delete(`/api/v1/volumes/${encodeURIComponent(name)}`), `deleted volume ${name}`);
    });
  volume
    .command('snapshot')
    .argument('<name>', 'a volume')
    .description("store the volume's files now as content and print the CID")
    .action(async (name: string, _opts, cmd: Command) => {
      const got = await restFor(cmd).post<{ cid: string }>(`/api/v1/volumes/${encodeURIComponent(name)}/snapshot`, {});
      output(cmd, got, got.cid);
    });

  const jobs = program.commands.find((c) => c.name() === 'jobs');
  if (!jobs) throw new Error('the jobs command is registered first');
  jobs
    .command('get')
    .description("write a job's outputs here, checking the provider's signature and every file against the CID it signed")
    .argument('<id>', 'job id, or any unique prefix of it (as `jobs list` prints)')
    .argument('[dir]', 'where each output is written, as <dir>/<output name> (the same as --output-dir)')
    .option('--output-dir <dir>', 'where each output is written, as <dir>/<output name> (default ./<job id prefix>)')
    .option('--name <name>', 'only this output')
    .option('--from <peer>', "a job of another node's, granted to this node: the peer id of its requester or provider, asked for it")
    .option('--grant <token>', 'the read right `dms jobs grant` printed on the requester, for this node (with --from)')
    .option('--force', 'replace what is already where an output goes (by default an output is written only where nothing, or the same files, are)')
    .action(async (given: string, dirArg: string | undefined, opts: GetOptions, cmd: Command) => {
      const rest = restFor(cmd);
      if (opts.grant && !opts.from) throw new CliError('--grant goes with --from: the node to ask for the job granted to this one');
      if (dirArg !== undefined && opts.outputDir !== undefined && resolve(dirArg) !== resolve(opts.outputDir)) {
        throw new CliError(`two places to write to: ${dirArg} and --output-dir ${opts.outputDir}; give one`);
      }
      // A job of another node's is not in this node's list: its whole id is needed.
      const id = opts.from ? given : await resolveJobId(rest, given);
      const job = opts.from ? undefined : await rest.get<Job>(`/api/v1/jobs/${id}`);
      const query = opts.from ? `?from=${encodeURIComponent(opts.from)}` : '';
      const headers = opts.grant ? { 'x-dms-grant': opts.grant.trim() } : undefined;
      const { signed } = (await (await rest.response('GET', `/api/v1/jobs/${encodeURIComponent(id)}/outputs${query}`, { accept: 'application/json', headers })).json()) as { signed: string };
      // Checked here too: whatever the node says, the signature is the job's provider's.
      let manifest: Manifest;
      try {
        manifest = openManifest(signed, { job: id, ...(job?.node ? { node: job.node } : {}) });
      } catch (e) {
        throw new CliError(`job ${id}: ${(e as Error).message}`);
      }
      if (opts.from && manifest.node !== opts.from && manifest.requester !== opts.from) throw new CliError(`job ${id}: ${opts.from} neither ran nor requested it`);
      const wanted = opts.name ? manifest.outputs.filter((o) => o.name === opts.name) : manifest.outputs;
      if (opts.name && wanted.length === 0) throw new CliError(`job ${id} has no output named ${opts.name} (it has: ${manifest.outputs.map((o) => o.name).join(', ') || 'none'})`);
      const dir = resolve(dirArg ?? opts.outputDir ?? shortId(id));
      await checkOutputDir(dir);
      // The names are the provider's (openManifest held them to output names): whatever the user
      // keeps where one would land is looked at before a byte is fetched.
      const found = new Map<string, Awaited<ReturnType<typeof existingOutput>>>();
      for (const o of wanted) if (o.cid) found.set(o.name, await existingOutput(join(dir, o.name), o.cid));
      const occupied = wanted.filter((o) => found.get(o.name) === 'other').map((o) => join(dir, o.name));
      if (occupied.length > 0 && !opts.force) {
        throw new CliError(`${occupied.join(', ')} already exists and is not this output: nothing written (move it away, choose another --output-dir, or replace it with --force)`);
      }
      const written: Record<string, string> = {};
      const lines: string[] = [];
      let failed = 0;
      for (const o of wanted) {
        if (!o.cid) {
          failed++;
          process.stderr.write(terminalSafe(`${o.name}: not collected: ${o.error ?? 'no CID'}\n`));
          continue;
        }
        const dest = join(dir, o.name);
        const res = await rest.response('GET', `/api/v1/jobs/${encodeURIComponent(id)}/outputs/${encodeURIComponent(o.name)}${query}`, { headers });
        const fetched = res.headers.get('x-dms-blocks-fetched') ?? '0';
        // The same files found there are replaced without importing them a second time.
        await writeOutput(res, dest, o.cid, opts.force === true || found.get(o.name) === 'same');
        written[o.name] = dest;
        lines.push(`${o.name}: ${dest} (${o.cid}, ${o.size} bytes, ${fetched} blocks fetched)`);
      }
      output(cmd, { ...manifest, signed, written }, lines.join('\n') || 'no outputs written');
      if (failed > 0) process.exitCode = 1;
    });

  jobs
    .command('grant')
    .description("give a DID the job's read right (its manifest and outputs, from this node or its provider): prints the token to hand it")
    .argument('<id>', 'a job submitted on this node: its id, or any unique prefix of it')
    .argument('<did>', "the reader's did:key: its key (`dms key did`) or its node's (`dms actor invoke /public/hello` there)")
    .option('--expiry <duration>', 'how long the right lasts: 30s, 15m, 24h, 7d (at most 365d)', '7d')
    .action(async (given: string, did: string, opts: { expiry: string }, cmd: Command) => {
      const rest = restFor(cmd);
      const id = await resolveJobId(rest, given);
      const g = await rest.post<{ token: string; cap: string; did: string; expires_at: string }>(`/api/v1/jobs/${id}/grants`, { did, expiry_s: seconds(opts.expiry) });
      process.stderr.write(`${g.cap} for ${g.did} until ${g.expires_at}; read with: dms jobs get ${id} --from <this node's peer id> --grant <token>\n`);
      output(cmd, g, g.token);
    });

  jobs
    .command('grants')
    .description('list the read rights `jobs grant` gave for a job that have not expired, and whether each is revoked')
    .argument('<id>', 'a job submitted on this node: its id, or any unique prefix of it')
    .action(async (given: string, _opts: unknown, cmd: Command) => {
      const rest = restFor(cmd);
      const id = await resolveJobId(rest, given);
      type Listed = { id: string; did: string; expires_at: string; revoked: boolean; provider_acknowledged: boolean | null };
      const { grants } = await rest.get<{ grants: Listed[] }>(`/api/v1/jobs/${id}/grants`);
      const state = (g: Listed) => (!g.revoked ? 'granted' : g.provider_acknowledged === false ? 'revoked (provider not told yet)' : 'revoked');
      output(cmd, { grants }, grants.map((g) => `${g.id}  ${g.did}  until ${g.expires_at}  ${state(g)}`).join('\n') || 'no read rights given');
    });

  jobs
    .command('revoke')
    .description("take back a read right given with `jobs grant`: refused from now on by this node and by the job's provider")
    .argument('<id>', 'a job submitted on this node: its id, or any unique prefix of it')
    .argument('<grant>', 'the read right: its id (as `jobs grant --json` prints it) or the token itself')
    .action(async (given: string, grant: string, _opts: unknown, cmd: Command) => {
      const rest = restFor(cmd);
      const id = await resolveJobId(rest, given);
      const r = await rest.delete<Revoked>(`/api/v1/jobs/${id}/grants/${grantIdOf(grant)}`);
      output(cmd, r, `revoked ${r.revoked}; ${providerTold(r)}`);
    });
}
