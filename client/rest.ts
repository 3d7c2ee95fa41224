/**
 * HTTP to one node's REST interface: the actor routes DmsClient speaks (envelopes in, reply
 * envelopes out) and the plain routes (jobs, resources, allocations: JSON in and out, server-
 * sent events for following). Every failure is a ClientError, so callers (the CLI included)
 * tell an unreachable node from a refusal, a timeout or a broken answer in one way.
 */
import { errorText } from '../runtime/errors.js';
import { ClientError } from './errors.js';

export interface RestClientOptions {
  /** REST base URL of the node, e.g. `http://127.0.0.1:9999`. */
  url: string;
  /** Extra HTTP headers on every request (e.g. REST credentials). */
  headers?: Record<string, string>;
  /** The fetch to use (default the global one): proxies, instrumentation, tests. */
  fetch?: typeof fetch;
}

export interface RequestOptions {
  /** Give up (kind `timeout`) after this long; none by default, the node bounds its own waits. */
  deadlineMs?: number;
  signal?: AbortSignal;
}

/** One server-sent event: its `event` field (default `message`) and its joined `data` lines. */
export interface ServerEvent {
  event: string;
  data: string;
}

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE';

export class RestClient {
  readonly url: string;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: typeof fetch;

  constructor(opts: RestClientOptions) {
    this.url = opts.url.replace(/\/+$/, '');
    this.headers = { accept: 'application/json', ...opts.headers };
    this.fetchImpl = opts.fetch ?? globalThis.fetch;
  }

  get<T>(path: string, opts?: RequestOptions): Promise<T> {
    return this.json<T>('GET', path, undefined, opts);
  }

  post<T>(path: string, body: unknown, opts?: RequestOptions): Promise<T> {
    return this.json<T>('POST', path, JSON.stringify(body), opts);
  }

  put<T>(path: string, body: unknown, opts?: RequestOptions): Promise<T> {
    return this.json<T>('PUT', path, JSON.stringify(body), opts);
  }

  delete<T>(path: string, opts?: RequestOptions): Promise<T> {
    return this.json<T>('DELETE', path, undefined, opts);
  }

  /** The text of a successful answer; a body, when given, is JSON text. */
  async text(method: Method, path: string, body?: string, opts: RequestOptions = {}): Promise<string> {
    return (await this.answer(method, path, body, opts)).text;
  }

  /**
   * One page of a list and how many items match over all pages (the `X-Total-Count` header;
   * the page's own length when the node does not say).
   */
  async page<T>(path: string, opts: RequestOptions = {}): Promise<{ items: T[]; total: number }> {
    const { text, res } = await this.answer('GET', path, undefined, opts);
    const items = this.parse<T[]>(text, 'GET', path);
    if (!Array.isArray(items)) throw new ClientError({ kind: 'protocol', url: this.url + path, status: res.status, message: `the node answered GET ${path} with something that is not a list` });
    const total = Number(res.headers.get('x-total-count'));
    return { items, total: Number.isSafeInteger(total) && total >= items.length ? total : items.length };
  }

  /**
   * Every item of a paged list at `path` (which carries its limit and filters): read on from the
   * count received until the total or an empty page, since a page may hold fewer than asked (the
   * node bounds a page in bytes too). Items added meanwhile shift the pages; none is read twice.
   */
  async everyPage<T>(path: string, opts: RequestOptions = {}): Promise<{ items: T[]; total: number }> {
    const items: T[] = [];
    const join = path.includes('?') ? '&' : '?';
    for (;;) {
      const page = await this.page<T>(`${path}${join}offset=${items.length}`, opts);
      items.push(...page.items);
      if (page.items.length === 0 || items.length >= page.total) return { items, total: Math.max(page.total, items.length) };
    }
  }

  private async answer(method: Method, path: string, body: string | undefined, opts: RequestOptions): Promise<{ text: string; res: Response }> {
    const { res, url, deadline } = await this.send(method, path, body, 'application/json', opts);
    let text: string;
    try {
      text = await res.text();
    } catch (e) {
      throw this.failure(e, url, opts, deadline);
    }
    if (!res.ok) throw refusal(res, text, url);
    return { text, res };
  }

  /**
   * A successful answer as it is, its body unread (a file, a tar stream). A request with a body
   * to stream goes another way (cli/files.ts): Node 20's fetch reads such a body into memory whole.
   */
  async response(method: Method, path: string, opts: RequestOptions & { accept?: string; headers?: Record<string, string> } = {}): Promise<Response> {
    const url = this.url + path;
    const headers = { ...this.headersFor(opts.accept ?? '*/*'), ...opts.headers };
    let res: Response;
    try {
      res = await this.fetchImpl(url, { method, headers, signal: opts.signal });
    } catch (e) {
      throw this.failure(e, url, opts);
    }
    if (!res.ok) throw refusal(res, await res.text().catch(() => ''), url);
    return res;
  }

  /** The headers a request to the node carries (its credentials among them), for a caller that sends it another way. */
  headersFor(accept: string, contentType?: string): Record<string, string> {
    return { ...this.headers, accept, ...(contentType ? { 'content-type': contentType } : {}) };
  }

