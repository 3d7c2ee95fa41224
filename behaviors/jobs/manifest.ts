/**
 * The result manifest (README "Job outputs"): what a provider signs with its node key when a
 * job with outputs ends there. `{job, node, requester, exit_code, ended_at, outputs, logs}`
 * as UTF-8 JSON (`payload`), signed over MANIFEST_DOMAIN ‖ payload so no other signature of
 * the node's (an envelope's) can pass for one. The job record keeps the signed form as base64:
 * anyone holding it can check, with nothing but the provider's peer id, who produced what.
 */
import { z } from 'zod';
import { didOfPeer, KeyPair, verifyKeyFromId, verifySync } from '../../runtime/crypto/keys.js';
import { invalid } from '../../runtime/errors.js';
import { parseUntrustedJson } from '../../runtime/json.js';
import { describeIssues } from '../../runtime/issues.js';
import { idFromDid } from '../../runtime/capability/token.js';
import { MAX_GRANT_S } from './read-right.js';
import { type JobOutput, JobOutputSchema, MAX_OUTPUTS } from './files.js';
import { PeerIdSchema } from './schema.js';

export const MANIFEST_DOMAIN = 'dms-result-manifest-v1\n';
/** A manifest of MAX_OUTPUTS outputs with long paths and errors stays well within this. */
export const MAX_MANIFEST_BYTES = 64 * 1024;

const ContentRef = z.object({ cid: z.string().max(200), size: z.int().nonnegative() });

export const ManifestSchema = z.strictObject({
  job: z.uuid(),
  /** Peer id of the provider, whose key signs it. */
  node: PeerIdSchema,
  /** Peer id of the node the job was submitted on; null for a job of the provider's own. */
  requester: PeerIdSchema.nullable(),
  exit_code: z.int().nullable(),
  ended_at: z.iso.datetime({ offset: true }),
  outputs: z.array(JobOutputSchema).max(MAX_OUTPUTS),
  /** The job's stored output, content-addressed like its files; null when it wrote none. */
  logs: ContentRef.nullable(),
});
export type Manifest = z.output<typeof ManifestSchema>;

const SignedSchema = z.strictObject({ payload: z.string(), sig: z.base64() });

const domainBytes = (payload: string) => Buffer.from(MANIFEST_DOMAIN + payload, 'utf8');

/** Signs `manifest` with the provider's node key; the base64 the job record keeps. */
export async function signManifest(manifest: Manifest, key: KeyPair): Promise<string> {
  if (key.peerId !== manifest.node) throw invalid(`a manifest naming node ${manifest.node} cannot be signed by ${key.peerId}`);
  const payload = JSON.stringify(ManifestSchema.parse(manifest));
  const sig = await key.sign(domainBytes(payload));
  return Buffer.from(JSON.stringify({ payload, sig: Buffer.from(sig).toString('base64') })).toString('base64');
}

export interface ManifestExpectations {
  job?: string;
  /** The node that ran it: the manifest must name it, and so be signed by it. */
  node?: string;
  requester?: string | null;
}

/**
 * The manifest inside `signed`, once its signature checks out against the key of the node it
 * names and it is about what the caller expects; invalid naming the first thing wrong.
 */
export function openManifest(signed: string, expect: ManifestExpectations = {}): Manifest {
  if (signed.length > (MAX_MANIFEST_BYTES * 4) / 3 + 4) throw invalid(`manifest: larger than ${MAX_MANIFEST_BYTES} bytes`);
  let outer: z.output<typeof SignedSchema>;
  let manifest: Manifest;
  try {
    // A key twice in what is signed would be read one way here and maybe another by whoever else checks it.
    outer = SignedSchema.parse(parseUntrustedJson(Buffer.from(signed, 'base64').toString('utf8')));
    manifest = ManifestSchema.parse(parseUntrustedJson(outer.payload));
  } catch (e) {
    const why = e instanceof z.ZodError ? describeIssues(e, { limit: 3 }) : (e as Error).message;
    throw invalid(`manifest: not a signed result manifest (${why.slice(0, 300)})`);
  }
  const did = didOfPeer(manifest.node);
  if (!did) throw invalid(`manifest: node ${manifest.node} has no Ed25519 key to check against`);
  const key = verifyKeyFromId(did.slice('did:key:'.length));
  if (!verifySync(key, domainBytes(outer.payload), Buffer.from(outer.sig, 'base64'))) {
    throw invalid(`manifest: its signature is not node ${manifest.node}'s`);
  }
  if (expect.job !== undefined && manifest.job !== expect.job) throw invalid(`manifest: it is job ${manifest.job}'s, not job ${expect.job}'s`);
  if (expect.node !== undefined && manifest.node !== expect.node) {
    throw invalid(`manifest: signed by node ${manifest.node}, not by the job's provider ${expect.node}`);
  }
  if (expect.requester !== undefined && manifest.requester !== expect.requester) {
    throw invalid(`manifest: made for requester ${manifest.requester ?? 'none'}, not ${expect.requester ?? 'none'}`);
  }
  return manifest;
}

/**
 * Why a manifest's outputs are not those the job asked for, each once by name and path (a
 * provider may not rename, add or drop one: the names become folder names on the requester's
 * disk); null when they are.
 */
