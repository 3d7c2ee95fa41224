/**
 * Bounds on the reply bytes REST requests hold while they wait. Replies to a broadcast come
 * from anyone who hears it (and anyone can address the waiting inbox), so counting replies is
 * not enough: one peer answering with large envelopes pushed the node's memory from 196 MB to
 * 1.74 GB. Each broadcast holds at most `rest.max_broadcast_bytes`, and each REST client at
 * most `rest.max_pending_bytes_per_client` across all its waiting requests.
 */
import type { Envelope, Handle } from '../runtime/wire/envelope.js';

/** JSON punctuation, field names and the numbers of an encoded envelope, roughly. */
const FIXED_OVERHEAD = 256;

const handleBytes = (h: Handle) => h.id.length + h.did.length + h.addr.host.length + h.addr.inbox.length;
const base64 = (n: number) => Math.ceil(n / 3) * 4;

/**
 * About the size of `env` once encoded for the response (binary fields as base64): cheap, and
 * never below what the envelope holds in memory.
 */
export function envelopeBytes(env: Envelope): number {
  const binary = base64(env.msg.length) + base64(env.cap?.length ?? 0) + base64(env.sig?.length ?? 0);
  const text = env.be.length + (env.opt.cont?.length ?? 0) + (env.opt.topic?.length ?? 0) + handleBytes(env.to) + handleBytes(env.from);
  return FIXED_OVERHEAD + binary + text;
}

/** Reply bytes held per REST client, against one limit. */
export class ClientBytes {
  private readonly held = new Map<string, number>();

  constructor(readonly limit: number) {}

  /** A request's share of its client's allowance; released, whatever it took, when the request ends. */
  claim(client: string): ByteClaim {
    return new ByteClaim(this, client);
  }

  /** Takes `n` bytes for `client`; false (and nothing taken) when that would pass the limit. */
  take(client: string, n: number): boolean {
    const now = this.held.get(client) ?? 0;
    if (now + n > this.limit) return false;
    this.held.set(client, now + n);
    return true;
  }

  give(client: string, n: number): void {
    const left = (this.held.get(client) ?? 0) - n;
    if (left > 0) this.held.set(client, left);
    else this.held.delete(client);
  }
}

export class ByteClaim {
  private taken = 0;

  constructor(
    private readonly pool: ClientBytes,
    readonly client: string,
  ) {}

  take(n: number): boolean {
    if (!this.pool.take(this.client, n)) return false;
    this.taken += n;
    return true;
  }

  release(): void {
    this.pool.give(this.client, this.taken);
    this.taken = 0;
  }
}