  /** Server-sent events from `path` until the node ends the stream. */
  async *events(path: string, opts: Omit<RequestOptions, 'deadlineMs'> = {}): AsyncGenerator<ServerEvent> {
    const { res, url } = await this.send('GET', path, undefined, 'text/event-stream', opts);
    if (!res.ok) throw refusal(res, await res.text(), url);
    if (!res.body) return;
    const decoder = new TextDecoder();
    let buffered = '';
    try {
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
    } catch (e) {
      // Only the body's reads throw here: a reader that stops early returns through the yield.
      if (opts.signal?.aborted) throw new ClientError({ kind: 'aborted', url, message: `request to ${url} aborted`, cause: e });
      // fetch's own words were a bare "terminated".
      throw new ClientError({ kind: 'protocol', url, message: `the event stream from ${url} broke off: ${networkReason(e)}`, cause: e });
    }
  }

  private async json<T>(method: Method, path: string, body: string | undefined, opts?: RequestOptions): Promise<T> {
    return this.parse<T>(await this.text(method, path, body, opts), method, path);
  }

  private parse<T>(text: string, method: Method, path: string): T {
    try {
      return JSON.parse(text) as T;
    } catch {
      throw notJson(method, path, this.url + path, 200);
    }
  }

  private async send(method: Method, path: string, body: string | undefined, accept: string, opts: RequestOptions) {
    const url = this.url + path;
    const deadline = opts.deadlineMs === undefined ? undefined : AbortSignal.timeout(opts.deadlineMs);
    const signals = [deadline, opts.signal].filter((s): s is AbortSignal => s !== undefined);
    // The node refuses a body of any other type (415): say it on every request that has one.
    const headers = this.headersFor(accept, body === undefined ? undefined : 'application/json');
    try {
      const res = await this.fetchImpl(url, { method, headers, body, signal: signals.length ? AbortSignal.any(signals) : undefined });
      return { res, url, deadline };
    } catch (e) {
      throw this.failure(e, url, opts, deadline);
    }
  }

  /** Why no answer came: the caller gave up, the deadline passed, or nothing answers at all. */
  private failure(e: unknown, url: string, { signal, deadlineMs = 0 }: RequestOptions, deadline?: AbortSignal): ClientError {
    if (signal?.aborted) return new ClientError({ kind: 'aborted', url, message: `request to ${url} aborted`, cause: e });
    if (deadline?.aborted) return new ClientError({ kind: 'timeout', url, message: `no answer from ${url} within ${Math.round(deadlineMs / 1000)} s`, cause: e });
    return unreachable(this.url, url, networkReason(e), e);
  }
}

/** No answer at all from the node at `nodeUrl` to a request to `url`; `reason` says why (networkReason). */
export const unreachable = (nodeUrl: string, url: string, reason: string, cause: unknown): ClientError =>
  new ClientError({ kind: 'unreachable', url, message: `cannot reach the node at ${nodeUrl}: ${reason}`, cause });

/** A successful answer to `method path` whose text is not the JSON the route answers. */
export const notJson = (method: string, path: string, url: string, status: number): ClientError =>
  new ClientError({ kind: 'protocol', url, status, message: `the node answered ${method} ${path} with something that is not JSON` });

/** A non-2xx answer: the node's own `{"error"}` text when it gave one; 408 is a timeout. */
const refusal = (res: Response, text: string, url: string): ClientError => refusalOf(res.status, res.statusText, text, url);

/** The same, from the status, its reason phrase and the body's text of an answer however it was read. */
export function refusalOf(status: number, statusText: string, text: string, url: string): ClientError {
  const nodeError = errorBody(text);
  return new ClientError({
    kind: status === 408 ? 'timeout' : 'http',
    url,
    status,
    nodeError,
    message: `${nodeError ?? (snippet(text) || statusText)} (HTTP ${status})`,
  });
}

function errorBody(text: string): string | undefined {
  try {
    const body: unknown = JSON.parse(text);
    if (body && typeof body === 'object' && typeof (body as { error?: unknown }).error === 'string') return (body as { error: string }).error;
  } catch {
    // not JSON: the caller falls back to the raw text
  }
  return undefined;
}

/** fetch hides the socket error in `cause`; its code says more than "fetch failed". */
export function networkReason(e: unknown): string {
  const cause = (e as { cause?: { code?: unknown; message?: unknown } }).cause;
  const code = typeof cause?.code === 'string' ? cause.code : undefined;
  const known: Record<string, string> = {
    ECONNREFUSED: 'connection refused',
    ENOTFOUND: 'host not found',
    ECONNRESET: 'connection reset',
    EHOSTUNREACH: 'host unreachable',
    ETIMEDOUT: 'connection timed out',
    UND_ERR_SOCKET: 'the connection closed',
    UND_ERR_BODY_TIMEOUT: 'nothing came for 300 s (Node\'s fetch gives up on a quiet answer then)',
  };
  if (code) return known[code] ?? code;
  return typeof cause?.message === 'string' ? cause.message : errorText(e);
}

export function snippet(text: string): string {
  const t = text.trim();
  return t.length > 200 ? `${t.slice(0, 200)}…` : t;
}

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
