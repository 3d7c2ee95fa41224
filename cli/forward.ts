/**
 * A port forward held for as long as the command runs (`dms jobs port-forward`, `dms ensemble
 * port-forward`): the listener is the node's, opened for the job's port and closed again when
 * the command is interrupted, never left behind.
 */
import type { Command } from 'commander';
import type { RestClient } from '../client/rest.js';
import type { Forward } from '../http/routes/ports.js';
import { output } from './context.js';

/** Opens the forward, prints it (`what` names the target), and closes it on SIGINT or SIGTERM. */
export async function forwardUntilInterrupted(cmd: Command, rest: RestClient, jobId: string, port: string, local: string | undefined, what: string): Promise<void> {
  const path = `/api/v1/jobs/${encodeURIComponent(jobId)}`;
  const forward = await rest.post<Forward>(`${path}/ports/${port}/forward`, local ? { local } : {});
  output(cmd, forward, `forwarding ${forward.local} -> ${what} port ${forward.port} (Ctrl-C stops)`);
  // A pending promise holds no event loop open: without a timer, node would exit (code 13) at once.
  const alive = setInterval(() => undefined, 1 << 30);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  clearInterval(alive);
  await rest.delete(`${path}/forwards/${forward.id}`).catch(() => undefined);
}
