/**
 * Docker image references, by the grammar of distribution/reference (the parser dockerd
 * itself uses):
 *
 *   reference  := name [ ":" tag ] [ "@" digest ]
 *   name       := [ domain "/" ] path-component [ "/" path-component ]*
 *   domain     := host [ ":" port ]          host: DNS name, IPv4, or [IPv6]
 *   path-component := [a-z0-9]+ ( ( [._] | __ | -+ ) [a-z0-9]+ )*
 *   tag        := [\w][\w.-]{0,127}
 *   digest     := algorithm ":" hex{32,}      algorithm: [A-Za-z][A-Za-z0-9]* ([-_+.] [A-Za-z][A-Za-z0-9]*)*
 *
 * The image name goes into the engine's URL paths (/images/<name>/json): anything outside
 * this grammar ('//x/y', '../../containers/json?all=1#') would address another endpoint or
 * make the engine answer a redirect. A reference is checked here before any engine sees it.
 */
import { z } from 'zod';

const alphanumeric = '[a-z0-9]+';
const separator = '(?:[._]|__|-+)';
const pathComponent = `${alphanumeric}(?:${separator}${alphanumeric})*`;
const domainComponent = '(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])';
const domainName = `${domainComponent}(?:\\.${domainComponent})*`;
const ipv6 = '\\[[a-fA-F0-9:]+\\]';
const host = `(?:${domainName}|${ipv6})`;
const domain = `${host}(?::[0-9]+)?`;
const tag = '[\\w][\\w.-]{0,127}';
const digest = '[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}';

const PATH = new RegExp(`^${pathComponent}(?:/${pathComponent})*$`);
const DOMAIN = new RegExp(`^${domain}$`);
const TAG = new RegExp(`^${tag}$`);
const DIGEST = new RegExp(`^${digest}$`);
/** A bare 64-hex name is an image id, not a repository: dockerd's parser refuses it as a name. */
const IMAGE_ID = /^[a-f0-9]{64}$/;

/** distribution/reference's NameTotalLengthMax. */
export const MAX_NAME_LENGTH = 255;

export interface ImageReference {
  /** Registry host[:port], as written; undefined for Docker Hub's short names (`busybox`, `library/x`). */
  domain?: string;
  /** Repository path within the registry. */
  path: string;
  tag?: string;
  digest?: string;
}

/** Parses `ref`, or returns why it is not an image reference. */
export function parseImageReference(ref: string): ImageReference | { error: string } {
  if (ref === '') return { error: 'is empty' };
  let rest = ref;
  let digestPart: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digestPart = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digestPart)) return { error: `digest '${digestPart}' is not algorithm:hex (e.g. sha256:<64 hex digits>)` };
  }
  // A tag follows the last ':' only if no '/' comes after it; otherwise the ':' is a port.
  let tagPart: string | undefined;
  const colon = rest.lastIndexOf(':');
  if (colon > rest.lastIndexOf('/')) {
    tagPart = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG.test(tagPart)) return { error: `tag '${tagPart}' is not [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}` };
  }
  if (rest.length > MAX_NAME_LENGTH) return { error: `name is longer than ${MAX_NAME_LENGTH} characters` };
  // As dockerd splits it: the first component names a registry only if it looks like a host.
  const slash = rest.indexOf('/');
  const first = slash >= 0 ? rest.slice(0, slash) : '';
  const isDomain = slash >= 0 && (/[.:]/.test(first) || first === 'localhost' || first !== first.toLowerCase() || first.startsWith('['));
  const domainPart = isDomain ? first : undefined;
  const path = isDomain ? rest.slice(slash + 1) : rest;
  if (domainPart !== undefined && !DOMAIN.test(domainPart)) return { error: `registry '${domainPart}' is not host[:port]` };
  if (!PATH.test(path)) {
    return {
      error: `repository '${path}' is not lowercase letters and digits in '/'-separated components joined by '.', '_', '__' or '-'`,
    };
  }
  if (domainPart === undefined && IMAGE_ID.test(path)) return { error: 'a 64-hex-digit repository name is an image id, not a name' };
  return { domain: domainPart, path, ...(tagPart !== undefined ? { tag: tagPart } : {}), ...(digestPart !== undefined ? { digest: digestPart } : {}) };
}

/** The zod type of an image field: a string that parses as a reference, with the reason when it does not. */
export const ImageReferenceSchema = z.string().superRefine((ref, ctx) => {
  const parsed = parseImageReference(ref);
  if ('error' in parsed) ctx.addIssue({ code: 'custom', message: `not a Docker image reference: ${parsed.error}` });
});
