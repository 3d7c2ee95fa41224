/**
 * What a job spec says about files (README "Job outputs"): the outputs it leaves, and the
 * inputs mounted into it. Paths are inside the container; sources are content, named by CID,
 * or another job's output.
 */
import { z } from 'zod';
import { CID } from 'multiformats/cid';
import { cidProblem } from '../../runtime/blocks/cid.js';

export const MAX_OUTPUTS = 16;
export const MAX_INPUTS = 16;

/** An output's name: a URL path segment and a directory name as it is. */
export const OutputNameSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'an output name is letters, digits and . _ - (at most 64, not starting with . _ -)');

/** An absolute path inside the container, without `..`: the engine resolves it within the container only, but a path is kept plain. */
export const ContainerPathSchema = z
  .string()
  .max(1024)
  .regex(/^\/[^\0]*$/, 'an absolute path inside the container')
  .refine((p) => p.split('/').every((part) => part !== '..' && part !== '.'), { error: "a container path without '.' or '..'" })
  .refine((p) => p.replace(/\/+$/, '') !== '', { error: 'not the container\'s root' });

/** A container path as the engine compares them: `//a`, `/a/` and `/a` are one (paths hold no `.` or `..`). */
export const normalPath = (path: string): string => path.replace(/\/+/g, '/').replace(/\/$/, '');

/**
 * Whether an output's path names a file rather than a directory: its last name has an extension
 * (a dot past its first character: `model.bin`, `result.txt`; not `outputs`, not `.cache`). A
 * directory is made for the job before it starts when the image has none there.
 */
export const namesAFile = (path: string): boolean => /^.[^/]*\.[^/]*$/.test(normalPath(path).split('/').pop() ?? '');

/**
 * Paths the container's kernel filesystems take. runc refuses a mount inside /proc at the
 * container's start, and /sys and /dev are mounted over the image (the engine's /dev/shm as
 * well): what a job mounted or left there would be hidden, or fail its start, and is gone once it ends.
 */
const KERNEL_PATHS = ['/proc', '/sys', '/dev'] as const;

/** Where a job's files are (an output, an input's mount point): a container path outside the kernel's filesystems. */
const JobPathSchema = ContainerPathSchema.superRefine((path, ctx) => {
  const normal = normalPath(path);
  const kernel = KERNEL_PATHS.find((k) => normal === k || normal.startsWith(`${k}/`));
  if (kernel) ctx.addIssue({ code: 'custom', message: `'${path}' is at or under ${kernel}: the container's kernel filesystems (${KERNEL_PATHS.join(', ')}) take those paths`, input: path });
});

export const OutputSpecSchema = z.strictObject({ name: OutputNameSchema, path: JobPathSchema });
export type OutputSpec = z.output<typeof OutputSpecSchema>;