export function outputsMismatch(asked: readonly { name: string; path: string }[], listed: readonly JobOutput[]): string | null {
  const key = (o: { name: string; path: string }) => `${o.name}\0${o.path}`;
  const left = new Set(asked.map(key));
  for (const o of listed) if (!left.delete(key(o))) return `it lists output ${o.name} (${o.path.slice(0, 100)}), which the job did not ask for, or twice`;
  const [missing] = left;
  return missing === undefined ? null : `it leaves out output ${missing.split('\0')[0]}`;
}

/** Where a provider answers for the manifests it signed (an actor on every node with a network). */
export const OUTPUTS_INBOX = 'outputs';
export const OutputsBehaviors = {
  /**
   * The signed manifest of a job run here, for its requester only. Under `/dms/deployment`, so
   * whoever may deploy here may ask (the answer is still only the requester's).
   */
  manifest: '/dms/deployment/manifest',
  /**
   * This node's own: asks `from` (the job's requester or provider) for the manifest of a job this
   * node knows nothing of, presenting `grant`, a read right of the job for this node's key
   * (behaviors/jobs/read-right.ts). What a node's REST callers use to read a job granted to it.
   */
  read: '/dms/outputs/read',
  /**
   * A revocation of one of the job's read rights, from its requester, signed with the key that
   * granted them, for a node that answers for the job (its provider): kept, and every read
   * after checked against it. Under `/dms/deployment` as the manifest is; only the job's
   * requester is heard.
   */
  revoke: '/dms/deployment/manifest/revoke',
  /**
   * This node's own (the requester's): revokes the read right with id `grant_id` of a job
   * submitted here, refused from then on here and told to the job's provider (`revoke`), again
   * until it acknowledges.
   */
  revokeGrant: '/dms/outputs/revoke',
  /** This node's own (the requester's): issues a read right of a job submitted here, and keeps a record of it. */
  grant: '/dms/outputs/grant',
  /** This node's own: the read rights issued for a job submitted here, and whether each is revoked. */
  grants: '/dms/outputs/grants',
} as const;
export const ManifestRequest = z.strictObject({ job_id: z.uuid() });
export const ManifestReply = z.object({ manifest: z.string().max((MAX_MANIFEST_BYTES * 4) / 3 + 4).nullable() });
export const ReadRequest = z.strictObject({
  job_id: z.uuid(),
  /** The node asked: the job's requester or its provider. */
  from: PeerIdSchema,
  /** The read right (`dms jobs grant` text), unless this node is the requester itself. */
  grant: z.string().min(1).max(8 * 1024).optional(),
});
export const RevokeRequest = z.strictObject({
  job_id: z.uuid(),
  /** The revocation as `dms cap` prints tokens (base64url of its JSON). */
  revocation: z.string().min(1).max(8 * 1024),
});
/** `held` false: the node holds no manifest of the job (yet), so it answers no reads of it; tell it again later. */
export const RevokeReply = z.object({ held: z.boolean() });
/** A token's id: hex SHA-256 of its JSON (docs/CAPABILITIES.md), as `dms jobs grant` and `dms cap list` print it. */
export const TokenIdSchema = z.string().regex(/^[0-9a-f]{64}$/, { error: 'a token id: 64 lowercase hex digits' });
export const RevokeGrantRequest = z.strictObject({
  job_id: z.uuid(),
  grant_id: TokenIdSchema,
  /** The node the job was placed on; null for a job run here. */
  provider: PeerIdSchema.nullable(),
});
export const RevokeGrantReply = z.object({
  job: z.uuid(),
  revoked: TokenIdSchema,
  /** The signed revocation (base64url of its JSON), which any node may be handed (`dms cap anchor --revoke`). */
  revocation: z.string(),
  provider: z.object({ node: PeerIdSchema.nullable(), acknowledged: z.boolean() }),
});
/** An Ed25519 did:key, checked. */
export const DidSchema = z
  .string()
  .max(200)
  .refine(
    (d) => {
      try {
        idFromDid(d);
        return true;
      } catch {
        return false;
      }
    },
    { error: "an Ed25519 did:key (the reader's key or node: dms key did, or /public/hello of its node)" },
  );
export const GrantRequest = z.strictObject({ job_id: z.uuid(), did: DidSchema, expiry_s: z.int().min(1).max(MAX_GRANT_S) });
export const GrantReply = z.object({
  token: z.string().meta({ description: 'the read right, as `dms cap` prints tokens (base64url of its JSON)' }),
  id: TokenIdSchema,
  job: z.uuid(),
  did: z.string(),
  cap: z.string(),
  expires_at: z.string(),
});
export const GrantsRequest = z.strictObject({ job_id: z.uuid() });
export const GrantsReply = z.object({
  grants: z.array(
    z.object({
      id: TokenIdSchema,
      did: z.string(),
      cap: z.string(),
      expires_at: z.string(),
      revoked: z.boolean(),
      /** Whether the job's provider holds the revocation; null when not revoked or the job ran here. */
      provider_acknowledged: z.boolean().nullable(),
    }),
  ),
});
