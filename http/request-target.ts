/**
 * The request target as the client sent it, checked before anything routes on it. The router
 * resolves the path as a URL does: `…/outputs/%2e%2e` reached the job itself, `/api/v1\jobs`
 * reached `/api/v1/jobs`, and an absolute-form target (`GET http://evil.example/api/v1/jobs`,
 * which only proxies are sent) passed the Host check, which reads the Host header. Each path
 * here is the one served, byte for byte, and each query parameter the one read, or the request
 * is refused naming why.
 */

/** Why `target` (node:http's `req.url`) is refused, or undefined when it is a plain path. */
export function targetProblem(target: string): string | undefined {
  if (!target.startsWith('/')) return `request target ${shown(target)} is not a path: this node is no proxy, send the path alone (/api/v1/…)`;
  const query = target.indexOf('?');
  const path = query === -1 ? target : target.slice(0, query);
  if (path.includes('\\')) return `request path ${shown(path)} holds a backslash`;
  for (const segment of path.split('/')) {
    const bad = /%(?![0-9a-fA-F]{2})/.exec(segment);
    if (bad) return `request path segment ${shown(segment)} holds ${shown(segment.slice(bad.index, bad.index + 3))}, which is not a percent-encoded byte (%XX)`;
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      return `request path segment ${shown(segment)} does not decode to UTF-8`;
    }
    if (decoded === '.' || decoded === '..') return `request path segment ${shown(segment)} is a dot-segment: name the resource itself`;
  }
  // A query value is decoded leniently by URLSearchParams: `%ZZ` kept as it is, a byte that is
  // not UTF-8 turned into U+FFFD, so a parameter was silently not what the client sent.
  if (query !== -1) {
    for (const pair of target.slice(query + 1).split('&')) {
      const bad = /%(?![0-9a-fA-F]{2})/.exec(pair);
      if (bad) return `query parameter ${shown(pair)} holds ${shown(pair.slice(bad.index, bad.index + 3))}, which is not a percent-encoded byte (%XX)`;
      try {
        decodeURIComponent(pair);
      } catch {
        return `query parameter ${shown(pair)} does not decode to UTF-8`;
      }
    }
  }
  return undefined;
}

/** At most 120 characters of what the client sent, as JSON writes it. */
const shown = (text: string) => JSON.stringify(text.length > 120 ? `${text.slice(0, 120)}…` : text);
