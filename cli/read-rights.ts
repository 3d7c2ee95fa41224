/**
 * Job read rights as the CLI handles them (README "Who reads what"): `dms jobs grant|grants|revoke`
 * and `dms cap revoke` of a right, which goes through the running node so the job's provider
 * learns of it.
 */
import type { z } from 'zod';
import { type RevokeGrantReply, TokenIdSchema } from '../behaviors/jobs/manifest.js';
import { JobIdSchema } from '../behaviors/jobs/jobs.js';
import { JOB_READ_CAPABILITY } from '../behaviors/jobs/read-right.js';
import { type Token, tokenFromText, tokenId } from '../runtime/capability/token.js';
import { CliError } from './context.js';

export type Revoked = z.output<typeof RevokeGrantReply>;

/** A read right's id as given, or the id of the token given instead. */
export function grantIdOf(given: string): string {
  const text = given.trim();
  if (TokenIdSchema.safeParse(text).success) return text;
  try {
    return tokenId(tokenFromText(text, 'grant'));
  } catch {
    throw new CliError(`grant: '${text.slice(0, 40)}${text.length > 40 ? '…' : ''}' is neither a token id (64 hex digits) nor a token as \`dms jobs grant\` prints it`);
  }
}

/** The jobs whose read right `t` grants (each `/dms/job/read/<id>` it names). */
export function jobsReadBy(t: Token): string[] {
  const prefix = `${JOB_READ_CAPABILITY}/`;
  return t.cap.filter((c) => c.startsWith(prefix)).map((c) => c.slice(prefix.length)).filter((id) => JobIdSchema.safeParse(id).success);
}

/** What a revocation's answer says of the job's provider. */
export function providerTold({ provider }: Pick<Revoked, 'provider'>): string {
  if (!provider.node) return 'the job ran here';
  return provider.acknowledged ? `its provider ${provider.node} acknowledged` : `its provider ${provider.node} will be told when it answers`;
}