/** `job:<id>/<output name>`: another job's output, resolved to its CID by the node the job is submitted on. */
const JOB_SOURCE = /^job:([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\/([A-Za-z0-9][A-Za-z0-9._-]{0,63})$/;

export function jobSource(source: string): { job: string; name: string } | null {
  const m = JOB_SOURCE.exec(source);
  return m ? { job: m[1], name: m[2] } : null;
}

/** A volume's name: a directory name as it is. */
export const VolumeNameSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'a volume name is letters, digits and . _ - (at most 64, not starting with . _ -)');
export const volumeSource = (source: string): string | null => (source.startsWith('volume:') ? source.slice('volume:'.length) : null);
/** The volumes `inputs` mount (their `volume:<name>` sources), in order. */
export const volumesOf = (inputs: readonly { source: string }[]): string[] => inputs.map((i) => volumeSource(i.source)).filter((v): v is string => v !== null);

/** Why `source` cannot be an input, or null. */
function sourceProblem(source: string): string | null {
  const volume = volumeSource(source);
  if (volume !== null) return VolumeNameSchema.safeParse(volume).success ? null : `'${source.slice(0, 100)}' is not volume:<name> (letters, digits and . _ -)`;
  if (source.startsWith('job:')) return jobSource(source) ? null : `'${source.slice(0, 100)}' is not job:<job id>/<output name>`;
  let cid: CID;
  try {
    cid = CID.parse(source);
  } catch {
    return `'${source.slice(0, 100)}' is neither a CID nor job:<job id>/<output name>`;
  }
  const problem = cidProblem(cid);
  return problem ? `${source}: ${problem}` : null;
}

export const InputSourceSchema = z.string().max(200).superRefine((source, ctx) => {
  const problem = sourceProblem(source);
  if (problem) ctx.addIssue({ code: 'custom', message: problem });
});

const PeerId = z.string().regex(/^(12D3KooW[1-9A-HJ-NP-Za-km-z]{44}|Qm[1-9A-HJ-NP-Za-km-z]{44})$/, 'not a valid peer id');

/** Where an input is mounted: Docker reads a bind as `source:path:mode`, so a ':' in the path would be read as a mode. */
const MountPointSchema = JobPathSchema.refine((p) => !p.includes(':'), { error: "a mount point without ':' (Docker reads ':' as the start of a bind's options)" });

export const InputSpecSchema = z.strictObject({
  source: InputSourceSchema,
  path: MountPointSchema,
  /** Filled in by the node a `job:` source is submitted on: the CID that output's signed manifest names. */
  cid: z
    .string()
    .max(200)
    .refine((c) => sourceProblem(c) === null && !c.startsWith('job:') && volumeSource(c) === null, { error: 'cid: a CIDv1 (sha2-256, raw or dag-pb)' })
    .optional(),
  /** Nodes known to hold its blocks besides the requester (the job's provider, for a `job:` source). */
  from: z.array(PeerId).max(4).optional(),
  /** A volume only: mounted writable, so the next job that mounts it reads what this one wrote. */
  writable: z.boolean().optional(),
}).refine((i) => !i.writable || volumeSource(i.source) !== null, { error: 'writable: only a volume: input can be writable', path: ['writable'] });
export type InputSpec = z.output<typeof InputSpecSchema>;

/**
 * Mount points the engine could not make, or would make wrong: one path twice (`/a` and `//a`:
 * "Duplicate mount point" at the start), or one inside another. The inner one's directory
 * would be made inside the outer input, which is read-only (the start fails) or a volume (it
 * would gain a directory no job wrote).
 */
export function mountPointIssues(inputs: readonly { path: string }[], ctx: z.RefinementCtx): void {
  // Refinements run on a list whose items failed their own schema too: those are named already.
  const normal = inputs.map((i) => (typeof i?.path === 'string' ? normalPath(i.path) : ''));
  for (let j = 0; j < inputs.length; j++) {
    for (let i = 0; i < j; i++) {
      const [a, b] = [normal[i], normal[j]];
      if (a === '' || b === '') continue;
      if (a === b) ctx.addIssue({ code: 'custom', message: `inputs: each mount point (path) at most once: inputs.${j}.path '${inputs[j].path}' is inputs.${i}.path '${inputs[i].path}'` });
      else if (b.startsWith(`${a}/`) || a.startsWith(`${b}/`)) {
        const [inner, outer] = b.startsWith(`${a}/`) ? [j, i] : [i, j];
        ctx.addIssue({ code: 'custom', path: [inner, 'path'], message: `'${inputs[inner].path}' is inside inputs.${outer}.path '${inputs[outer].path}': mount inputs side by side, not one inside another` });
      }
    }
  }
}

/**
 * An output as the job reports it: as asked, then with what the provider found there. A
 * provider's manifest is parsed with it, so its names are held to what a spec may ask: they
 * become folder names on the requester's disk (`dms jobs get`).
 */
export const JobOutputSchema = z.object({
  name: OutputNameSchema,
  path: z.string().max(4096),
  cid: z.string().max(200).optional(),
  /** Bytes of file content. */
  size: z.int().nonnegative().optional(),
  /** Why it could not be collected (absent, a link leaving its root, over the size limit). */
  error: z.string().max(2000).optional(),
});
export type JobOutput = z.output<typeof JobOutputSchema>;
