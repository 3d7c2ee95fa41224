import { type H3Event, HTTPResponse } from 'h3';
import type { Logger } from '../runtime/log.js';
import { asClientGone } from './body.js';
import { errorBody, JsonBody } from './errors.js';

/**
 * Wraps a route so every outcome is a JSON response: values are serialized, JsonBody is sent
 * as it is, errors become `{"error": …}` with their status, and Responses (h3's too, such as a
 * stream of server-sent events) pass through.
 * Bodies go back as strings with status and headers on `event.res`, which h3 sends without
 * the web-stream round trip a `Response` object costs.
 */
export function route(log: Logger, fn: (event: H3Event) => unknown | Promise<unknown>) {
  return async (event: H3Event): Promise<string | Response | HTTPResponse> => {
    let body: JsonBody;
    try {
      const out = await fn(event);
      if (out instanceof Response || out instanceof HTTPResponse) return out;
      body = out instanceof JsonBody ? out : new JsonBody(JSON.stringify(out));
    } catch (e) {
      body = errorBody(asClientGone(event, e), (err, id) => log.error({ err, error_id: id, path: event.url.pathname }, 'request failed'));
    }
    event.res.status = body.status;
    const headers = event.res.headers;
    headers.set('content-type', 'application/json; charset=utf-8');
    for (const [k, v] of Object.entries(body.headers)) headers.set(k, v);
    return body.text;
  };
}
