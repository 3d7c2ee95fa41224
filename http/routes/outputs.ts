/**
 * Content-addressed job files over REST (README "Job outputs"): uploads (`POST /api/v1/blobs`,
 * a tar or a single file, streamed into the block store) and a job's outputs (its signed
 * manifest, and each output as a tar stream or the file itself). Reading a job's outputs needs
 * what reading the job needs (the orchestrator's /dms/job/status, checked like GET /jobs/{id});
 * the blocks themselves are public by CID to any node that asks over /dms/blocks/1.0.0.
 */
import type { IncomingMessage } from 'node:http';
import { Readable } from 'node:stream';
import type { H3Event } from 'h3';
import * as z from 'zod';
import { JobBehaviors, JobIdSchema, ORCHESTRATOR_INBOX } from '../../behaviors/jobs/jobs.js';
import { OutputNameSchema } from '../../behaviors/jobs/files.js';
import { DidSchema, GrantReply, GrantsReply, ManifestReply, ManifestSchema, openManifest, OUTPUTS_INBOX, OutputsBehaviors, RevokeGrantReply, TokenIdSchema } from '../../behaviors/jobs/manifest.js';
import { DEFAULT_GRANT_S, GrantTextSchema, jobReadCapability, MAX_GRANT_S, MAX_REVOCATIONS_PER_JOB } from '../../behaviors/jobs/read-right.js';
import { PeerIdSchema } from '../../behaviors/jobs/schema.js';
import type { Job, JobSpec } from '../../behaviors/jobs/schema.js';
import { type InputSpec, jobSource, VolumeNameSchema, volumesOf } from '../../behaviors/jobs/files.js';
import type { HttpApi } from '../actor.js';
import type { ActorSystem } from '../../runtime/system.js';
import { parseCid } from '../../runtime/blocks/cid.js';
import type { BlockStore } from '../../runtime/blocks/store.js';
import type { Pins } from '../../runtime/blocks/pins.js';
import type { Volumes } from '../../runtime/volumes.js';
import { SizeSchema } from '../../behaviors/jobs/schema.js';
import { RESOURCES_INBOX, StorageBehaviors, type StorageClaim, VolumeBehaviors, VolumeSchema } from '../../behaviors/jobs/resources.js';
import { randomUUID } from 'node:crypto';
import { exportTar, fileContent, type Imported as StoredContent, importFile, importPath, importTar, isFileEntry, rootEntry } from '../../runtime/blocks/unixfs.js';
import { DmsError, errorText, invalid, notFound } from '../../runtime/errors.js';
import { formatBytes } from '../../runtime/bytes.js';
import type { BlockExchange } from '../../runtime/network/blocks.js';
import { onClientGone } from '../body.js';
import { errorJson, JsonBody } from '../errors.js';
import type { RouteModule } from './types.js';

/** What the routes need of the node's blocks (daemon/blocks.ts). */
export interface BlocksAccess {
  store: BlockStore;
  pins: Pins;
  volumes: Volumes;
  exchange?: BlockExchange;
  limits: { max_upload_bytes: number; max_output_bytes: number };
}

/** Blocks an output's DAG may hold beyond twice the bytes its manifest declares: directories' nodes and a file's. */
const DAG_ROOM_BYTES = 16 * 1024 * 1024;
/**
 * The fewest bytes of blocks a file or directory of a DAG takes (its link in its directory: a
 * CID and a name), so a tar of it has at most its blocks' bytes / this entries unless links repeat.
 */
const MIN_LINK_BYTES = 32;

export const CID_HEADER = 'x-dms-cid';
/** Blocks this request fetched from other nodes: 0 when every block was held here already (a resumed fetch counts only the rest). */
export const FETCHED_HEADER = 'x-dms-blocks-fetched';

const Imported = z.object({ cid: z.string(), size: z.int().nonnegative(), kind: z.enum(['file', 'directory']) });
const OutputsReply = ManifestSchema.extend({ signed: z.string().meta({ description: 'the signed manifest (base64), as the job record keeps it' }) });

const jobId = { id: { schema: JobIdSchema, what: 'job id' } };
/** What every route of a job's read rights may answer besides its own. */
const GRANTS_ANSWERS = {
  403: { description: 'the job was submitted on another node: only that node grants reads of it' },
  404: { description: 'no such job' },
};

