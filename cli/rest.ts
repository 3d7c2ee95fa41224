/**
 * The node's plain REST routes (jobs, resources, allocations) for commands: JSON in and out,
 * server-sent events for following, and failures turned into one line a person can act on.
 */
import type { Command } from 'commander';
import { networkReason } from '../client/client.js';
import { restCredentials } from './commands/auth.js';
import { CliError, homeOf, noNodeHint, nodeUrl } from './context.js';

export interface ServerEvent {
  event: string;
  data: string;
}

export class NodeRest {
  constructor(
    readonly url: string,
    /** REST credentials (API key, bearer token) sent with every request. */
    private readonly credentials: Record<string, string> = {},
    /** The home whose node this is, named when it does not answer. */
    readonly home = '',
  ) {}

  get<T>(path: string): Promise<T> {
    return this.request<T>('GET', path);
  }

  post<T>(path: string, body: unknown): Promise<T> {
    return this.request<T>('POST', path, body);
  }

  delete<T>(path: string): Promise<T> {
    return this.request<T>('DELETE', path);
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const res = await this.fetch(method, path, body);
    const text = await res.text();
    if (!res.ok) throw new CliError(`${errorOf(text) ?? (text.trim() || res.statusText)} (HTTP ${res.status})`);
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new CliError(`the node answered ${method} ${path} with something that is not JSON`);
    }
  }

  /** Server-sent events from `path` until the node ends the stream. */
  async *events(path: string): AsyncGenerator<ServerEvent> {
    const res = await this.fetch('GET', path, undefined, 'text/event-stream');
    if (!res.ok) {
      const text = await res.text();
      throw new CliError(`${errorOf(text) ?? (text.trim() || res.statusText)} (HTTP ${res.status})`);
    }
    if (!res.body) return;
    const decoder = new TextDecoder();
    let buffered = '';
    for await (const bytes of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffered += decoder.decode(bytes, { stream: true });
      let end: number;
      // Events are separated by a blank line.
      while ((end = buffered.indexOf('\n\n')) >= 0) {
        const event = parseEvent(buffered.slice(0, end));
        buffered = buffered.slice(end + 2);
        if (event) yield event;
      }
    }
  }

  private async fetch(method: string, path: string, body: unknown, accept = 'application/json'): Promise<Response> {
    try {
      return await fetch(this.url + path, {
        method,
        headers: { ...this.credentials, accept, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      throw new CliError(`cannot reach the node at ${this.url}: ${networkReason(e)}; ${noNodeHint(this.home)}`);
    }
  }
}

/** The node of the command's home, with the credentials `dms actor` sends too (DMS_API_KEY, DMS_TOKEN). */
export const restFor = (cmd: Command): NodeRest => new NodeRest(nodeUrl(cmd), restCredentials(), homeOf(cmd));

function parseEvent(block: string): ServerEvent | null {
  let event = 'message';
  const data: string[] = [];
  for (const line of block.split('\n')) {
    if (line.startsWith(':')) continue; // a comment
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  return data.length > 0 ? { event, data: data.join('\n') } : null;
}

function errorOf(text: string): string | undefined {
  try {
    const body = JSON.parse(text) as { error?: unknown };
    return typeof body.error === 'string' ? body.error : undefined;
  } catch {
    return undefined;
  }
}
