/**
 * `dms put <path>` and `dms jobs get <id>`: content up to the node, a job's outputs down from
 * it, every written file checked against the CID its provider signed (README "Job outputs").
 */
import { resolve, join } from 'node:path';
import type { Command } from 'commander';
import type { Job } from '../../behaviors/jobs/schema.js';
import { type Manifest, openManifest } from '../../behaviors/jobs/manifest.js';
import { CliError, output } from '../context.js';
import { upload, writeOutput } from '../files.js';
import { resolveJobId, shortId } from '../ids.js';
import { restFor } from '../rest.js';
import { sizeArg } from '../sizes.js';
import { formatBytes } from '../../client/sizes.js';

interface GetOptions {
  outputDir?: string;
  name?: string;
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
    .requiredOption('--size <size>', 'what it may hold, e.g. 10GiB (recorded and listed)')
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
    .option('--output-dir <dir>', 'where each output is written, as <dir>/<output name> (default ./<job id prefix>)')
    .option('--name <name>', 'only this output')
    .action(async (given: string, opts: GetOptions, cmd: Command) => {
      const rest = restFor(cmd);
      const id = await resolveJobId(rest, given);
      const job = await rest.get<Job>(`/api/v1/jobs/${id}`);
      const { signed } = await rest.get<{ signed: string }>(`/api/v1/jobs/${id}/outputs`);
      // Checked here too: whatever the node says, the signature is the job's provider's.
      let manifest: Manifest;
      try {
        manifest = openManifest(signed, { job: id, ...(job.node ? { node: job.node } : {}) });
      } catch (e) {
        throw new CliError(`job ${id}: ${(e as Error).message}`);
      }
      const wanted = opts.name ? manifest.outputs.filter((o) => o.name === opts.name) : manifest.outputs;
      if (opts.name && wanted.length === 0) throw new CliError(`job ${id} has no output named ${opts.name} (it has: ${manifest.outputs.map((o) => o.name).join(', ') || 'none'})`);
      const dir = resolve(opts.outputDir ?? shortId(id));
      const written: Record<string, string> = {};
      const lines: string[] = [];
      let failed = 0;
      for (const o of wanted) {
        if (!o.cid) {
          failed++;
          process.stderr.write(`${o.name}: not collected: ${o.error ?? 'no CID'}\n`);
          continue;
        }
        const dest = join(dir, o.name);
        const res = await rest.response('GET', `/api/v1/jobs/${id}/outputs/${encodeURIComponent(o.name)}`);
        const fetched = res.headers.get('x-dms-blocks-fetched') ?? '0';
        await writeOutput(res, dest, o.cid);
        written[o.name] = dest;
        lines.push(`${o.name}: ${dest} (${o.cid}, ${o.size} bytes, ${fetched} blocks fetched)`);
      }
      output(cmd, { ...manifest, signed, written }, lines.join('\n') || 'no outputs written');
      if (failed > 0) process.exitCode = 1;
    });
}