/** The header a reader's read right travels in: not the query, which logs and histories keep. */
export const GRANT_HEADER = 'x-dms-grant';
const ReadQuery = z.object({
  from: PeerIdSchema.optional().meta({
    description: `a job this node does not know: the peer id of its requester or provider, asked for the manifest with the read right in \`${GRANT_HEADER}\` (from \`dms jobs grant\`)`,
  }),
});
const GrantBody = z.strictObject({
  did: DidSchema,
  expiry_s: z.int().min(1).max(MAX_GRANT_S).default(DEFAULT_GRANT_S),
});

/**
 * The request body as bytes, streamed: straight from node:http when there, else the web stream.
 * An import that stops reading (too large, a refused entry) leaves the request as it is: the
 * default iterator destroyed it, and with it the connection, before the refusal was written.
 */
function bodyOf(event: H3Event): AsyncIterable<Uint8Array> {
  const req = (event.runtime?.node as { req?: IncomingMessage } | undefined)?.req;
  if (req) return req.iterator({ destroyOnReturn: false });
  const body = event.req.body;
  return body ? (body as unknown as AsyncIterable<Uint8Array>) : Readable.from([]);
}

/** What a `Range` header asks of a file: all of it, one part, or a part it does not have. */
export type RangeAsked = { offset: number; length: number } | 'whole' | 'unsatisfiable';

/**
 * `bytes=a-b`, `bytes=a-`, `bytes=-n` of a file of `size` bytes (RFC 9110 §14.1.2). Several
 * ranges, another unit, or a range that is not one are served as the whole file, which
 * RFC 9110 §14.2 lets a server do; a refusal would leave a client that sent one nothing to
 * fall back on. A range starting past the end, or the last 0 bytes, is unsatisfiable (416):
 * what `curl -C -` reads as a download already complete.
 */
export function parseRange(header: string | null, size: number): RangeAsked {
  if (!header) return 'whole';
  // The unit is case-insensitive (§14.1).
  const m = /^bytes=(\d*)-(\d*)$/i.exec(header.trim());
  if (!m || (m[1] === '' && m[2] === '')) return 'whole';
  let start: number;
  let end: number;
  if (m[1] === '') {
    const suffix = Number(m[2]);
    if (suffix === 0) return 'unsatisfiable';
    // An empty file has no last bytes to send, and a 206 no way to say none: all of it, as 200.
    if (size === 0) return 'whole';
    start = Math.max(0, size - suffix);
    end = size - 1;
  } else {
    start = Number(m[1]);
    if (m[2] !== '' && Number(m[2]) < start) return 'whole';
    if (start >= size) return 'unsatisfiable';
    end = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1);
  }
  return { offset: start, length: end - start + 1 };
}

/**
 * Resolves a spec's `job:<id>/<name>` inputs to the CID that job's signed manifest names, and
 * notes the node that ran it as one holding the blocks. Done where the job is submitted: only
 * this node has that job's manifest. A 400 naming the input when it cannot be resolved.
 */
export async function resolveJobInputs(spec: JobSpec, http: HttpApi, system: ActorSystem, volumes?: Volumes): Promise<JobSpec> {
  return resolveJobSources(keepWithVolumes(spec, system, volumes), http, system);
}

/** The `job:<id>/<name>` half of resolveJobInputs, for any spec with inputs (an ensemble's part too). */
export async function resolveJobSources<S extends { inputs: InputSpec[] }>(spec: S, http: HttpApi, system: ActorSystem): Promise<S> {
  if (!spec.inputs.some((i) => i.source.startsWith('job:'))) return spec;
  const inputs = [];
  for (const input of spec.inputs) {
    const ref = jobSource(input.source);
    if (!ref) {
      inputs.push(input);
      continue;
    }
    let job: Job;
    try {
      job = (await http.call(ORCHESTRATOR_INBOX, JobBehaviors.status, { id: ref.job })) as Job;
    } catch (e) {
      throw invalid(`input ${input.source}: ${errorText(e)}`);
    }
    if (!job.manifest) throw invalid(`input ${input.source}: job ${ref.job} has no result manifest (it is ${job.status})`);
    const manifest = openManifest(job.manifest, { job: job.id, node: job.node ?? system.host });
    const output = manifest.outputs.find((o) => o.name === ref.name);
    if (!output?.cid) throw invalid(`input ${input.source}: job ${ref.job} has no collected output named ${ref.name}`);
    inputs.push({ ...input, cid: output.cid, ...(system.isHere(manifest.node) ? {} : { from: [manifest.node] }) });
  }
  return { ...spec, inputs };
}

