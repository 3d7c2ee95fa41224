/**
 * Which providers this node trusts with a job's `secrets` (config `placement.trust`): under
 * `anchored`, this node itself and nodes whose DID is one of its root anchors (the identities
 * its operator trusts without tokens, runtime/capability/authority.ts); under `any`, every
 * node. Plain `environment` goes to whichever node runs the job.
 */
import type { Authority } from '../../runtime/capability/authority.js';
import { didOfPeer } from '../../runtime/crypto/keys.js';

export const TRUST_MODES = ['anchored', 'any'] as const;
export type TrustMode = (typeof TRUST_MODES)[number];

/** Whether `node` (a peer id) may be sent secrets. */
export type ProviderTrust = (node: string) => boolean;

export function providerTrust(mode: TrustMode, self: string, authority?: Pick<Authority, 'isRoot'>): ProviderTrust {
  if (mode === 'any') return () => true;
  return (node) => {
    if (node === self) return true;
    const did = didOfPeer(node);
    return did !== null && (authority?.isRoot(did) ?? false);
  };
}

/** Why `node` is not sent a job with secrets, for the job's pending reason. */
export const untrustedReason = 'is not trusted with secrets (placement.trust anchored: its DID is not one of this node’s root anchors)';
