import { timingSafeEqual } from 'node:crypto';
import { unwatchFile, watchFile } from 'node:fs';
import { type ApiKeyRecord, KEY_FORMAT, readApiKeys, type Role, sha256 } from '../runtime/api-keys.js';
import type { Logger } from '../runtime/log.js';

/** Who a request is from, once authenticated. `id` names them for rate limits and logs; it is never a secret. */
export interface Principal {
  id: string;
  role: Role;
  via: 'api-key' | 'jwt';
}

/** The keys a running node accepts, re-read when `dms auth apikey create|revoke` changes the file. */
export class ApiKeyStore {
  private byId = new Map<string, ApiKeyRecord>();
  private stopWatching?: () => void;

  constructor(
    readonly path: string,
    private readonly log?: Logger,
  ) {
    this.reload();
  }

  private reload(): void {
    this.byId = new Map(readApiKeys(this.path).map((k) => [k.id, k]));
  }

  watch(intervalMs = 500): void {
    // Polling stat survives the atomic rename that replaces the file.
    const listener = () => {
      try {
        this.reload();
        this.log?.info({ keys: this.byId.size }, 'API keys reloaded');
      } catch (e) {
        this.log?.warn({ err: (e as Error).message }, 'API key file unreadable; keeping the keys loaded before');
      }
    };
    watchFile(this.path, { interval: intervalMs, persistent: false }, listener);
    this.stopWatching = () => unwatchFile(this.path, listener);
  }

  close(): void {
    this.stopWatching?.();
  }

  verify(presented: string): Principal | undefined {
    const m = KEY_FORMAT.exec(presented);
    if (!m) return undefined;
    const record = this.byId.get(m[1]);
    if (!record) return undefined;
    const ok = timingSafeEqual(Buffer.from(sha256(presented), 'hex'), Buffer.from(record.sha256, 'hex'));
    return ok ? { id: `apikey:${record.id}`, role: record.role, via: 'api-key' } : undefined;
  }
}