/** Why this node cannot mount volume `name` (it has no volumes, or not that one); null when it can. */
export function volumeMissing(name: string, volumes?: Volumes): string | null {
  if (!volumes) return 'this node has no volumes';
  try {
    volumes.get(name);
    return null;
  } catch (e) {
    return errorText(e);
  }
}

/**
 * A job mounting a volume runs where the volume is: on this node. Its placement may say so
 * (local, or this node) and nothing else; a volume this node lacks is a 400 naming it.
 */
function keepWithVolumes(spec: JobSpec, system: ActorSystem, volumes?: Volumes): JobSpec {
  const named = volumesOf(spec.inputs);
  if (named.length === 0) return spec;
  for (const name of named) {
    const missing = volumeMissing(name, volumes);
    if (missing) throw invalid(`input volume:${name}: ${missing}`);
  }
  const p = spec.placement;
  if ((p?.node && !system.isHere(p.node)) || p?.labels || p?.location) {
    throw invalid(`placement: a job mounting volume ${named[0]} runs on the node that has it (this one), so its placement cannot name another node, labels or a location`);
  }
  return { ...spec, placement: { max_attempts: 1, ...p, node: undefined, local: true } };
}

export const outputRoutes =
  (blocks: BlocksAccess): RouteModule =>
  ({ table, http, system }) => {
    const jobOf = async (id: string): Promise<Job> => (await http.call(ORCHESTRATOR_INBOX, JobBehaviors.status, { id })) as Job;
    /** A job submitted here: only its requester grants and revokes reads of it (a 403 naming that node otherwise). */
    const submittedHere = async (id: string, verb: 'grants' | 'revokes'): Promise<Job> => {
      const job = await jobOf(id);
      if (job.requester && !system.isHere(job.requester)) {
        throw new DmsError('forbidden', `job ${job.id} was submitted on node ${job.requester}: only that node ${verb} reads of it`);
      }
      return job;
    };

    /**
     * What a reading asks for: a job of this node (its record, its manifest checked against the
     * node that ran it), or, with `from`, one granted to this node, whose manifest `from` gives.
     */
    const readable = async (event: H3Event, id: string, from: string | undefined): Promise<{ manifest: ReturnType<typeof manifestOf>; signed: string; peers: string[] }> => {
      if (!from) {
        const job = await jobOf(id);
        return { manifest: manifestOf(job), signed: job.manifest!, peers: job.node && !system.isHere(job.node) ? [job.node] : [] };
      }
      if (system.isHere(from)) throw invalid(`from: ${from} is this node; leave it out to read a job of this node's`);
      const grant = event.req.headers.get(GRANT_HEADER) ?? undefined;
      if (grant !== undefined && !GrantTextSchema.safeParse(grant).success) throw invalid(`${GRANT_HEADER}: a read right is at most 8 KiB`);
      const { manifest: signed } = ManifestReply.parse(await http.call(OUTPUTS_INBOX, OutputsBehaviors.read, { job_id: id, from, ...(grant ? { grant } : {}) }));
      const manifest = openManifest(signed!, { job: id });
      return { manifest, signed: signed!, peers: [...new Set([from, manifest.node])].filter((p) => !system.isHere(p)) };
    };

    /** Content stored here whole: announced to the network as held here, and answered 201 with its CID. */
    const stored = (got: StoredContent): JsonBody => {
      blocks.exchange?.announce(got.cid);
      return new JsonBody(JSON.stringify({ cid: got.cid.toString(), size: got.size, kind: got.kind }), 201);
    };

    /** The job's manifest, checked: signed by the node that ran it, about this job. */
    const manifestOf = (job: Job) => {
      if (!job.manifest) {
        const why = job.outputs.length === 0 ? 'it asked for no outputs' : job.status === 'completed' || job.status === 'failed' ? 'its provider sent none' : `it is ${job.status}`;
        throw notFound(`job ${job.id} has no result manifest: ${why}`);
      }
      return openManifest(job.manifest, { job: job.id, node: job.node ?? system.host });
    };

    table.add({
      method: 'POST',
      path: '/api/v1/blobs',
      operationId: 'putBlob',
      summary: 'Store a file or a tar of files as content (a UnixFS DAG)',
      description:
        'The body is streamed into the block store: `Content-Type: application/x-tar` for a tar (a directory: entries with `..`, absolute paths, ' +
        'links or anything but files and directories are refused, naming the entry), `application/octet-stream` for one file. ' +
        'Answers the CID (v1, sha2-256, raw leaves) a job input may name. At most blocks.max_upload_bytes of content, and no more than the storage share has free ' +
        '(its blocks, volumes, jobs and allocations count against it).',
      tags: ['outputs'],
      responses: {
        201: { description: 'stored: its CID, bytes of content, and whether it is a file or a directory', schema: Imported },
        400: { description: 'a tar that is not one, or an entry refused (named)' },
        413: { description: 'more content than blocks.max_upload_bytes, or than the storage share has free (the error names both sizes)' },
        415: { description: 'a Content-Type other than application/x-tar or application/octet-stream (JSON and none included)' },
      },
      // A refused upload's body is not read to its end: the server closes its connection after
      // the answer (http/server.ts), reading on a moment so the answer is not lost to a reset.
      handler: (event) => upload(event),
    });

    const upload = async (event: H3Event): Promise<JsonBody> => {
      const limit = blocks.limits.max_upload_bytes;
      const length = event.req.headers.get('content-length');
      const declared = length !== null && /^\d+$/.test(length) ? Number(length) : undefined;
      // A tar's headers add to its content; beyond twice the limit no tar can fit it.
      if (declared !== undefined && declared > limit * 2 + 1024 * 1024) throw new DmsError('too_large', `upload is larger than blocks.max_upload_bytes (${formatBytes(limit)})`);
      // One of the two upload types: the request guard (http/guard.ts) refused any other with 415.
      const media = (event.req.headers.get('content-type') ?? '').split(';')[0].trim().toLowerCase();
      if (media === 'application/octet-stream' && declared !== undefined && declared > limit) {
        throw new DmsError('too_large', `upload of ${formatBytes(declared)} is larger than the limit of ${formatBytes(limit)} (blocks.max_upload_bytes)`);
      }
      // The storage share decides too: the resource manager holds what the upload may write
      // (a file's declared length, refused naming sizes when not free) until its blocks count.
      const holder = `upload:${randomUUID()}`;
      const claim = (await http.call(RESOURCES_INBOX, StorageBehaviors.claim, { holder, at_most: limit, ...(media === 'application/octet-stream' && declared !== undefined ? { size: declared } : {}) })) as StorageClaim;
      // Its blocks are the store's once it completes; otherwise those nothing else needs go again.
      try {
        const limits = { maxBytes: claim.granted };
        return stored(await blocks.store.importAll((store) => (media === 'application/x-tar' ? importTar(bodyOf(event), store, limits) : importFile(bodyOf(event), store, limits))));
      } catch (e) {
        if (e instanceof DmsError && e.kind === 'too_large' && claim.granted < limit) {
          throw new DmsError('too_large', `upload is larger than the ${formatBytes(claim.granted)} of storage free here (${formatBytes(claim.onboarded)} in the share; blocks.max_upload_bytes is ${formatBytes(limit)})`);
        }
        throw e;
      } finally {
        await http.call(RESOURCES_INBOX, StorageBehaviors.release, { holder }).catch(() => undefined);
      }
    };

    const VolumeBody = z.strictObject({ name: VolumeNameSchema, size: SizeSchema });
    const VolumeOut = VolumeSchema;
    const volumeName = { name: { schema: VolumeNameSchema, what: 'volume name' } };
    table.add({
      method: 'GET',
      path: '/api/v1/volumes',
      operationId: 'listVolumes',
      summary: "This node's volumes",
      tags: ['outputs'],
      responses: { 200: { description: 'the volumes', schema: z.array(VolumeOut) } },
      handler: () => http.call(RESOURCES_INBOX, VolumeBehaviors.list, {}),
    });
    table.add({
      method: 'POST',
      path: '/api/v1/volumes',
      operationId: 'createVolume',
      summary: 'Make a volume: a directory jobs on this node mount (volume:<name>), writable when they ask',
      tags: ['outputs'],
      body: { schema: VolumeBody, what: 'volume' },
      responses: { 201: { description: 'the new volume', schema: VolumeOut }, 409: { description: 'one of that name exists, or its size is more than the storage share has free (named)' } },
      handler: async (_event, input) => {
        const volume = await http.call(RESOURCES_INBOX, VolumeBehaviors.create, await input.body());
        return new JsonBody(JSON.stringify(volume), 201);
      },
    });
    table.add({
      method: 'DELETE',
      path: '/api/v1/volumes/:name',
      operationId: 'deleteVolume',
      summary: 'Delete a volume and what it holds',
      tags: ['outputs'],
      params: volumeName,
      responses: { 200: { description: 'the deleted volume', schema: VolumeOut }, 404: { description: 'no such volume' }, 409: { description: 'a job not yet ended mounts it (named)' } },
      handler: (_event, input) => http.call(RESOURCES_INBOX, VolumeBehaviors.remove, { name: input.param('name') }),
    });
    table.add({
      method: 'POST',
      path: '/api/v1/volumes/:name/snapshot',
      operationId: 'snapshotVolume',
      summary: "A volume's files now, stored as content: its CID (an input of any job, on any node)",
      tags: ['outputs'],
      params: volumeName,
      responses: {
        201: { description: 'stored', schema: Imported },
        404: { description: 'no such volume' },
        409: { description: 'a job not yet ended mounts it writable (named): its files are not still while it may write them' },
      },
      handler: async (_event, input) => {
        const name = input.param('name');
        await blocks.volumes.refuseInUse(name, 'snapshot', { writers: true });
        return stored(await blocks.store.importAll((store) => importPath(blocks.volumes.path(name), store, { maxBytes: blocks.limits.max_upload_bytes })));
      },
    });

    const PinBody = z.strictObject({ cid: z.string().max(200) });
    const Pinned = z.object({ pins: z.array(z.string()) });
    const cidParam = { cid: { schema: z.string().max(200), what: 'cid' } };
    table.add({
      method: 'GET',
      path: '/api/v1/pins',
      operationId: 'listPins',
      summary: 'CIDs pinned here: their blocks are never collected',
      tags: ['outputs'],
      responses: { 200: { description: 'the pinned CIDs', schema: Pinned } },
      handler: () => ({ pins: blocks.pins.list() }),
    });
    table.add({
      method: 'POST',
      path: '/api/v1/pins',
      operationId: 'pin',
      summary: 'Pin a CID: the blocks of its DAG held here are never collected (blocks.max_blocks_bytes)',
      tags: ['outputs'],
      body: { schema: PinBody, what: 'pin' },
      responses: { 201: { description: 'pinned (again)', schema: Pinned }, 400: { description: 'not a CIDv1, sha2-256, raw or dag-pb' } },
      handler: async (_event, input) => {
        blocks.pins.add((await input.body()).cid);
        return new JsonBody(JSON.stringify({ pins: blocks.pins.list() }), 201);
      },
    });
    table.add({
      method: 'DELETE',
      path: '/api/v1/pins/:cid',
      operationId: 'unpin',
      summary: 'Unpin a CID: its blocks may be collected once nothing else keeps them',
      tags: ['outputs'],
      params: cidParam,
      responses: { 200: { description: 'unpinned', schema: Pinned }, 404: { description: 'it was not pinned' } },
      handler: (_event, input) => {
        const cid = input.param('cid');
        if (!blocks.pins.remove(cid)) throw notFound(`${cid} is not pinned`);
        return { pins: blocks.pins.list() };
      },
    });

    table.add({
      method: 'GET',
      path: '/api/v1/jobs/:id/outputs',
      operationId: 'getJobOutputs',
      summary: "A job's signed result manifest",
      description: 'What its provider signed when it ended: each output with its CID and size, and the logs. Checked against the provider\'s key before it is answered.',
      tags: ['outputs'],
      params: jobId,
      query: ReadQuery,
      responses: {
        200: { description: 'the manifest, and its signed form', schema: OutputsReply },
        400: { description: 'a malformed id, peer id or read right' },
        403: { description: `with \`from\`: the node asked refuses, naming why (no read right in \`${GRANT_HEADER}\`, or one not for this job, this node, or from its requester)` },
        404: { description: 'no such job, or it has no manifest (yet)' },
      },
      handler: async (event, input) => {
        const { manifest, signed } = await readable(event, input.param('id'), input.query().from);
        return { ...manifest, signed };
      },
    });

    table.add({
      method: 'POST',
      path: '/api/v1/jobs/:id/grants',
      operationId: 'grantJobRead',
      summary: "Grant a DID the job's read right: its manifest and outputs, from this node or the job's provider",
      description:
        `A capability token for \`${jobReadCapability('{id}')}\`, signed with this node's key (the job's requester), for \`did\` until \`expiry_s\` from now ` +
        `(default ${DEFAULT_GRANT_S / 86_400} days, at most ${MAX_GRANT_S / 86_400}). Its holder presents it in \`${GRANT_HEADER}\` to its own node ` +
        '(`GET /api/v1/jobs/{id}/outputs?from=<this node or the provider>`, `dms jobs get --from … --grant …`), or attaches it to its envelopes. ' +
        'Revoke it with `DELETE /api/v1/jobs/{id}/grants/{grant}` (`dms jobs revoke`), which its provider learns too.',
      tags: ['outputs'],
      params: jobId,
      body: { schema: GrantBody, what: 'grant' },
      responses: {
        201: { description: 'the read right', schema: GrantReply },
        ...GRANTS_ANSWERS,
      },
      handler: async (_event, input) => {
        const job = await submittedHere(input.param('id'), 'grants');
        const { did, expiry_s } = await input.body();
        return new JsonBody(JSON.stringify(await http.call(OUTPUTS_INBOX, OutputsBehaviors.grant, { job_id: job.id, did, expiry_s })), 201);
      },
    });

    table.add({
      method: 'GET',
      path: '/api/v1/jobs/:id/grants',
      operationId: 'listJobReads',
      summary: "The read rights this node issued for a job, and whether each is revoked",
      description:
        'Every unexpired read right `POST /api/v1/jobs/{id}/grants` issued for the job, oldest first, with `revoked` and, for a job placed on another node, whether its provider acknowledged the revocation. ' +
        'The tokens themselves are not kept: this is how to find the id to revoke.',
      tags: ['outputs'],
      params: jobId,
      responses: {
        200: { description: 'the read rights', schema: GrantsReply },
        ...GRANTS_ANSWERS,
      },
      handler: async (_event, input) => {
        const job = await submittedHere(input.param('id'), 'grants');
        return http.call(OUTPUTS_INBOX, OutputsBehaviors.grants, { job_id: job.id });
      },
    });

    table.add({
      method: 'DELETE',
      path: '/api/v1/jobs/:id/grants/:grant',
      operationId: 'revokeJobRead',
      summary: "Revoke a job's read right: refused from now on here and by the job's provider",
      description:
        'Signs a revocation of the read right with id `grant` (as `POST /api/v1/jobs/{id}/grants` answered it) with this node\'s key, which granted it, ' +
        "and keeps it with the job: this node refuses the right at once; the job's provider is told now, and again until it acknowledges " +
        '(`provider.acknowledged` says whether it has; a provider that holds no manifest of the job yet is told when the job ends). Revoking again answers the same revocation.',
      tags: ['outputs'],
      params: { ...jobId, grant: { schema: TokenIdSchema, what: 'grant id' } },
      responses: {
        200: { description: 'revoked', schema: RevokeGrantReply },
        403: { description: 'the job was submitted on another node: only that node revokes reads of it' },
        404: { description: 'no such job' },
        503: { description: `the job holds ${MAX_REVOCATIONS_PER_JOB} revocations already` },
      },
      handler: async (_event, input) => {
        const job = await submittedHere(input.param('id'), 'revokes');
        const provider = job.node && !system.isHere(job.node) ? job.node : null;
        return http.call(OUTPUTS_INBOX, OutputsBehaviors.revokeGrant, { job_id: job.id, grant_id: input.param('grant'), provider });
      },
    });

    table.add({
      method: 'GET',
      path: '/api/v1/jobs/:id/outputs/:name',
      operationId: 'getJobOutput',
      summary: 'One output of a job: a tar stream of a directory, or the file',
      description:
        'Every block is fetched from the node that ran the job unless held here already (so an interrupted fetch resumes), each checked against its CID, before the answer starts. ' +
        `\`${FETCHED_HEADER}\` says how many blocks this request fetched; \`Range\` reads part of a file.`,
      tags: ['outputs'],
      params: { ...jobId, name: { schema: OutputNameSchema, what: 'output name' } },
      query: ReadQuery,
      responses: {
        200: { description: 'application/x-tar for a directory, application/octet-stream for a file', content: { 'application/x-tar': { description: 'the directory' }, 'application/octet-stream': { description: 'the file' } } },
        206: { description: 'part of the file (Range: one range of bytes; several, or another unit, get the whole file)' },
        416: { description: 'a Range starting past the end of the file; `Content-Range: bytes */<size>`' },
        404: { description: 'no such job or output, or a block the nodes asked said they do not hold' },
        409: { description: 'the output could not be collected (its error says why)' },
        500: { description: 'no node that may hold a block answered (down or unreachable: asked again once it is back), or the node failed' },
      },
      handler: async (event, input) => {
        const { manifest, peers } = await readable(event, input.param('id'), input.query().from);
        const job = { id: manifest.job };
        const name = input.param('name');
        const output = manifest.outputs.find((o) => o.name === name);
        if (!output) throw notFound(`job ${job.id} has no output named ${name} (it has: ${manifest.outputs.map((o) => o.name).join(', ') || 'none'})`);
        if (!output.cid) throw new DmsError('conflict', `output ${name} of job ${job.id} was not collected: ${output.error ?? 'no CID'}`);
        const cid = parseCid(output.cid, `output ${name}`);
        // The provider's DAG is held to what its manifest says, with room for the DAG's own
        // nodes: links that repeat a block make files of any number and size from a few blocks.
        const declared = output.size ?? blocks.limits.max_output_bytes;
        const blockBound = 2 * declared + DAG_ROOM_BYTES;
        const tooLarge = (what: string) => new DmsError('too_large', `output ${name} of job ${job.id}: ${what}, where its manifest says ${formatBytes(declared)}`);
        const ac = new AbortController();
        const gone = onClientGone(event, () => ac.abort());
        let fetched = 0;
        // Without a network only blocks held here are served (the node's own): the bound stands for their bytes.
        let dagBytes = blockBound;
        try {
          if (blocks.exchange) {
            const before = blocks.exchange.stats.fetched;
            dagBytes = await blocks.exchange.fetchDag(cid, peers, ac.signal, blockBound);
            fetched = blocks.exchange.stats.fetched - before;
          } else if (!(await blocks.store.has(cid))) throw notFound(`output ${name} (${cid}) is not held here and this node has no network to fetch it`);
        } catch (e) {
          throw e instanceof DmsError && e.kind === 'too_large' ? tooLarge(`its DAG holds more than ${formatBytes(blockBound)} of blocks`) : e;
        } finally {
          gone();
        }
        const root = await rootEntry(cid, blocks.store.fs);
        const headers: Record<string, string> = { [CID_HEADER]: cid.toString(), [FETCHED_HEADER]: String(fetched) };
        if (!isFileEntry(root)) {
          const tar = exportTar(cid, blocks.store.fs, name, {}, { maxBytes: declared, maxEntries: Math.max(1, Math.floor(dagBytes / MIN_LINK_BYTES)) });
          return new Response(Readable.toWeb(tar) as ReadableStream, { headers: { ...headers, 'content-type': 'application/x-tar' } });
        }
        const size = Number(root.size);
        if (size > declared) throw tooLarge(`its DAG makes a file of ${formatBytes(size)}`);
        const range = parseRange(event.req.headers.get('range'), size);
        const common = { ...headers, 'content-type': 'application/octet-stream', 'accept-ranges': 'bytes' };
        if (range === 'unsatisfiable') {
          const error = `Range: ${event.req.headers.get('range')!.slice(0, 100)} is outside the file's ${size} bytes`;
          return new JsonBody(errorJson(error), 416, { ...headers, 'accept-ranges': 'bytes', 'content-range': `bytes */${size}` });
        }
        const body = Readable.toWeb(Readable.from(fileContent(root, range === 'whole' ? {} : range))) as ReadableStream;
        if (range === 'whole') return new Response(body, { headers: { ...common, 'content-length': String(size) } });
        const end = range.offset + range.length - 1;
        return new Response(body, { status: 206, headers: { ...common, 'content-length': String(range.length), 'content-range': `bytes ${range.offset}-${end}/${size}` } });
      },
    });
  };
