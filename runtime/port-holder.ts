/**
 * Whether a TCP port can be listened on now, and if not, which process holds it: a node whose
 * REST port is taken should say so before it starts anything else, and name the way out.
 */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { createServer } from 'node:net';

/** The error code of listening on `addr:port` now (EADDRINUSE, EACCES, …), or null when it can. */
export function listenProblem(addr: string, port: number): Promise<string | null> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    probe.listen({ port, host: addr, exclusive: true }, () => probe.close(() => resolve(null)));
  });
}

// /proc/net/tcp* rows: "sl local_address rem_address st … inode"; 0A is LISTEN.
const LISTEN = '0A';

/**
 * The process listening on TCP `port`, as `pid 1234 (node)`, when this user may see it (Linux'
 * /proc); undefined when it is not known. Best effort: it only words an error.
 */
export function portHolder(port: number): string | undefined {
  try {
    const inodes = new Set<string>();
    for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
      let text: string;
      try {
        text = readFileSync(table, 'utf8');
      } catch {
        continue;
      }
      for (const row of text.split('\n').slice(1)) {
        const cols = row.trim().split(/\s+/);
        if (cols.length < 10 || cols[3] !== LISTEN) continue;
        if (parseInt(cols[1].split(':')[1], 16) === port) inodes.add(cols[9]);
      }
    }
    if (!inodes.size) return undefined;
    for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
      let fds: string[];
      try {
        fds = readdirSync(`/proc/${pid}/fd`);
      } catch {
        continue;
      }
      for (const fd of fds) {
        let link: string;
        try {
          link = readlinkSync(`/proc/${pid}/fd/${fd}`);
        } catch {
          continue;
        }
        const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
        if (inode && inodes.has(inode)) {
          const name = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
          return `pid ${pid} (${name})`;
        }
      }
    }
  } catch {
    // Not Linux, or /proc not readable: the error says what it can without the holder.
  }
  return undefined;
}

/** A REST port that cannot be listened on, in one line with the way out; null when it can. */
export async function restPortProblem(addr: string, port: number): Promise<string | null> {
  // Port 0 always finds one.
  if (port === 0) return null;
  const code = await listenProblem(addr, port);
  if (code === null) return null;
  if (code !== 'EADDRINUSE') return `rest: cannot listen on ${addr}:${port} (${code})`;
  const holder = portHolder(port);
  return `rest: port ${port} on ${addr} is in use${holder ? ` by ${holder}` : ''}; start with --port <another> (or --port 0 for a free one), or set rest.port`;
}
