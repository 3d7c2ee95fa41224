import type { Handle } from '../runtime/wire/envelope.js';

/** Where a message goes: this node's root actor, an inbox (on this node or on `host`), or a full Handle. */
export type Target = 'root' | { host?: string; inbox: string } | Handle;

export const ROOT_INBOX = 'root';

export function isHandle(t: Target): t is Handle {
  return typeof t === 'object' && 'addr' in t && typeof t.addr === 'object' && t.addr !== null;
}

/**
 * Turns a target into the destination Handle, given the handle of the node the client talks
 * to. A shorthand on this node gets the node's host spelled out (wire format: the node's own host
 * means local) and, for `root`, the root actor's id/did; an actor elsewhere is addressed by
 * host and inbox only, since its key is not known here and routing needs neither.
 */
export function resolveTarget(to: Target, node: Handle): Handle {
  if (to === 'root') return node;
  // Typed callers cannot pass another string; a JavaScript one that did went to inbox ''.
  if (typeof to !== 'object' || to === null || (!isHandle(to) && typeof to.inbox !== 'string')) {
    throw new TypeError(`a target is 'root', {inbox, host?} or a handle, not ${JSON.stringify(to)}`);
  }
  if (isHandle(to)) {
    return { id: to.id ?? '', did: to.did ?? '', addr: { host: to.addr.host ?? '', inbox: to.addr.inbox ?? '' } };
  }
  const host = to.host || node.addr.host;
  if (host === node.addr.host && to.inbox === node.addr.inbox) return node;
  return { id: '', did: '', addr: { host, inbox: to.inbox } };
}
